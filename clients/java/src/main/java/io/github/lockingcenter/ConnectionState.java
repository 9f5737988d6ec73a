package io.github.lockingcenter;

/** The states of a session's connection, in Apache Curator's words. */
public enum ConnectionState {
    /** The session was opened. */
    CONNECTED,
    /** The connection dropped or went silent; the session lives on the server, and the client resumes it. */
    SUSPENDED,
    /** The session was resumed on a new connection, its locks reconciled. */
    RECONNECTED,
    /** The session ended on the server (expired or unknown) or by the client's count of its TTL: every lock is lost. */
    LOST
}
