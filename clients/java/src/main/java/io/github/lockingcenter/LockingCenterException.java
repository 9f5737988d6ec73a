package io.github.lockingcenter;

import java.io.IOException;

/**
 * The server's answer was a failure. Subclasses tell which; other I/O
 * failures (connection refused, reset, closed early) are the plain
 * {@link IOException}s of {@code java.net} and {@code java.nio}.
 */
public class LockingCenterException extends IOException {
    private static final long serialVersionUID = 1L;

    public LockingCenterException(String message) {
        super(message);
    }
}
