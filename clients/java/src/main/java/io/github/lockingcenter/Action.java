package io.github.lockingcenter;

/** The action byte that starts a mutex-port request. */
public enum Action {
    LOCK(1),
    UNLOCK(2),
    RESET_KEY(3),
    RESET_SOURCE(4),
    TRY_LOCK(5);

    private final byte wire;

    Action(int wire) {
        this.wire = (byte) wire;
    }

    /** The byte on the wire. */
    public byte wire() {
        return wire;
    }

    boolean hasKey() {
        return this != RESET_SOURCE;
    }

    boolean hasSource() {
        return this == LOCK || this == TRY_LOCK || this == RESET_SOURCE;
    }
}
