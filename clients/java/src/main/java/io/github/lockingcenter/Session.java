package io.github.lockingcenter;

import java.io.BufferedInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.ReentrantLock;
import java.util.function.Consumer;
import java.util.function.Function;
import javax.net.ssl.SNIHostName;
import javax.net.ssl.SSLParameters;
import javax.net.ssl.SSLSocket;

/**
 * A session of the session protocol with a Locking-Center server: one
 * connection, kept open, that carries every lock the session takes.
 * {@link #connect} opens it; {@link #close()} ends it and releases its
 * locks, for try-with-resources. Safe for use by many threads at once.
 *
 * <p>The session pings at the server's keepalive when it has nothing else
 * to say. A connection that brings nothing for the keepalive plus a margin
 * (a tenth, at least 250 ms) is dead: the session reconnects, following the
 * leader a node names and then every address in turn, and resumes within
 * the TTL with its locks and waiting requests intact (state SUSPENDED, then
 * RECONNECTED). When the server has said nothing for the TTL less a margin
 * (a tenth, at least 50 ms), counted from the sending of the last request
 * it answered, the session ends here as the server may end it (state
 * LOST): every lock is lost with {@link LostReason#SESSION_EXPIRED} and
 * every call fails with {@link SessionException.SessionExpired}.
 *
 * <p>Threads: a loop (writes, keepalive, reconnects), a reader per
 * connection, a timer, and a callback thread that runs the listeners and
 * completes the futures of {@link #acquireAsync}.
 */
public final class Session implements AutoCloseable {
    /** What the client allows between the server's measuring of a left_ms and its frame's arrival here. */
    static final long DELIVERY_BOUND_NS = TimeUnit.MILLISECONDS.toNanos(100);

    private static final AtomicLong SESSIONS = new AtomicLong();

    /** One lock the server holds for the session, with the Locks that count in it. */
    static final class Hold {
        final String key;
        final byte[] keyBytes;
        final long token;
        final List<Lock> locks = new ArrayList<>(1);
        ScheduledFuture<?> lease;
        int gen;

        Hold(String key, byte[] keyBytes, long token) {
            this.key = key;
            this.keyBytes = keyBytes;
            this.token = token;
        }
    }

    /** One request from its sending until its answer. */
    private static final class Request {
        final int type;
        long id;
        byte[] frame;
        long sentAt;
        boolean sent;
        boolean resent;
        boolean decided; // acquire: its result is settled (or it was given up)
        boolean abandoned; // acquire: its caller has gone
        boolean async;
        AcquireFuture acquire;
        CompletableFuture<Frame> answer;
        String key;
        byte[] keyBytes;
        AcquireOptions opts;
        long target;
        Lock lock;
        long token;

        Request(int type) {
            this.type = type;
        }
    }

    /** One connection of the session. */
    private static final class Conn {
        final String addr;
        final Socket socket;
        final InputStream in;
        final OutputStream out;
        final byte[] head = new byte[4];
        Frame welcome; // the handshake's answer
        final CountDownLatch dead = new CountDownLatch(1);
        volatile long writingSince;

        Conn(String addr, Socket socket) throws IOException {
            this.addr = addr;
            this.socket = socket;
            this.in = new BufferedInputStream(socket.getInputStream(), 1 << 16);
            this.out = socket.getOutputStream();
        }

        void write(byte[] b) throws IOException {
            writingSince = System.nanoTime() | 1;
            try {
                out.write(b);
            } finally {
                writingSince = 0;
            }
        }

        void close() {
            try {
                socket.close();
            } catch (IOException ignored) {
                // closing
            }
        }
    }

    private record HeldItem(String key, long request, long count, long leftMs, boolean leased) {}

    /** What a resume's WELCOME said, until the answer of the PING sent right after the RESUME. */
    private static final class ResumeState {
        long sentAt;
        long syncId;
        long applied;
        final Map<Long, HeldItem> held = new HashMap<>();
        final Map<Long, Long> byReq = new HashMap<>();
        final Set<Long> parked = new HashSet<>();
        final Set<Long> fresh = new HashSet<>();
    }

    /** A try found the key held: not a failure. */
    private static final class Busy extends Exception {
        private static final long serialVersionUID = 1L;

        Busy() {
            super("busy", null, false, false);
        }
    }

    /** The future of {@link #acquireAsync}: its cancel sends CANCEL. */
    private final class AcquireFuture extends CompletableFuture<Lock> {
        final Request r;

        AcquireFuture(Request r) {
            this.r = r;
        }

        @Override
        public boolean cancel(boolean mayInterruptIfRunning) {
            mu.lock();
            try {
                if (r.decided) {
                    return false;
                }
                r.decided = true;
                abandon(r);
            } finally {
                unlock();
            }
            flush();
            return super.cancel(mayInterruptIfRunning);
        }
    }

    private final SessionOptions cfg;
    private final String addr; // as given, for messages
    private final long serial = SESSIONS.incrementAndGet();

    private final ReentrantLock mu = new ReentrantLock();
    private final Condition wake = mu.newCondition();
    private List<Runnable> after = new ArrayList<>();
    private final ScheduledThreadPoolExecutor timers;
    private final ExecutorService events;
    private final List<Consumer<ConnectionState>> stateListeners = new CopyOnWriteArrayList<>();
    private final AtomicBoolean closeOnce = new AtomicBoolean();
    private Thread loop;
    private SessionException closeError;

    // From the WELCOME of the HELLO.
    private long id;
    private byte[] secret;
    private long ttlNs;
    private long keepaliveNs;

    // Guarded by mu.
    private final List<String> addrs;
    private int at;
    private String leader = "";
    private String silent = "";
    private long shunUntil;
    private Conn conn;
    private long heard;
    private final ByteArrayOutputStream out = new ByteArrayOutputStream();
    private boolean writing;
    private boolean poked;
    private boolean quit;
    private long nextId;
    private long ownerSeq;
    private final Map<Long, Request> inflight = new HashMap<>();
    private final Map<Long, Hold> holds = new HashMap<>();
    private final Set<Long> letGo = new HashSet<>();
    private long lastAck;
    private ScheduledFuture<?> lostTimer;
    private Request ping;
    private ResumeState replay;
    private SessionException err;
    private boolean farewell;
    private List<List<Frame.Field>> parting = List.of(); // farewell: a RELEASE with lapse of each lock the server may hold
    private boolean suspended;

    private Session(String addr, List<String> addrs, SessionOptions cfg) {
        this.addr = addr;
        this.addrs = addrs;
        this.cfg = cfg;
        timers = new ScheduledThreadPoolExecutor(1, daemon("timer"));
        timers.setRemoveOnCancelPolicy(true);
        events = Executors.newSingleThreadExecutor(daemon("callbacks"));
        if (cfg.listener != null) {
            stateListeners.add(cfg.listener);
        }
    }

    private java.util.concurrent.ThreadFactory daemon(String what) {
        return r -> {
            Thread t = new Thread(r, "lockingcenter-session-" + serial + "-" + what);
            t.setDaemon(true);
            return t;
        };
    }

    /** {@link #connect(String, SessionOptions)} with the default options. */
    public static Session connect(String address) throws SessionException {
        return connect(address, SessionOptions.defaults());
    }

    /**
     * Connects to the mutex port at address ("host:port", or a comma list of
     * the nodes of a cluster) and opens a session. With several addresses
     * it tries each in turn and follows a node that names the leader.
     *
     * @throws SessionException.NotLeader when every address answered that it does not lead, and
     *     went on saying so, naming no leader, for the connect timeout (an election)
     * @throws SessionException.Timeout when a server took the connection and answered nothing in time
     * @throws SessionException.Unauthenticated a missing or wrong token
     * @throws SessionException.Connection nothing could be reached
     */
    public static Session connect(String address, SessionOptions options) throws SessionException {
        return connect(Arrays.asList(address.split(",")), options);
    }

    /** {@link #connect(String, SessionOptions)} with the addresses as a list. */
    public static Session connect(List<String> addresses, SessionOptions options) throws SessionException {
        List<String> list = new ArrayList<>();
        for (String a : addresses) {
            a = a.trim();
            if (!a.isEmpty() && !list.contains(a)) {
                list.add(a);
            }
        }
        if (list.isEmpty()) {
            throw new IllegalArgumentException("no address");
        }
        for (String a : list) {
            parseAddress(a);
        }
        Session s = new Session(String.join(",", list), list, options);
        try {
            s.open();
        } catch (SessionException | RuntimeException e) {
            s.timers.shutdownNow();
            s.events.shutdown();
            throw e;
        }
        return s;
    }

    private void open() throws SessionException {
        List<Frame.Field> hello = new ArrayList<>();
        hello.add(Frame.Field.str(Frame.NAME, cfg.name));
        if (cfg.ttlMs > 0) {
            hello.add(Frame.Field.u32(Frame.TTL, cfg.ttlMs));
        }
        credential(hello);
        nextId = 1;
        ByteArrayOutputStream b = new ByteArrayOutputStream();
        b.writeBytes(Frame.PREFACE);
        Frame.encode(b, Frame.HELLO, 1, hello);
        long bound = cfg.ttlMs > 0 ? silence(TimeUnit.MILLISECONDS.toNanos(cfg.ttlMs) / 3) : 0;
        long sentAt = System.nanoTime();
        // Each address once, following the leader a node names; when every
        // node said it does not lead and named none (an election), again
        // after a pause, for as long as the connect timeout.
        long giveUp = sentAt + TimeUnit.MILLISECONDS.toNanos(cfg.connectTimeoutMs > 0 ? cfg.connectTimeoutMs : 5_000);
        Conn c = null;
        for (int round = 1; c == null; round++) {
            SessionException last = null;
            for (int tries = 0; tries < 2 * addrs.size() + 1; tries++) {
                String a = target();
                try {
                    c = handshake(a, b.toByteArray(), bound);
                    break;
                } catch (SessionException e) {
                    last = e;
                    if (!failedAt(a, e)) {
                        throw e;
                    }
                    mu.lock();
                    boolean whole = leader.isEmpty() && at == 0;
                    mu.unlock();
                    if (whole) {
                        break;
                    }
                }
            }
            if (c == null) {
                long pause = TimeUnit.MILLISECONDS.toNanos(Math.min(500, 50L << Math.min(round - 1, 4)));
                if (!(last instanceof SessionException.NotLeader) || System.nanoTime() + pause - giveUp > 0) {
                    throw last;
                }
                try {
                    TimeUnit.NANOSECONDS.sleep(pause);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    throw last;
                }
            }
        }
        Frame w = c.welcome;
        long ttl = w.uint(Frame.TTL, 0);
        if (!w.has(Frame.SESSION) || !w.has(Frame.SECRET) || ttl == 0) {
            c.close();
            throw new SessionException.Protocol("session at " + addr + ": a WELCOME without a session, secret or TTL");
        }
        id = w.uint(Frame.SESSION, 0);
        secret = w.get(Frame.SECRET);
        ttlNs = TimeUnit.MILLISECONDS.toNanos(ttl);
        keepaliveNs = TimeUnit.MILLISECONDS.toNanos(w.uint(Frame.KEEPALIVE, 0));
        if (keepaliveNs <= 0 || keepaliveNs > ttlNs) {
            keepaliveNs = ttlNs / 3;
        }
        mu.lock();
        try {
            lastAck = sentAt;
            conn = c;
            heard = System.nanoTime();
            armLost();
        } finally {
            unlock();
        }
        long check = Math.max(silence() / 4, TimeUnit.MILLISECONDS.toNanos(50));
        timers.scheduleWithFixedDelay(this::checkWrites, check, check, TimeUnit.NANOSECONDS);
        startReader(c);
        Conn first = c;
        loop = new Thread(() -> run(first), "lockingcenter-session-" + serial);
        loop.setDaemon(true);
        loop.start();
        state(ConnectionState.CONNECTED);
    }

    private void credential(List<Frame.Field> fields) {
        if (cfg.token != null && !cfg.token.isEmpty()) {
            fields.add(Frame.Field.str(Frame.CREDENTIAL, cfg.token));
        }
    }

    /** The session's id on the server. */
    public long id() {
        return id;
    }

    /** The TTL the server granted. */
    public Duration ttl() {
        return Duration.ofNanos(ttlNs);
    }

    /** How often the session pings an idle connection (the server's keepalive). */
    public Duration keepalive() {
        return Duration.ofNanos(keepaliveNs);
    }

    /** True until the session has ended (closed, or expired). */
    public boolean isOpen() {
        mu.lock();
        try {
            return err == null;
        } finally {
            unlock();
        }
    }

    /** Hears each change of the connection's state from now on, on the callback thread. */
    public void addStateListener(Consumer<ConnectionState> listener) {
        stateListeners.add(listener);
    }

    public void removeStateListener(Consumer<ConnectionState> listener) {
        stateListeners.remove(listener);
    }

    // --- the API ---

    /** {@link #acquire(String, AcquireOptions)} with the default options: waits for ever. */
    public Lock acquire(String key) throws SessionException, InterruptedException {
        return acquire(key, AcquireOptions.defaults());
    }

    /**
     * {@link #acquire(String, AcquireOptions)} waiting at most wait, measured by the server.
     *
     * @throws SessionException.Timeout the wait ran out; the request left the queue
     */
    public Lock acquire(String key, Duration wait) throws SessionException, InterruptedException {
        return acquire(key, AcquireOptions.defaults().waitFor(wait));
    }

    /**
     * Asks for key (1 to 127 bytes of UTF-8) and blocks until the session
     * holds it, through reconnections; with {@link AcquireOptions#waitFor}
     * the server bounds the wait. An interrupt gives the wait up: CANCEL
     * takes the request out of the server's queue (a grant that crossed it
     * is released) and InterruptedException is thrown.
     *
     * @throws SessionException.Timeout the wait bound ran out; the request left the queue
     * @throws SessionException.Deadlock the acquire would wait for its own owner
     * @throws SessionException another refusal, or the session's end
     */
    public Lock acquire(String key, AcquireOptions options) throws SessionException, InterruptedException {
        try {
            return waitAcquire(submit(key, options, -2, false), 0, key);
        } catch (Busy b) {
            throw new IllegalStateException("busy without a try", b);
        }
    }

    /**
     * Tries once: the lock, or an empty Optional when the key is held or in
     * its lock-delay. Never an exception for busy.
     */
    public Optional<Lock> tryAcquire(String key) throws SessionException, InterruptedException {
        return tryAcquire(key, AcquireOptions.defaults());
    }

    /** {@link #tryAcquire(String)} with options (their wait is not used). */
    public Optional<Lock> tryAcquire(String key, AcquireOptions options) throws SessionException, InterruptedException {
        try {
            return Optional.of(waitAcquire(submit(key, options, 0, false), cfg.readTimeoutMs, key));
        } catch (Busy b) {
            return Optional.empty();
        }
    }

    /** Waits at most wait (measured by the server): the lock, or an empty Optional when it ran out. */
    public Optional<Lock> tryAcquire(String key, Duration wait, AcquireOptions options)
            throws SessionException, InterruptedException {
        if (wait.isZero()) {
            return tryAcquire(key, options);
        }
        try {
            return Optional.of(acquire(key, options.waitFor(wait)));
        } catch (SessionException.Timeout t) {
            if (t.wire == 0) {
                throw t;
            }
            return Optional.empty();
        }
    }

    /**
     * Asks for key without blocking. The future completes with the lock, or
     * exceptionally with a {@link SessionException}, on the session's
     * callback thread (so slow dependent stages hold up other callbacks, not
     * the connection). Its {@code cancel} sends CANCEL: the request leaves
     * the server's queue.
     */
    public CompletableFuture<Lock> acquireAsync(String key, AcquireOptions options) {
        try {
            return submit(key, options, -2, true);
        } catch (SessionException e) {
            return CompletableFuture.failedFuture(e);
        }
    }

    public CompletableFuture<Lock> acquireAsync(String key) {
        return acquireAsync(key, AcquireOptions.defaults());
    }

    /**
     * Releases the lock of token on key. A lock of this session's is
     * released as by {@link Lock#release()}; a token the session does not
     * hold is sent to the server, which refuses it as stale.
     *
     * @throws SessionException.StaleToken the server does not have the session hold that token
     */
    public void release(String key, long token) throws SessionException, InterruptedException {
        byte[] kb = Codec.key(key);
        Lock mine = null;
        mu.lock();
        try {
            Hold h = holds.get(token);
            if (h != null && h.key.equals(key) && !h.locks.isEmpty()) {
                mine = h.locks.get(h.locks.size() - 1);
            }
        } finally {
            unlock();
        }
        if (mine != null) {
            release(mine);
            return;
        }
        CompletableFuture<Frame> f = new CompletableFuture<>();
        mu.lock();
        try {
            checkOpen();
            enqueueRelease(key, kb, token, null, f, false);
        } finally {
            unlock();
        }
        flush();
        await(f, "release " + quote(key));
    }

    /** Reads the key's holders, queue and lock-delay (DESCRIBE), within the read timeout. */
    public KeyInfo describe(String key) throws SessionException, InterruptedException {
        byte[] kb = Codec.key(key);
        Request r = new Request(Frame.DESCRIBE);
        r.key = key;
        r.answer = new CompletableFuture<>();
        mu.lock();
        try {
            checkOpen();
            enqueue(r, List.of(Frame.Field.bytes(Frame.KEY, kb)));
        } finally {
            unlock();
        }
        flush();
        return info(await(r.answer, "describe " + quote(key)));
    }

    /**
     * Ends the session: CLOSE releases every lock (orphaned ones too) and
     * withdraws every waiting request; waits for the answer, at most the
     * read timeout (after a resume when the connection is down). Locks end
     * released, or lost with {@link LostReason#SESSION_CLOSED} when the
     * server could not be told. Waiting acquires fail with
     * {@link SessionException.SessionClosed}. Safe to call again.
     *
     * @throws SessionException when the server could not be told (it ends the session with its TTL)
     */
    @Override
    public void close() throws SessionException {
        if (closeOnce.compareAndSet(false, true)) {
            mu.lock();
            try {
                quit = true;
                poke();
            } finally {
                unlock();
            }
            boolean interrupted = false;
            while (loop.isAlive()) {
                try {
                    loop.join();
                } catch (InterruptedException e) {
                    interrupted = true;
                }
            }
            if (interrupted) {
                Thread.currentThread().interrupt();
            }
        }
        if (closeError != null) {
            throw closeError;
        }
    }

    // --- requests ---

    private AcquireFuture submit(String key, AcquireOptions o, long waitOverride, boolean async) throws SessionException {
        byte[] kb = Codec.key(key);
        Request r = new Request(Frame.ACQUIRE);
        r.key = key;
        r.keyBytes = kb;
        r.opts = o;
        r.async = async;
        r.acquire = new AcquireFuture(r);
        long wait = waitOverride == -2 ? o.waitMs : waitOverride;
        mu.lock();
        try {
            checkOpen();
            // Without an owner each acquire is its own, as a client of its own would be.
            String owner = o.owner == null && !o.reentrant ? "#" + ++ownerSeq : o.owner;
            enqueue(r, o.fields(kb, wait, owner));
        } finally {
            unlock();
        }
        flush();
        return r.acquire;
    }

    /** Waits for an acquire's result, at most boundMs when not 0 (a try, which waits for no key). */
    private Lock waitAcquire(AcquireFuture f, long boundMs, String key) throws SessionException, InterruptedException, Busy {
        try {
            return boundMs > 0 ? f.get(boundMs, TimeUnit.MILLISECONDS) : f.get();
        } catch (TimeoutException e) {
            giveUp(f);
            throw new SessionException.Timeout("try " + quote(key) + " at " + addr + ": no answer within " + boundMs + " ms");
        } catch (InterruptedException e) {
            giveUp(f);
            throw e;
        } catch (ExecutionException e) {
            Throwable c = e.getCause();
            if (c instanceof Busy) {
                throw (Busy) c;
            }
            throw rethrow(c);
        }
    }

    /** An interrupted acquire: cancel it, or release what it got when its result was already settled. */
    private void giveUp(AcquireFuture f) {
        Request r = f.r;
        boolean settled;
        mu.lock();
        try {
            settled = r.decided;
            if (!settled) {
                r.decided = true;
                abandon(r);
            }
        } finally {
            unlock();
        }
        flush();
        if (!settled) {
            return;
        }
        boolean interrupted = false;
        for (;;) {
            try {
                Lock l = f.get();
                l.orphan();
                mu.lock();
                try {
                    if (err == null) {
                        enqueueRelease(l.key, l.keyBytes, l.token, null, null, false);
                    }
                } finally {
                    unlock();
                }
                flush();
                break;
            } catch (InterruptedException e) {
                interrupted = true;
            } catch (ExecutionException | CancellationException e) {
                break;
            }
        }
        if (interrupted) {
            Thread.currentThread().interrupt();
        }
    }

    private Frame await(CompletableFuture<Frame> f, String op) throws SessionException, InterruptedException {
        try {
            return cfg.readTimeoutMs > 0 ? f.get(cfg.readTimeoutMs, TimeUnit.MILLISECONDS) : f.get();
        } catch (ExecutionException e) {
            throw rethrow(e.getCause());
        } catch (TimeoutException e) {
            throw new SessionException.Timeout(op + " at " + addr + ": no answer within " + cfg.readTimeoutMs
                    + " ms; it is sent again after a reconnect");
        }
    }

    private static SessionException rethrow(Throwable c) {
        if (c instanceof SessionException) {
            return (SessionException) c;
        }
        if (c instanceof RuntimeException) {
            throw (RuntimeException) c;
        }
        if (c instanceof Error) {
            throw (Error) c;
        }
        return new SessionException.Connection("unexpected", c);
    }

    private void checkOpen() throws SessionException {
        if (err != null) {
            throw err;
        }
    }

    /** Gives r the next id and queues its frame for the attached connection. Called with mu held. */
    private void enqueue(Request r, List<Frame.Field> fields) {
        r.id = ++nextId;
        r.sentAt = System.nanoTime();
        r.frame = Frame.encode(r.type, r.id, fields);
        if (r.type != Frame.PING) {
            inflight.put(r.id, r);
        }
        if (conn != null) {
            out.writeBytes(r.frame);
            r.sent = true;
        }
    }

    private Request enqueueRelease(String key, byte[] kb, long token, Lock l, CompletableFuture<Frame> f, boolean lapse) {
        Request r = new Request(Frame.RELEASE);
        r.key = key;
        r.keyBytes = kb;
        r.token = token;
        r.lock = l;
        r.answer = f;
        List<Frame.Field> fields = new ArrayList<>(3);
        fields.add(Frame.Field.bytes(Frame.KEY, kb));
        fields.add(Frame.Field.u64(Frame.TOKEN, token));
        if (lapse) {
            fields.add(Frame.Field.u8(Frame.LAPSE, 1));
        }
        enqueue(r, fields);
        return r;
    }

    /** Gives up an acquire whose caller has gone. Called with mu held. */
    private void abandon(Request r) {
        if (inflight.get(r.id) != r) {
            return;
        }
        if (!r.sent) {
            inflight.remove(r.id);
            return;
        }
        r.abandoned = true;
        Request c = new Request(Frame.CANCEL);
        c.target = r.id;
        enqueue(c, List.of(Frame.Field.u64(Frame.TARGET, r.id)));
    }

    /**
     * Writes what is queued for the attached connection, from the calling
     * thread, unless another thread is writing (it takes these bytes too).
     * Never called by a reader, which pokes the loop instead.
     */
    private void flush() {
        mu.lock();
        try {
            if (writing || conn == null || out.size() == 0) {
                return;
            }
            writing = true;
            Conn c = conn;
            try {
                while (out.size() > 0 && conn == c) {
                    byte[] b = out.toByteArray();
                    out.reset();
                    mu.unlock();
                    try {
                        c.write(b);
                    } catch (IOException e) {
                        c.close(); // its reader sees it and detaches c
                    } finally {
                        mu.lock();
                    }
                }
            } finally {
                writing = false;
            }
        } finally {
            unlock();
        }
    }

    /** Closes a connection whose write has blocked for the silence bound. */
    private void checkWrites() {
        Conn c = attached();
        long since = c == null ? 0 : c.writingSince;
        if (since != 0 && System.nanoTime() - since > silence()) {
            c.close();
        }
    }

    /** The attached connection, or null. */
    private Conn attached() {
        mu.lock();
        try {
            return conn;
        } finally {
            unlock();
        }
    }

    private void poke() {
        poked = true;
        wake.signalAll();
    }

    /** Unlocks mu, then runs what the holder left to run outside it. */
    private void unlock() {
        List<Runnable> run = null;
        if (mu.getHoldCount() == 1 && !after.isEmpty()) {
            run = after;
            after = new ArrayList<>();
        }
        mu.unlock();
        if (run != null) {
            for (Runnable x : run) {
                x.run();
            }
        }
    }

    /** Runs r on the callback thread; once that has stopped (the session ended), outside mu. */
    private void callback(Runnable r) {
        try {
            events.execute(r);
        } catch (RejectedExecutionException e) {
            if (mu.isHeldByCurrentThread()) {
                after.add(r);
            } else {
                r.run();
            }
        }
    }

    private void state(ConnectionState st) {
        for (Consumer<ConnectionState> l : stateListeners) {
            callback(() -> l.accept(st));
        }
    }

    /** Hands r's caller its lock. Called with mu held. */
    private void succeed(Request r, Lock l) {
        r.decided = true;
        if (r.async) {
            callback(() -> r.acquire.complete(l));
        } else {
            after.add(() -> r.acquire.complete(l));
        }
    }

    /** Fails r's caller with e. Called with mu held. */
    private void fail(Request r, Throwable e) {
        if (r.acquire != null) {
            if (r.decided) {
                return;
            }
            r.decided = true;
            if (r.async) {
                callback(() -> r.acquire.completeExceptionally(e));
            } else {
                after.add(() -> r.acquire.completeExceptionally(e));
            }
        } else if (r.answer != null) {
            after.add(() -> r.answer.completeExceptionally(e));
        }
    }

    private void answered(Request r, Frame f) {
        if (r.answer != null) {
            after.add(() -> r.answer.complete(f));
        }
    }

    // --- locks ---

    Lock.State lockState(Lock l) {
        mu.lock();
        try {
            return l.state;
        } finally {
            unlock();
        }
    }

    SessionException.LockLost cause(Lock l) {
        mu.lock();
        try {
            return l.cause;
        } finally {
            unlock();
        }
    }

    void onLost(Lock l, Lock.LostListener listener) {
        mu.lock();
        try {
            if (l.state == Lock.State.LOST) {
                LostReason reason = l.cause.reason();
                callback(() -> listener.lost(l, reason));
            } else if (l.state == Lock.State.HELD) {
                l.listeners.add(listener);
            }
        } finally {
            unlock();
        }
    }

    void release(Lock l) throws SessionException, InterruptedException {
        CompletableFuture<Frame> f = new CompletableFuture<>();
        mu.lock();
        try {
            if (l.state == Lock.State.LOST) {
                throw l.cause;
            }
            if (l.state != Lock.State.HELD) {
                return;
            }
            dropLock(l, Lock.State.RELEASED, null);
            enqueueRelease(l.key, l.keyBytes, l.token, l, f, false);
        } finally {
            unlock();
        }
        flush();
        await(f, "release " + quote(l.key));
    }

    void renew(Lock l, long leaseMs) throws SessionException, InterruptedException {
        Request r = new Request(Frame.RENEW);
        r.key = l.key;
        r.token = l.token;
        r.lock = l;
        r.answer = new CompletableFuture<>();
        mu.lock();
        try {
            if (l.state == Lock.State.LOST) {
                throw l.cause;
            }
            if (l.state != Lock.State.HELD) {
                throw new IllegalStateException("renew of a lock that was " + l.state.name().toLowerCase());
            }
            List<Frame.Field> fields = new ArrayList<>(3);
            fields.add(Frame.Field.bytes(Frame.KEY, l.keyBytes));
            fields.add(Frame.Field.u64(Frame.TOKEN, l.token));
            if (leaseMs > 0) {
                fields.add(Frame.Field.u32(Frame.LEASE, leaseMs));
            }
            enqueue(r, fields);
        } finally {
            unlock();
        }
        flush();
        await(r.answer, "renew " + quote(l.key));
    }

    void orphan(Lock l) {
        mu.lock();
        try {
            if (l.state == Lock.State.HELD) {
                letGo.add(l.token);
                dropLock(l, Lock.State.ORPHANED, null);
            }
        } finally {
            unlock();
        }
    }

    /** Makes a Lock of the hold of token for the acquire r and hands it over. */
    private void grant(Request r, long token, long count, boolean leased, long from, long leftMs) {
        Hold h = holds.get(token);
        if (h == null) {
            h = new Hold(r.key, r.keyBytes, token);
            holds.put(token, h);
        }
        Lock l = new Lock(this, r.key, r.keyBytes, token, count, h);
        h.locks.add(l);
        if (leased) {
            setLease(h, from, leftMs);
        }
        succeed(r, l);
    }

    /** Ends l: released or orphaned (cause null), or lost with cause. */
    private void endLock(Lock l, Lock.State st, SessionException.LockLost cause) {
        if (l.state != Lock.State.HELD) {
            return;
        }
        l.state = st;
        l.cause = cause;
        l.hold = null;
        if (cause != null) {
            LostReason reason = cause.reason();
            for (Lock.LostListener x : l.listeners) {
                callback(() -> x.lost(l, reason));
            }
        }
        l.listeners.clear();
    }

    private void dropLock(Lock l, Lock.State st, SessionException.LockLost cause) {
        Hold h = l.hold;
        if (h != null) {
            h.locks.remove(l);
            if (h.locks.isEmpty()) {
                forgetHold(h);
            }
        }
        endLock(l, st, cause);
    }

    private void endHold(Hold h, Lock.State st, SessionException.LockLost cause) {
        forgetHold(h);
        for (Lock l : new ArrayList<>(h.locks)) {
            endLock(l, st, cause);
        }
        h.locks.clear();
    }

    private void forgetHold(Hold h) {
        if (holds.get(h.token) == h) {
            holds.remove(h.token);
        }
        if (h.lease != null) {
            h.lease.cancel(false);
            h.lease = null;
        }
    }

    private static SessionException.LockLost lost(String key, LostReason reason, String why) {
        return new SessionException.LockLost("lock " + quote(key) + " lost: " + why, reason, "", "");
    }

    /** A tenth of d, at least 50 ms, at most half of d: the drift between two clocks. */
    static long margin(long d) {
        return Math.min(Math.max(d / 10, TimeUnit.MILLISECONDS.toNanos(50)), d / 2);
    }

    /** How long a connection may bring nothing, for keepalive k: k plus a tenth, at least 250 ms. */
    static long silence(long k) {
        return k + Math.max(k / 10, TimeUnit.MILLISECONDS.toNanos(250));
    }

    private long silence() {
        return silence(keepaliveNs);
    }

    /** The earliest the server can have measured a left_ms arriving now for a request sent at sentAt. */
    private static long measuredAt(long sentAt) {
        long from = System.nanoTime() - DELIVERY_BOUND_NS;
        return from - sentAt > 0 ? from : sentAt;
    }

    /** Makes h lost at from + left, less the margin, unless a renewal moves it. */
    private void setLease(Hold h, long from, long leftMs) {
        if (h.lease != null) {
            h.lease.cancel(false);
        }
        int gen = ++h.gen;
        long left = TimeUnit.MILLISECONDS.toNanos(leftMs);
        long end = from + left - margin(left);
        h.lease = timers.schedule(() -> leaseDue(h, gen), end - System.nanoTime(), TimeUnit.NANOSECONDS);
    }

    /**
     * Gives h up at the client's end of its lease and releases it on the
     * server with lapse, so that the key keeps its lock-delay (the answer
     * does not matter: stale_token when the server's lease ended first,
     * unsupported from a server that does not know lapse, which then ends
     * the lock at its own end of the lease).
     */
    private void leaseDue(Hold h, int gen) {
        mu.lock();
        try {
            if (holds.get(h.token) != h || h.gen != gen) {
                return;
            }
            endHold(h, Lock.State.LOST, lost(h.key, LostReason.LEASE_EXPIRED, "its lease ran out"));
            if (err == null) {
                enqueueRelease(h.key, h.keyBytes, h.token, null, null, true);
                poke();
            }
        } finally {
            unlock();
        }
    }

    /** The server answered a request sent at sentAt: the session lives until sentAt + TTL at least. */
    private void ack(long sentAt) {
        if (sentAt - lastAck > 0) {
            lastAck = sentAt;
        }
        armLost();
    }

    private void armLost() {
        if (lostTimer != null || err != null) {
            return;
        }
        lostTimer = timers.schedule(this::lostDue, lostDeadline() - System.nanoTime(), TimeUnit.NANOSECONDS);
    }

    private long lostDeadline() {
        return lastAck + ttlNs - margin(ttlNs);
    }

    private void lostDue() {
        mu.lock();
        try {
            lostTimer = null;
            if (err != null) {
                return;
            }
            if (System.nanoTime() - lostDeadline() < 0) {
                armLost();
                return;
            }
            String why = "no answer from the server within the session's TTL (" + ttlNs / 1_000_000
                    + " ms) less a margin of " + margin(ttlNs) / 1_000_000 + " ms";
            farewell = true;
            // The locks held, and those whose RELEASE is still unanswered (a
            // lease given up here, a release under way): the server may hold any.
            Map<Long, byte[]> keys = new TreeMap<>(Long::compareUnsigned);
            for (Hold h : holds.values()) {
                if (!letGo.contains(h.token)) {
                    keys.put(h.token, h.keyBytes);
                }
            }
            for (Request r : inflight.values()) {
                if (r.type == Frame.RELEASE) {
                    keys.put(r.token, r.keyBytes);
                }
            }
            List<List<Frame.Field>> rel = new ArrayList<>();
            keys.forEach((token, kb) -> rel.add(List.of(Frame.Field.bytes(Frame.KEY, kb), Frame.Field.u64(Frame.TOKEN, token),
                    Frame.Field.u8(Frame.LAPSE, 1))));
            parting = rel;
            endLost(new SessionException.SessionExpired("session " + id + " at " + addr + ": " + why),
                    LostReason.SESSION_EXPIRED, why);
        } finally {
            unlock();
        }
    }

    /**
     * Ends the session for e: every lock released (cause null) or lost
     * with its cause, every request failed with e. Called with mu held.
     */
    private void end(SessionException e, boolean released, Function<Hold, SessionException.LockLost> cause,
            boolean lostState) {
        if (err != null) {
            return;
        }
        err = e;
        for (Hold h : new ArrayList<>(holds.values())) {
            SessionException.LockLost c = cause.apply(h);
            endHold(h, c == null ? Lock.State.RELEASED : Lock.State.LOST, c);
        }
        for (Request r : new ArrayList<>(inflight.values())) {
            inflight.remove(r.id);
            if (r.abandoned) {
                continue;
            }
            if (r.type == Frame.RELEASE && released) {
                if (r.answer != null) {
                    after.add(() -> r.answer.complete(null));
                }
            } else {
                fail(r, e);
            }
        }
        if (lostTimer != null) {
            lostTimer.cancel(false);
            lostTimer = null;
        }
        if (conn != null) {
            conn.close();
        }
        if (lostState) {
            state(ConnectionState.LOST);
        }
        poke();
    }

    private void endLost(SessionException e, LostReason reason, String why) {
        end(e, false, h -> lost(h.key, reason, why), true);
    }

    // --- connections ---

    /**
     * Dials addr, writes first (the preface and the first frames) and reads
     * the first answer, within the connect timeout, the read timeout and
     * bound (when not 0). Returns the connection, its WELCOME in welcome.
     */
    private Conn handshake(String a, byte[] first, long bound) throws SessionException {
        long limit = TimeUnit.MILLISECONDS.toNanos(cfg.readTimeoutMs);
        if (bound > 0 && (limit <= 0 || bound < limit)) {
            limit = bound;
        }
        long connect = TimeUnit.MILLISECONDS.toNanos(cfg.connectTimeoutMs);
        if (bound > 0 && (connect <= 0 || bound < connect)) {
            connect = bound;
        }
        InetSocketAddress u = parseAddress(a);
        InetSocketAddress isa = new InetSocketAddress(u.getHostString(), u.getPort());
        Socket raw = new Socket();
        AtomicBoolean timedOut = new AtomicBoolean();
        ScheduledFuture<?> killer = null;
        try {
            raw.setTcpNoDelay(true);
            raw.connect(isa, (int) Math.max(0, Math.min(Integer.MAX_VALUE, TimeUnit.NANOSECONDS.toMillis(connect))));
            if (limit > 0) {
                killer = timers.schedule(() -> {
                    timedOut.set(true);
                    try {
                        raw.close();
                    } catch (IOException ignored) {
                        // closing
                    }
                }, limit, TimeUnit.NANOSECONDS);
            }
            Socket s = raw;
            if (cfg.ssl != null) {
                String name = cfg.serverName != null ? cfg.serverName : isa.getHostString();
                SSLSocket ts = (SSLSocket) cfg.ssl.getSocketFactory().createSocket(raw, name, isa.getPort(), true);
                SSLParameters p = ts.getSSLParameters();
                p.setEndpointIdentificationAlgorithm("HTTPS");
                if (!name.isEmpty() && !Character.isDigit(name.charAt(0)) && name.indexOf(':') < 0) {
                    p.setServerNames(List.of(new SNIHostName(name)));
                }
                ts.setSSLParameters(p);
                ts.startHandshake();
                s = ts;
            }
            Conn c = new Conn(a, s);
            c.out.write(first);
            Frame f = readAnswer(c);
            if (killer != null) {
                killer.cancel(false);
            }
            if (timedOut.get()) {
                throw new SocketTimeoutException();
            }
            switch (f.type) {
                case Frame.WELCOME:
                    c.welcome = f;
                    return c;
                case Frame.GOODBYE: {
                    c.close();
                    throw goodbye(f, "session at " + a);
                }
                case Frame.REFUSED: {
                    c.close();
                    throw SessionException.of("session at " + a + ": its first frame", f.uint(Frame.CODE, 0),
                            f.string(Frame.MESSAGE));
                }
                default:
                    c.close();
                    throw new SessionException.Protocol(String.format("session at %s: frame 0x%02x before the WELCOME", a, f.type));
            }
        } catch (SessionException e) {
            closeQuietly(raw);
            throw e;
        } catch (IOException e) {
            closeQuietly(raw);
            if (killer != null) {
                killer.cancel(false);
            }
            if (timedOut.get() || e instanceof SocketTimeoutException) {
                throw new SessionException.Timeout("session at " + a + ": no answer within "
                        + TimeUnit.NANOSECONDS.toMillis(limit) + " ms");
            }
            throw new SessionException.Connection("session at " + a, e);
        }
    }

    private static void closeQuietly(Socket s) {
        try {
            s.close();
        } catch (IOException ignored) {
            // closing
        }
    }

    static InetSocketAddress parseAddress(String a) {
        int colon = a.lastIndexOf(':');
        if (colon <= 0 || colon == a.length() - 1) {
            throw new IllegalArgumentException("address " + quote(a) + " is not host:port");
        }
        String host = a.substring(0, colon);
        if (host.startsWith("[") && host.endsWith("]")) {
            host = host.substring(1, host.length() - 1);
        }
        int port;
        try {
            port = Integer.parseInt(a.substring(colon + 1));
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException("address " + quote(a) + " has no port number");
        }
        if (port < 1 || port > 65535) {
            throw new IllegalArgumentException("address " + quote(a) + ": port out of range");
        }
        return InetSocketAddress.createUnresolved(host, port);
    }

    private static SessionException goodbye(Frame f, String op) {
        long code = f.uint(Frame.CODE, 0);
        String msg = f.string(Frame.MESSAGE);
        SessionException e;
        if (code == 19) {
            e = new SessionException.NotLeader(op + ": the node does not lead (not_leader)", "not_leader", msg,
                    f.string(Frame.LEADER));
            e.wire = code;
        } else {
            e = SessionException.of(op + ": goodbye", code, msg);
        }
        e.goodbye = true;
        return e;
    }

    /** A GOODBYE after which resuming elsewhere is pointless. */
    private static boolean isFinal(SessionException e) {
        if (!e.goodbye) {
            return false;
        }
        long c = e.wire;
        return c != 15 && c != 9 && c != 23 && c != 24 && c != 19;
    }

    /** Reads the next answer, joining the MORE frames of a long one. */
    private static Frame readAnswer(Conn c) throws IOException {
        Frame f = Frame.read(c.in, c.head);
        if (f.type == Frame.MORE) {
            throw new SessionException.Protocol("a MORE frame that follows no frame with more");
        }
        if (f.uint(Frame.MORE_FLAG, 0) != 1) {
            return f;
        }
        if (f.type != Frame.WELCOME && f.type != Frame.INFO) {
            throw new SessionException.Protocol(String.format("more in a frame 0x%02x", f.type));
        }
        List<Frame.Field> all = new ArrayList<>();
        addFields(all, f);
        for (;;) {
            Frame m = Frame.read(c.in, c.head);
            if (m.type == Frame.GOODBYE) {
                return m; // the answer was cut short, and not received
            }
            if (m.type != Frame.MORE || m.id != f.id) {
                throw new SessionException.Protocol("a long answer broken by another frame");
            }
            addFields(all, m);
            if (m.uint(Frame.MORE_FLAG, 0) != 1) {
                return new Frame(f.type, f.id, all);
            }
        }
    }

    private static void addFields(List<Frame.Field> all, Frame f) {
        for (Frame.Field x : f.fields) {
            if (x.tag() != Frame.MORE_FLAG) {
                all.add(x);
            }
        }
    }

    private String target() {
        mu.lock();
        try {
            if (!leader.isEmpty()) {
                return leader;
            }
            if (shunned(addrs.get(at))) {
                at = (at + 1) % addrs.size();
            }
            return addrs.get(at);
        } finally {
            unlock();
        }
    }

    private void follow(String l) {
        if (!l.isEmpty() && !shunned(l)) {
            leader = l;
        }
    }

    /** Sends the node of a silent connection to the back of the addresses, and shuns it for as long again. */
    private void demote(String a) {
        if (leader.equals(a)) {
            leader = "";
        }
        if (addrs.remove(a)) {
            addrs.add(a);
            at = 0;
        }
        silent = a;
        shunUntil = System.nanoTime() + silence();
    }

    private boolean shunned(String a) {
        return a.equals(silent) && addrs.size() > 1 && System.nanoTime() - shunUntil < 0;
    }

    /** Notes a failed handshake at a; reports whether another node may do better. */
    private boolean failedAt(String a, SessionException e) {
        mu.lock();
        try {
            if (leader.equals(a)) {
                leader = "";
            } else if (addrs.get(at).equals(a)) {
                at = (at + 1) % addrs.size();
            }
            if (!e.goodbye) {
                return true;
            }
            if (e instanceof SessionException.NotLeader && !((SessionException.NotLeader) e).leader().equals(a)) {
                follow(((SessionException.NotLeader) e).leader());
            }
            return !isFinal(e);
        } finally {
            unlock();
        }
    }

    /**
     * The first bytes of a resume: the preface, RESUME, a RELEASE of each
     * field list of releases, and a frame of type with no fields, with the
     * next request ids in that order; the id of the last frame in idOut[0].
     */
    private byte[] resumeWith(int type, long[] idOut, List<List<Frame.Field>> releases) {
        long rid;
        mu.lock();
        try {
            rid = nextId + 1;
            nextId += 2 + releases.size();
            idOut[0] = nextId;
        } finally {
            unlock();
        }
        List<Frame.Field> fields = new ArrayList<>();
        fields.add(Frame.Field.u64(Frame.SESSION, id));
        fields.add(Frame.Field.bytes(Frame.SECRET, secret));
        credential(fields);
        ByteArrayOutputStream b = new ByteArrayOutputStream();
        b.writeBytes(Frame.PREFACE);
        Frame.encode(b, Frame.RESUME, rid, fields);
        for (int i = 0; i < releases.size(); i++) {
            Frame.encode(b, Frame.RELEASE, rid + 1 + i, releases.get(i));
        }
        Frame.encode(b, type, idOut[0], List.of());
        return b.toByteArray();
    }

    /** Opens a connection and resumes the session on it; attaches it and queues again what the server never got. */
    private Conn resume() throws SessionException {
        long[] sync = new long[1];
        byte[] b = resumeWith(Frame.PING, sync, List.of());
        long sentAt = System.nanoTime();
        String a = target();
        Conn c;
        try {
            c = handshake(a, b, silence());
        } catch (SessionException e) {
            failedAt(a, e);
            throw e;
        }
        ResumeState rs;
        try {
            rs = parseResume(c.welcome);
        } catch (SessionException e) {
            c.close();
            throw e;
        }
        rs.sentAt = sentAt;
        rs.syncId = sync[0];
        mu.lock();
        try {
            if (err != null) {
                c.close();
                throw err;
            }
            ack(sentAt);
            heard = System.nanoTime();
            replay = rs;
            out.reset();
            for (Request r : new TreeMap<>(inflight).values()) {
                if (r.type != Frame.DESCRIBE) {
                    if (r.id <= rs.applied) {
                        continue; // it arrived; the reconciliation settles it
                    }
                    if (r.type == Frame.ACQUIRE && r.abandoned
                            || r.type == Frame.CANCEL && inflight.get(r.target) == null) {
                        inflight.remove(r.id); // it never arrived and nobody wants it
                        continue;
                    }
                }
                r.resent = r.sent;
                r.sent = true;
                out.writeBytes(r.frame);
            }
            conn = c;
            ping = null;
            suspended = false;
            state(ConnectionState.RECONNECTED); // before anything the new connection brings
            poke();
        } finally {
            unlock();
        }
        startReader(c);
        return c;
    }

    private ResumeState parseResume(Frame w) throws SessionException {
        if (w.uint(Frame.SESSION, 0) != id) {
            throw new SessionException.Protocol("the WELCOME of a resume names session "
                    + Long.toUnsignedString(w.uint(Frame.SESSION, 0)));
        }
        ResumeState rs = new ResumeState();
        rs.applied = w.uint(Frame.APPLIED, 0);
        for (Frame it : w.items(Frame.HELD)) {
            long token = it.uint(Frame.TOKEN, 0);
            long req = it.uint(Frame.REQUEST, 0);
            rs.held.put(token, new HeldItem(it.string(Frame.KEY), req, Math.max(it.uint(Frame.COUNT, 1), 1),
                    it.uint(Frame.LEFT, 0), it.has(Frame.LEFT)));
            rs.byReq.put(req, token);
        }
        for (Frame it : w.items(Frame.PARKED)) {
            rs.parked.add(it.uint(Frame.REQUEST, 0));
        }
        return rs;
    }

    /** Leaves the session without c. Called with mu held. */
    private void detach(Conn c) {
        if (conn == c) {
            conn = null;
            out.reset();
            ping = null;
            replay = null;
            if (err == null && !quit && !suspended) {
                suspended = true;
                state(ConnectionState.SUSPENDED);
            }
            poke();
        }
    }

    private void startReader(Conn c) {
        Thread t = new Thread(() -> read(c), "lockingcenter-session-" + serial + "-reader");
        t.setDaemon(true);
        t.start();
    }

    private void read(Conn c) {
        try {
            for (;;) {
                Frame f = readAnswer(c);
                boolean goOn;
                mu.lock();
                try {
                    goOn = conn == c;
                    if (goOn) {
                        heard = System.nanoTime();
                        goOn = handle(f);
                    }
                } finally {
                    unlock();
                }
                if (!goOn) {
                    break;
                }
            }
        } catch (IOException | RuntimeException e) {
            // the connection ended, or brought bytes that break the protocol: drop it
        } finally {
            mu.lock();
            try {
                detach(c);
            } finally {
                unlock();
            }
            c.close();
            c.dead.countDown();
        }
    }

    /** The session's loop: writes, pings and reconnects until close or the session's end. */
    private void run(Conn first) {
        Conn c = first;
        try {
            while (c != null && serve(c)) {
                c = reconnect();
            }
            shutdown();
            boolean bye;
            mu.lock();
            try {
                if (conn != null) {
                    Conn x = conn;
                    detach(x);
                    x.close();
                }
                bye = farewell;
            } finally {
                unlock();
            }
            if (bye) {
                closeOnServer();
            }
        } finally {
            timers.shutdownNow();
            events.shutdown();
        }
    }

    /**
     * Keeps c busy: writes, pings when the server has answered nothing for
     * the keepalive, drops c when it brought nothing for the silence bound.
     * True when c has dropped; false at close or the session's end.
     */
    private boolean serve(Conn c) {
        for (;;) {
            long waitNs;
            mu.lock();
            try {
                if (err != null || quit) {
                    return false;
                }
                if (conn != c) {
                    c.close();
                    awaitDead(c);
                    return true;
                }
                long now = System.nanoTime();
                if (ping == null && now - (lastAck + keepaliveNs) >= 0) {
                    ping = new Request(Frame.PING);
                    enqueue(ping, List.of());
                }
                long next = heard + silence();
                if (now - next >= 0) {
                    detach(c);
                    demote(c.addr);
                    continue;
                }
                if (ping == null) {
                    next = lastAck + keepaliveNs;
                }
                waitNs = next - now;
            } finally {
                unlock();
            }
            flush();
            mu.lock();
            try {
                while (!poked && waitNs > 0) {
                    waitNs = wake.awaitNanos(waitNs);
                }
                poked = false;
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return false;
            } finally {
                unlock();
            }
        }
    }

    private void awaitDead(Conn c) {
        mu.unlock();
        try {
            c.dead.await(5, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        } finally {
            mu.lock();
        }
    }

    /** Resumes the session on a new connection, at once and then with a growing backoff; null at close or the end. */
    private Conn reconnect() {
        int hops = 0;
        for (int attempt = 0;; attempt++) {
            boolean follow;
            mu.lock();
            try {
                follow = !leader.isEmpty();
            } finally {
                unlock();
            }
            if (follow && hops <= addrs.size()) {
                attempt = 0;
                hops++;
            } else {
                hops = 0;
            }
            if (attempt > 0 && !pause(backoff(attempt))) {
                return null;
            }
            mu.lock();
            try {
                if (quit || err != null) {
                    return null;
                }
            } finally {
                unlock();
            }
            try {
                return resume();
            } catch (SessionException e) {
                if (isFinal(e)) {
                    mu.lock();
                    try {
                        endLost(e, LostReason.SESSION_EXPIRED, "the session ended on the server while the client was away");
                    } finally {
                        unlock();
                    }
                    return null;
                }
            }
        }
    }

    /** 50 ms doubling, at most a quarter of the keepalive and 500 ms, jittered. */
    private long backoff(int n) {
        long d = Math.min(Math.min(TimeUnit.MILLISECONDS.toNanos(50) << Math.min(n - 1, 10),
                Math.max(keepaliveNs / 4, TimeUnit.MILLISECONDS.toNanos(50))), TimeUnit.MILLISECONDS.toNanos(500));
        return d / 2 + ThreadLocalRandom.current().nextLong(d / 2 + 1);
    }

    /** Waits d; false at close or the session's end. */
    private boolean pause(long d) {
        mu.lock();
        try {
            long left = d;
            while (left > 0 && !quit && err == null) {
                left = wake.awaitNanos(left);
            }
            poked = false;
            return !quit && err == null;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return false;
        } finally {
            unlock();
        }
    }

    /** At close: CLOSE on the attached connection, or on a resumed one. */
    private void shutdown() {
        mu.lock();
        try {
            if (err != null) {
                return;
            }
        } finally {
            unlock();
        }
        SessionException e = sendClose();
        mu.lock();
        try {
            SessionException closed = new SessionException.SessionClosed("session " + id + " at " + addr + " is closed");
            if (e == null) {
                end(closed, true, h -> null, false);
            } else if (isFinal(e)) {
                endLost(closed, LostReason.SESSION_EXPIRED, "the session ended on the server while the client was away");
            } else {
                closeError = new SessionException.Connection("close session " + id + " at " + addr + ": " + e.getMessage(), e);
                end(closed, false, h -> lost(h.key, LostReason.SESSION_CLOSED,
                        "close could not tell the server; it ends the lock with the session's TTL"), false);
            }
        } finally {
            unlock();
        }
    }

    /** Sends CLOSE and waits for its answer within the read timeout, resuming first when no connection is attached. */
    private SessionException sendClose() {
        Request r = new Request(Frame.CLOSE);
        r.answer = new CompletableFuture<>();
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(cfg.readTimeoutMs > 0 ? cfg.readTimeoutMs : 10_000);
        mu.lock();
        try {
            enqueue(r, List.of());
        } finally {
            unlock();
        }
        SessionException last = null;
        for (int i = 0; i < 2; i++) {
            Conn c = attached();
            if (c == null) {
                try {
                    c = resume();
                } catch (SessionException e) {
                    return e;
                }
            }
            flush();
            try {
                Frame f = r.answer.get(Math.max(1, deadline - System.nanoTime()), TimeUnit.NANOSECONDS);
                return f.type == Frame.REFUSED ? SessionException.of("close", f.uint(Frame.CODE, 0), f.string(Frame.MESSAGE)) : null;
            } catch (ExecutionException e) {
                last = rethrow(e.getCause());
            } catch (TimeoutException e) {
                return new SessionException.Timeout("no answer within the read timeout");
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return new SessionException.Connection("interrupted", e);
            }
        }
        return last != null ? last : new SessionException.Connection("the connection dropped before the answer", null);
    }

    /**
     * Closes on the server a session the client counted expired, one
     * attempt: RESUME, a RELEASE with lapse of each lock the server may
     * hold for it (parting: the locks held here, not orphaned, and those
     * whose RELEASE went unanswered), and CLOSE, in one write; then the frames up to the CLOSE's
     * answer (the releases' answers are passed over). The releases end
     * those locks as their leases running out would, so that each key
     * keeps the lock-delay its acquire asked for: a CLOSE alone releases
     * at once, and a next holder could be granted while this process still
     * writes. A server that does not know lapse refuses them, and its CLOSE
     * then releases the locks without the delay.
     */
    private void closeOnServer() {
        long[] cid = new long[1];
        List<List<Frame.Field>> rel;
        mu.lock();
        try {
            rel = parting;
        } finally {
            unlock();
        }
        byte[] b = resumeWith(Frame.CLOSE, cid, rel);
        String a = target();
        Conn c;
        try {
            c = handshake(a, b, silence());
        } catch (SessionException e) {
            return;
        }
        try {
            c.socket.setSoTimeout((int) Math.max(1, TimeUnit.NANOSECONDS.toMillis(silence())));
            for (;;) {
                Frame f = readAnswer(c);
                if (f.type == Frame.OK && f.id == cid[0] || f.type == Frame.GOODBYE) {
                    return;
                }
            }
        } catch (IOException e) {
            // best effort: the server ends the session with its TTL
        } finally {
            c.close();
        }
    }

    // --- frames from the server ---

    /** Applies one frame of the attached connection; reports whether to go on reading it. Called with mu held. */
    private boolean handle(Frame f) throws SessionException.Protocol {
        switch (f.type) {
            case Frame.GRANTED:
            case Frame.OK:
            case Frame.REFUSED:
            case Frame.INFO: {
                if (ping != null && f.id == ping.id) {
                    ack(ping.sentAt);
                    ping = null;
                    return true;
                }
                if (replay != null && f.id == replay.syncId) {
                    reconcile();
                    return true;
                }
                Request r = inflight.get(f.id);
                if (r == null) {
                    return true;
                }
                long code = f.uint(Frame.CODE, 0);
                if (f.type == Frame.REFUSED && code == 6 && r.resent) {
                    return true; // the old connection's reader applied it after all
                }
                ack(r.sentAt);
                inflight.remove(r.id);
                answer(r, f, code);
                return true;
            }
            case Frame.LOST:
                lostFrame(f);
                return true;
            case Frame.GOODBYE: {
                long code = f.uint(Frame.CODE, 0);
                SessionException g = goodbye(f, "session " + id + " at " + addr);
                if (code == 12 || code == 14) {
                    endLost(g, LostReason.SESSION_EXPIRED, "its session expired");
                } else if (code == 13) {
                    endLost(g, LostReason.PROTOCOL_ERROR, "the server ended the session's connection for a protocol error");
                } else if (code == 19) {
                    follow(f.string(Frame.LEADER));
                }
                return false;
            }
            default:
                return true; // EVENT and frames this client does not know
        }
    }

    private void answer(Request r, Frame f, long code) throws SessionException.Protocol {
        String msg = f.string(Frame.MESSAGE);
        switch (r.type) {
            case Frame.ACQUIRE:
                if (f.type == Frame.GRANTED) {
                    granted(r, f);
                } else if (f.type == Frame.REFUSED && !r.abandoned) {
                    fail(r, code == 1 ? new Busy() : SessionException.of("acquire " + quote(r.key), code, msg));
                }
                return;
            case Frame.RELEASE:
            case Frame.RENEW: {
                String op = (r.type == Frame.RENEW ? "renew " : "release ") + quote(r.key);
                if (f.type == Frame.REFUSED) {
                    if (code == 5) {
                        Hold h = holds.get(r.token);
                        if (h != null) {
                            endHold(h, Lock.State.LOST, lost(r.key, LostReason.STALE_TOKEN, "the server no longer holds it"));
                        }
                    }
                    fail(r, SessionException.of(op, code, msg));
                    return;
                }
                if (r.type == Frame.RENEW && r.lock.state == Lock.State.LOST) {
                    fail(r, r.lock.cause);
                    return;
                }
                if (r.type == Frame.RENEW && f.has(Frame.LEFT) && r.lock.hold != null) {
                    setLease(r.lock.hold, measuredAt(r.sentAt), f.uint(Frame.LEFT, 0));
                }
                answered(r, f);
                return;
            }
            case Frame.CLOSE:
                answered(r, f);
                return;
            case Frame.DESCRIBE:
                if (f.type == Frame.INFO) {
                    answered(r, f);
                } else {
                    fail(r, SessionException.of("describe " + quote(r.key), code, msg));
                }
                return;
            default:
        }
    }

    private void granted(Request r, Frame f) {
        long token = f.uint(Frame.TOKEN, 0);
        if (r.abandoned) {
            enqueueRelease(r.key, r.keyBytes, token, null, null, false);
            poke();
            return;
        }
        boolean leased = f.has(Frame.LEFT);
        long from = measuredAt(r.sentAt);
        long left = f.uint(Frame.LEFT, 0);
        if (replay != null) {
            if (r.id > replay.applied || replay.parked.contains(r.id)) {
                replay.fresh.add(token);
            } else {
                HeldItem hi = replay.held.get(token);
                if (hi == null) {
                    fail(r, lost(r.key, LostReason.LOST_WHILE_AWAY, "granted, then lost while the connection was down"));
                    return;
                }
                from = replay.sentAt;
                left = hi.leftMs;
                leased = hi.leased;
            }
        }
        grant(r, token, f.uint(Frame.COUNT, 1), leased, from, left);
    }

    private void lostFrame(Frame f) {
        long token = f.uint(Frame.TOKEN, 0);
        long code = f.uint(Frame.CODE, 0);
        letGo.remove(token);
        Hold h = holds.get(token);
        if (h != null) {
            endHold(h, Lock.State.LOST, lost(h.key, LostReason.of(code), "the server said so (" + Frame.codeName(code) + ")"));
            return;
        }
        Request r = inflight.get(f.id);
        if (r != null && r.type == Frame.ACQUIRE && replay != null && r.id <= replay.applied) {
            inflight.remove(r.id);
            if (!r.abandoned) {
                fail(r, lost(r.key, LostReason.of(code), "granted, then lost (" + Frame.codeName(code) + ")"));
            }
        }
    }

    /**
     * Settles the session after a resume, once every frame the server owed
     * it has come: a lock not listed was lost while away; an acquire the
     * server applied whose answer never came is granted when listed, else
     * failed; a listed lock nobody here holds is released, unless orphaned.
     */
    private void reconcile() {
        ResumeState rs = replay;
        replay = null;
        for (Hold h : new ArrayList<>(holds.values())) {
            HeldItem hi = rs.held.get(h.token);
            if (hi != null) {
                if (hi.leased) {
                    setLease(h, rs.sentAt, hi.leftMs);
                }
            } else if (!rs.fresh.contains(h.token)) {
                endHold(h, Lock.State.LOST, lost(h.key, LostReason.LOST_WHILE_AWAY, "lost while the connection was down"));
            }
        }
        List<Request> unanswered = new ArrayList<>();
        for (Request r : new TreeMap<>(inflight).values()) {
            if (r.id > rs.applied || r.type == Frame.ACQUIRE && rs.parked.contains(r.id) || r.type == Frame.DESCRIBE) {
                continue;
            }
            inflight.remove(r.id);
            Long token = rs.byReq.get(r.id);
            if (token != null && r.type == Frame.ACQUIRE && !r.abandoned) {
                grantListed(r, token, rs);
                continue;
            }
            unanswered.add(r);
        }
        Map<Long, Long> extra = new HashMap<>();
        for (Map.Entry<Long, HeldItem> e : rs.held.entrySet()) {
            Hold h = holds.get(e.getKey());
            extra.put(e.getKey(), e.getValue().count - (h == null ? 0 : h.locks.size()));
        }
        for (Request r : inflight.values()) {
            if (r.type == Frame.RELEASE) {
                extra.merge(r.token, -1L, Long::sum);
            }
        }
        for (Request r : unanswered) {
            switch (r.type) {
                case Frame.ACQUIRE: {
                    if (r.abandoned) {
                        break;
                    }
                    Long token = reentered(rs, extra, r);
                    if (token != null) {
                        extra.merge(token, -1L, Long::sum);
                        grantListed(r, token, rs);
                        break;
                    }
                    fail(r, new SessionException.Connection("acquire " + quote(r.key)
                            + ": the connection dropped before the answer, and the resumed session neither holds nor waits for it", null));
                    break;
                }
                case Frame.RENEW:
                    if (!rs.held.containsKey(r.token)) {
                        fail(r, lost(r.key, LostReason.LOST_WHILE_AWAY, "lost while the connection was down"));
                    } else {
                        answered(r, new Frame(Frame.OK, r.id, List.of()));
                    }
                    break;
                default:
                    answered(r, new Frame(Frame.OK, r.id, List.of()));
            }
        }
        for (Map.Entry<Long, HeldItem> e : rs.held.entrySet()) {
            if (letGo.contains(e.getKey())) {
                continue;
            }
            HeldItem hi = e.getValue();
            byte[] kb = hi.key.getBytes(StandardCharsets.UTF_8);
            for (long n = extra.getOrDefault(e.getKey(), 0L); n > 0; n--) {
                enqueueRelease(hi.key, kb, e.getKey(), null, null, false);
            }
        }
        letGo.retainAll(rs.held.keySet());
        poke();
    }

    private static Long reentered(ResumeState rs, Map<Long, Long> extra, Request r) {
        if (!r.opts.reentrant) {
            return null;
        }
        for (Map.Entry<Long, HeldItem> e : rs.held.entrySet()) {
            if (e.getValue().key.equals(r.key) && extra.getOrDefault(e.getKey(), 0L) > 0) {
                return e.getKey();
            }
        }
        return null;
    }

    private void grantListed(Request r, long token, ResumeState rs) {
        HeldItem hi = rs.held.get(token);
        grant(r, token, hi.count, hi.leased, rs.sentAt, hi.leftMs);
    }

    private static KeyInfo info(Frame f) throws SessionException.Protocol {
        List<KeyInfo.Holder> hs = new ArrayList<>();
        for (Frame h : f.items(Frame.HOLDER)) {
            hs.add(new KeyInfo.Holder(h.uint(Frame.TOKEN, 0), h.string(Frame.NAME), h.uint(Frame.SESSION, 0),
                    Duration.ofMillis(h.uint(Frame.HELD_MS, 0)), h.uint(Frame.MODE, 0) == 1, h.uint(Frame.COUNT, 1),
                    h.has(Frame.LEFT) ? Duration.ofMillis(h.uint(Frame.LEFT, 0)) : null,
                    h.has(Frame.NOTE) ? h.string(Frame.NOTE) : null));
        }
        return new KeyInfo(f.string(Frame.KEY), f.uint(Frame.QUEUE, 0),
                Duration.ofMillis(f.uint(Frame.LEFT, 0)), List.copyOf(hs));
    }

    static String quote(String s) {
        return "\"" + s + "\"";
    }

    @Override
    public String toString() {
        return "Session[" + Long.toUnsignedString(id) + " at " + addr + "]";
    }
}
