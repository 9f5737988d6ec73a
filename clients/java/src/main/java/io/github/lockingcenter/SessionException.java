package io.github.lockingcenter;

/**
 * A failure of the session client: one family, each kind a nested subclass
 * to catch on its own. A try that finds the key held is never one of these
 * ({@link Session#tryAcquire} returns an empty {@code Optional}). When the
 * server refused, {@link #code()} is its code's name ({@code "deadlock"},
 * {@code "stale_token"}, ...) and {@link #serverMessage()} its words; both
 * are empty for a failure the client found itself.
 */
public class SessionException extends LockingCenterException {
    private static final long serialVersionUID = 1L;

    private final String code;
    private final String serverMessage;
    /** The server's code as a number (0: none), and whether it came in a GOODBYE. */
    long wire;
    boolean goodbye;

    SessionException(String message, String code, String serverMessage) {
        super(serverMessage.isEmpty() ? message : message + ": " + serverMessage);
        this.code = code;
        this.serverMessage = serverMessage;
    }

    SessionException(String message) {
        this(message, "", "");
    }

    /** The server's code name, or "" when the client found the failure itself. */
    public String code() {
        return code;
    }

    /** The server's message, or "". */
    public String serverMessage() {
        return serverMessage;
    }

    /** Builds the exception of a server's code for an operation such as {@code acquire "k"}. */
    static SessionException of(String op, long code, String msg) {
        String name = Frame.codeName(code);
        String what = op + ": the server refused it (" + name + ")";
        SessionException e = build(what, code, name, msg);
        e.wire = code;
        return e;
    }

    private static SessionException build(String what, long code, String name, String msg) {
        switch ((int) code) {
            case 2: return new Timeout(what, name, msg);
            case 3: return new Cancelled(what, name, msg);
            case 5: return new StaleToken(what, msg);
            case 9: case 12: case 14: return new SessionExpired(what, name, msg);
            case 13: return new Protocol(what, name, msg);
            case 16: return new Deadlock(what, name, msg);
            case 17: return new LimitMismatch(what, name, msg);
            case 18: return new UpgradeRefused(what, name, msg);
            case 19: return new NotLeader(what, name, msg, "");
            case 21: return new Unauthenticated(what, name, msg);
            case 22: return new Forbidden(what, name, msg);
            case 23: return new RateLimited(what, name, msg);
            case 24: return new OverLimit(what, name, msg);
            default: return new Refused(what, name, msg);
        }
    }

    /** The server's wait bound ran out, or no answer came within the client's bound. */
    public static class Timeout extends SessionException {
        private static final long serialVersionUID = 1L;
        Timeout(String m, String c, String s) { super(m, c, s); }
        Timeout(String m) { super(m); }
    }

    /** A CANCEL took the request out of its queue. */
    public static class Cancelled extends SessionException {
        private static final long serialVersionUID = 1L;
        Cancelled(String m, String c, String s) { super(m, c, s); }
    }

    /** The lock is no longer held; {@link #reason()} says why. */
    public static class LockLost extends SessionException {
        private static final long serialVersionUID = 1L;
        private final LostReason reason;
        LockLost(String m, LostReason reason, String c, String s) {
            super(m, c, s);
            this.reason = reason;
        }
        public LostReason reason() { return reason; }
    }

    /** A release or renew named a token that is not a holder of the key now: nothing changed. */
    public static class StaleToken extends LockLost {
        private static final long serialVersionUID = 1L;
        StaleToken(String m, String s) { super(m, LostReason.STALE_TOKEN, "stale_token", s); }
    }

    /** The session expired, or the server no longer knows it. */
    public static class SessionExpired extends SessionException {
        private static final long serialVersionUID = 1L;
        SessionExpired(String m, String c, String s) { super(m, c, s); }
        SessionExpired(String m) { super(m); }
    }

    /** The session was closed by {@link Session#close()}. */
    public static class SessionClosed extends SessionException {
        private static final long serialVersionUID = 1L;
        SessionClosed(String m) { super(m); }
    }

    /** Every address answered that it does not lead; {@link #leader()} is the last one named. */
    public static class NotLeader extends SessionException {
        private static final long serialVersionUID = 1L;
        private final String leader;
        NotLeader(String m, String c, String s, String leader) {
            super(m, c, s);
            this.leader = leader;
        }
        /** The leader's address the node named, or "". */
        public String leader() { return leader; }
    }

    /** The token was missing or wrong. */
    public static class Unauthenticated extends SessionException {
        private static final long serialVersionUID = 1L;
        Unauthenticated(String m, String c, String s) { super(m, c, s); }
    }

    /** The principal may not use that key, or the request needs an admin. */
    public static class Forbidden extends SessionException {
        private static final long serialVersionUID = 1L;
        Forbidden(String m, String c, String s) { super(m, c, s); }
    }

    /** The source sent more requests than the server allows; nothing changed. */
    public static class RateLimited extends SessionException {
        private static final long serialVersionUID = 1L;
        RateLimited(String m, String c, String s) { super(m, c, s); }
    }

    /** The source holds or waits for as many keys, or the server has as many connections, as allowed. */
    public static class OverLimit extends SessionException {
        private static final long serialVersionUID = 1L;
        OverLimit(String m, String c, String s) { super(m, c, s); }
    }

    /** The acquire would close a cycle of waits; it did not wait. */
    public static class Deadlock extends SessionException {
        private static final long serialVersionUID = 1L;
        Deadlock(String m, String c, String s) { super(m, c, s); }
    }

    /** The acquire's limit is not the key's; the server's message names the key's. */
    public static class LimitMismatch extends SessionException {
        private static final long serialVersionUID = 1L;
        LimitMismatch(String m, String c, String s) { super(m, c, s); }
    }

    /** A shared holder asked for the key exclusively. */
    public static class UpgradeRefused extends SessionException {
        private static final long serialVersionUID = 1L;
        UpgradeRefused(String m, String c, String s) { super(m, c, s); }
    }

    /** Bytes that break the protocol, from the server or as the server saw ours. */
    public static class Protocol extends SessionException {
        private static final long serialVersionUID = 1L;
        Protocol(String m, String c, String s) { super(m, c, s); }
        Protocol(String m) { super(m); }
    }

    /** The connection could not be made, or dropped before the answer. */
    public static class Connection extends SessionException {
        private static final long serialVersionUID = 1L;
        Connection(String m, Throwable cause) {
            super(cause == null ? m : m + ": " + cause);
            if (cause != null) {
                initCause(cause);
            }
        }
    }

    /** Another refusal: a bad request, not durable, withdrawn by a reset, a field the server does not know. */
    public static class Refused extends SessionException {
        private static final long serialVersionUID = 1L;
        Refused(String m, String c, String s) { super(m, c, s); }
    }
}
