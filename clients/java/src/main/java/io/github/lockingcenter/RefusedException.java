package io.github.lockingcenter;

/**
 * The server answered {@code '-'}: the request was malformed, could not be
 * made durable, or was withdrawn by a reset of its source.
 */
public class RefusedException extends LockingCenterException {
    private static final long serialVersionUID = 1L;

    public RefusedException(String message) {
        super(message);
    }
}
