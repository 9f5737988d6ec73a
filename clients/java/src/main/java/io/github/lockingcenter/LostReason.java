package io.github.lockingcenter;

/** Why a held lock was lost. */
public enum LostReason {
    /** A reset (lc-cli reset, the management port, the v1 mutex port) took the key. */
    RESET,
    /** The lock's lease ran out, on the server or by the client's own count. */
    LEASE_EXPIRED,
    /** The session expired, or the client heard nothing from the server within its TTL. */
    SESSION_EXPIRED,
    /** The session was closed while the server could not be told; the server ends it with the TTL. */
    SESSION_CLOSED,
    /** The server no longer held it when the client named its token. */
    STALE_TOKEN,
    /** The server no longer held it when the session resumed after a drop. */
    LOST_WHILE_AWAY,
    /** The server ended the connection for a protocol error, and the session with it. */
    PROTOCOL_ERROR,
    /** Another code from the server. */
    OTHER;

    static LostReason of(long code) {
        switch ((int) code) {
            case 4: return RESET;
            case 11: return LEASE_EXPIRED;
            case 9: case 12: case 14: return SESSION_EXPIRED;
            case 5: return STALE_TOKEN;
            default: return OTHER;
        }
    }
}
