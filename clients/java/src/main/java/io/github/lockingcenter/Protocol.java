package io.github.lockingcenter;

/**
 * Bytes of the mutex port. A connection carries one request and one answer
 * byte. A request is the action byte, then the key as one length byte and
 * the key's bytes (every action but RESET_SOURCE), then the source the same
 * way (LOCK, TRY_LOCK, RESET_SOURCE).
 */
public final class Protocol {
    /** Longest key, in bytes; keys are 1 to 127 bytes. */
    public static final int MAX_KEY_LENGTH = 127;
    /** Longest source, in bytes; sources are 0 to 127 bytes. */
    public static final int MAX_SOURCE_LENGTH = 127;

    static final byte ANSWER_OK = '+';
    static final byte ANSWER_FAILED = '-';
    static final byte ANSWER_BUSY = '#';

    private Protocol() {}

    /**
     * Returns the wire bytes of one request. The key is left out for
     * RESET_SOURCE, the source for UNLOCK and RESET_KEY (either may then be
     * null).
     *
     * @throws IllegalArgumentException when the action's key is empty or
     *     longer than {@link #MAX_KEY_LENGTH}, or its source is longer than
     *     {@link #MAX_SOURCE_LENGTH}
     */
    public static byte[] encodeRequest(Action action, byte[] key, byte[] source) {
        int size = 1;
        if (action.hasKey()) {
            checkKey(key);
            size += 1 + key.length;
        }
        if (action.hasSource()) {
            checkSource(source);
            size += 1 + source.length;
        }
        byte[] out = new byte[size];
        out[0] = action.wire();
        int n = 1;
        if (action.hasKey()) {
            n = put(out, n, key);
        }
        if (action.hasSource()) {
            put(out, n, source);
        }
        return out;
    }

    /** Returns what {@code answer} means for a request of {@code action}. */
    public static Outcome interpretAnswer(Action action, byte answer) {
        if (answer == ANSWER_OK) {
            return Outcome.OK;
        }
        if (answer == ANSWER_BUSY && action == Action.TRY_LOCK) {
            return Outcome.BUSY;
        }
        return Outcome.FAILED;
    }

    static void checkKey(byte[] key) {
        if (key == null || key.length < 1 || key.length > MAX_KEY_LENGTH) {
            throw new IllegalArgumentException("key must be 1 to " + MAX_KEY_LENGTH + " bytes, got "
                    + (key == null ? "null" : key.length));
        }
    }

    static void checkSource(byte[] source) {
        if (source == null || source.length > MAX_SOURCE_LENGTH) {
            throw new IllegalArgumentException("source must be at most " + MAX_SOURCE_LENGTH + " bytes, got "
                    + (source == null ? "null" : source.length));
        }
    }

    private static int put(byte[] out, int at, byte[] s) {
        out[at] = (byte) s.length;
        System.arraycopy(s, 0, out, at + 1, s.length);
        return at + 1 + s.length;
    }
}
