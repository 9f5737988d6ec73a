package io.github.lockingcenter;

/** The server answered a byte the protocol does not define for the request. */
public class UnexpectedAnswerException extends LockingCenterException {
    private static final long serialVersionUID = 1L;

    private final byte answer;

    public UnexpectedAnswerException(String message, byte answer) {
        super(message);
        this.answer = answer;
    }

    /** The byte the server answered. */
    public byte answer() {
        return answer;
    }
}
