package io.github.lockingcenter;

/** What an answer byte means for a request. */
public enum Outcome {
    /** {@code '+'}: done; for a lock, granted. */
    OK,
    /** {@code '#'} to a try-lock: another holder has the key. Not a failure. */
    BUSY,
    /** {@code '-'}, or a byte the protocol does not define for the request. */
    FAILED
}
