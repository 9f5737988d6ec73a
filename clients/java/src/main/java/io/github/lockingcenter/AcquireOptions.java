package io.github.lockingcenter;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

/**
 * How an acquire asks for its key. Immutable: each method returns a copy
 * with one thing changed, starting from {@link #defaults()} (wait for ever,
 * exclusive, no lease, the server's lock-delay, priority 0).
 */
public final class AcquireOptions {
    private static final AcquireOptions DEFAULTS = new AcquireOptions();

    long waitMs = -1;
    long leaseMs;
    long delayMs = -1;
    boolean shared;
    long limit;
    int priority;
    boolean reentrant;
    String owner;
    String note;

    private AcquireOptions() {}

    private AcquireOptions copy() {
        AcquireOptions o = new AcquireOptions();
        o.waitMs = waitMs;
        o.leaseMs = leaseMs;
        o.delayMs = delayMs;
        o.shared = shared;
        o.limit = limit;
        o.priority = priority;
        o.reentrant = reentrant;
        o.owner = owner;
        o.note = note;
        return o;
    }

    /** Wait for ever, exclusive, no lease. */
    public static AcquireOptions defaults() {
        return DEFAULTS;
    }

    /**
     * Waits at most d for the key, measured by the server ({@code wait_ms}):
     * past it the acquire fails with {@link SessionException.Timeout} and
     * the request has left the queue. d must be positive (a try is
     * {@link Session#tryAcquire}).
     */
    public AcquireOptions waitFor(Duration d) {
        AcquireOptions o = copy();
        o.waitMs = millis(d, "wait");
        if (o.waitMs == 0) {
            throw new IllegalArgumentException("a wait of 0 is a try: use tryAcquire");
        }
        return o;
    }

    /** Waits for ever (the default). */
    public AcquireOptions waitForever() {
        AcquireOptions o = copy();
        o.waitMs = -1;
        return o;
    }

    /**
     * Gives the lock a lease of d: the server ends it that long after the
     * grant unless renewed ({@link Lock#renew()}), and the client gives it
     * up a little before (see the README). Zero: no lease.
     */
    public AcquireOptions lease(Duration d) {
        AcquireOptions o = copy();
        o.leaseMs = millis(d, "lease");
        return o;
    }

    /** After a loss by lease or session expiry, nobody gets the key for d (at most 60 s). */
    public AcquireOptions lockDelay(Duration d) {
        AcquireOptions o = copy();
        o.delayMs = millis(d, "lock-delay");
        if (o.delayMs > 60_000) {
            throw new IllegalArgumentException("lock-delay over 60 s: " + d);
        }
        return o;
    }

    /** Shared (read) mode: any number of shared holders at once. */
    public AcquireOptions shared() {
        AcquireOptions o = copy();
        o.shared = true;
        return o;
    }

    /** A semaphore of n holders (every holder and waiter of the key names the same n). */
    public AcquireOptions limit(int n) {
        if (n < 0) {
            throw new IllegalArgumentException("limit below 0: " + n);
        }
        AcquireOptions o = copy();
        o.limit = n;
        return o;
    }

    /** Higher is served first among waiters; it ages one a second while waiting. */
    public AcquireOptions priority(int p) {
        AcquireOptions o = copy();
        o.priority = p;
        return o;
    }

    /**
     * Reentrant for owner: an acquire of a key the session holds with the
     * same owner counts up on the held lock (same token). Without an owner
     * (null) the reentrant acquires of the session share one owner.
     */
    public AcquireOptions reentrant(String owner) {
        AcquireOptions o = copy();
        o.reentrant = true;
        o.owner = checkOwner(owner);
        return o;
    }

    /**
     * Names who within the session acquires, for deadlock detection (at
     * most 127 bytes). Without it each acquire is an owner of its own, so
     * that threads sharing a session queue for a key as separate clients do.
     */
    public AcquireOptions owner(String owner) {
        AcquireOptions o = copy();
        o.owner = checkOwner(owner);
        return o;
    }

    /** The holder's note, shown wherever the lock is listed (UTF-8, at most 1,024 bytes; no secrets). */
    public AcquireOptions note(String note) {
        if (note != null && Codec.utf8(note, "note").length > 1024) {
            throw new IllegalArgumentException("note over 1,024 bytes");
        }
        AcquireOptions o = copy();
        o.note = note;
        return o;
    }

    private static String checkOwner(String owner) {
        if (owner != null && Codec.utf8(owner, "owner").length > 127) {
            throw new IllegalArgumentException("owner over 127 bytes");
        }
        return owner;
    }

    static long millis(Duration d, String what) {
        if (d.isNegative()) {
            throw new IllegalArgumentException(what + " below 0: " + d);
        }
        long ms = d.toMillis() + (d.minusMillis(d.toMillis()).isZero() ? 0 : 1);
        if (ms > 0xffff_ffffL) {
            throw new IllegalArgumentException(what + " over 2^32 ms: " + d);
        }
        return ms;
    }

    /** The fields of an ACQUIRE of key with these options; owner is the one to send. */
    List<Frame.Field> fields(byte[] key, long wait, String owner) {
        List<Frame.Field> f = new ArrayList<>(8);
        f.add(Frame.Field.bytes(Frame.KEY, key));
        if (wait >= 0) {
            f.add(Frame.Field.u32(Frame.WAIT, wait));
        }
        if (leaseMs > 0) {
            f.add(Frame.Field.u32(Frame.LEASE, leaseMs));
        }
        if (delayMs >= 0) {
            f.add(Frame.Field.u32(Frame.DELAY, delayMs));
        }
        if (shared) {
            f.add(Frame.Field.u8(Frame.MODE, 1));
        }
        if (limit > 0) {
            f.add(Frame.Field.u32(Frame.LIMIT, limit));
        }
        if (priority != 0) {
            f.add(Frame.Field.u32(Frame.PRIORITY, priority & 0xffff_ffffL));
        }
        if (reentrant) {
            f.add(Frame.Field.u8(Frame.REENTRANT, 1));
        }
        if (owner != null && !owner.isEmpty()) {
            f.add(Frame.Field.bytes(Frame.OWNER, owner.getBytes(StandardCharsets.UTF_8)));
        }
        if (note != null && !note.isEmpty()) {
            f.add(Frame.Field.str(Frame.NOTE, note));
        }
        return f;
    }
}
