package io.github.lockingcenter;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;

/**
 * A lock the session holds: its key, its fencing token, how it ends. It
 * has no thread affinity: any thread may release, renew or orphan it.
 * {@link #close()} releases it, for try-with-resources.
 */
public final class Lock implements AutoCloseable {
    /** Hears that a lock was lost, on the session's callback thread. */
    @FunctionalInterface
    public interface LostListener {
        void lost(Lock lock, LostReason reason);
    }

    enum State { HELD, RELEASED, ORPHANED, LOST }

    final Session session;
    final String key;
    final byte[] keyBytes;
    final long token;
    final long count;

    // Guarded by the session's lock.
    Session.Hold hold;
    State state = State.HELD;
    SessionException.LockLost cause;
    final List<LostListener> listeners = new ArrayList<>(0);

    Lock(Session session, String key, byte[] keyBytes, long token, long count, Session.Hold hold) {
        this.session = session;
        this.key = key;
        this.keyBytes = keyBytes;
        this.token = token;
        this.count = count;
        this.hold = hold;
    }

    public String key() {
        return key;
    }

    /**
     * The fencing token: an unsigned 64-bit number in a long (a token
     * above 2^63 is negative as a signed long). Compare tokens with
     * {@link Long#compareUnsigned}, print them with {@link #tokenString()}.
     */
    public long token() {
        return token;
    }

    /** The token in decimal, unsigned ({@link Long#toUnsignedString}). */
    public String tokenString() {
        return Long.toUnsignedString(token);
    }

    /** The reentrancy count the server gave this grant (1 for a first acquire). */
    public long count() {
        return count;
    }

    /** True until the lock is released, orphaned or lost. */
    public boolean isHeld() {
        return session.lockState(this) == State.HELD;
    }

    /** Why the lock was lost, when it was (empty while held, released or orphaned). */
    public Optional<SessionException.LockLost> lostCause() {
        return Optional.ofNullable(session.cause(this));
    }

    /**
     * Calls listener when the lock is lost (not when it is released or
     * orphaned), once; at once when it already was.
     */
    public void onLost(LostListener listener) {
        session.onLost(this, listener);
    }

    /**
     * Releases the lock and waits for the server's answer, at most the
     * read timeout. A released or orphaned lock: nothing happens.
     *
     * @throws SessionException.LockLost when the lock was lost before
     * @throws SessionException.Timeout no answer within the read timeout
     *     (the release is sent again after a reconnect)
     */
    public void release() throws SessionException, InterruptedException {
        session.release(this);
    }

    /** Renews the lease for its last length ({@link AcquireOptions#lease}). */
    public void renew() throws SessionException, InterruptedException {
        session.renew(this, 0);
    }

    /** Renews the lease for lease from now (it gives a lock without one a lease). */
    public void renew(Duration lease) throws SessionException, InterruptedException {
        session.renew(this, AcquireOptions.millis(lease, "lease"));
    }

    /**
     * Stops caring about the lock without releasing it: the server keeps it
     * until its lease, the session's end or a reset; it is no longer held
     * here.
     */
    public void orphan() {
        session.orphan(this);
    }

    /** {@link #release()}, for try-with-resources. */
    @Override
    public void close() throws SessionException, InterruptedException {
        release();
    }

    @Override
    public String toString() {
        return "Lock[" + key + " token " + tokenString() + "]";
    }
}
