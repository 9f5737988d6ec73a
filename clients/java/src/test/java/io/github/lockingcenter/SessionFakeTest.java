package io.github.lockingcenter;

import java.io.BufferedInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

/**
 * The session client against scripted servers: leader following, a resume
 * whose WELCOME comes in MORE frames, a silent connection, a lease
 * given up at the client's deadline with RELEASE lapse, and the farewell
 * of a session the client counted expired.
 */
final class SessionFakeTest {
    private SessionFakeTest() {}

    static final byte[] SECRET = new byte[16];

    /** One connection of a scripted server. */
    static final class Peer {
        final Socket socket;
        final InputStream in;
        final OutputStream out;
        final byte[] head = new byte[4];

        Peer(Socket socket) throws IOException {
            this.socket = socket;
            socket.setSoTimeout(20_000);
            in = new BufferedInputStream(socket.getInputStream());
            out = socket.getOutputStream();
            byte[] preface = in.readNBytes(4);
            Check.isTrue(Arrays.equals(preface, Frame.PREFACE), "no preface");
        }

        Frame next() throws IOException {
            return Frame.read(in, head);
        }

        /** The next frame that is not a PING (PINGs are answered). */
        Frame request() throws IOException {
            for (;;) {
                Frame f = next();
                if (f.type != Frame.PING) {
                    return f;
                }
                send(Frame.OK, f.id);
            }
        }

        void send(int type, long id, Frame.Field... fields) throws IOException {
            out.write(Frame.encode(type, id, List.of(fields)));
        }

        void welcome(long id, long keepaliveMs, Frame.Field... more) throws IOException {
            welcome(id, 30_000, keepaliveMs, more);
        }

        void welcome(long id, long ttlMs, long keepaliveMs, Frame.Field... more) throws IOException {
            List<Frame.Field> f = new ArrayList<>(List.of(Frame.Field.u64(Frame.SESSION, 42),
                    Frame.Field.bytes(Frame.SECRET, SECRET), Frame.Field.u32(Frame.TTL, ttlMs),
                    Frame.Field.u32(Frame.KEEPALIVE, keepaliveMs), Frame.Field.str(Frame.SERVER, "fake")));
            f.addAll(List.of(more));
            out.write(Frame.encode(Frame.WELCOME, id, f));
        }
    }

    /** A server on 127.0.0.1, a free port, that hands each connection to the queue. */
    static final class Server implements AutoCloseable {
        final ServerSocket ss;
        final BlockingQueue<Peer> conns = new LinkedBlockingQueue<>();
        final List<Socket> all = new CopyOnWriteArrayList<>();

        Server() throws IOException {
            ss = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
            Thread t = new Thread(() -> {
                try {
                    for (;;) {
                        Socket s = ss.accept();
                        all.add(s);
                        conns.add(new Peer(s));
                    }
                } catch (IOException e) {
                    // closed
                }
            });
            t.setDaemon(true);
            t.start();
        }

        String addr() {
            return "127.0.0.1:" + ss.getLocalPort();
        }

        Peer accept() throws InterruptedException {
            Peer p = conns.poll(20, TimeUnit.SECONDS);
            Check.isTrue(p != null, "no connection came");
            return p;
        }

        @Override
        public void close() throws IOException {
            ss.close();
            for (Socket s : all) {
                s.close();
            }
        }
    }

    static CompletableFuture<Session> connectAsync(String addr, SessionOptions options) {
        return CompletableFuture.supplyAsync(() -> {
            try {
                return Session.connect(addr, options);
            } catch (SessionException e) {
                throw new RuntimeException(e);
            }
        });
    }

    /** Connects a session to srv with options, answers its HELLO with keepaliveMs, and returns both ends. */
    static Object[] open(Server srv, SessionOptions options, long keepaliveMs) throws Exception {
        CompletableFuture<Session> cs = connectAsync(srv.addr(), options);
        Peer p = srv.accept();
        Frame hello = p.next();
        Check.equal(hello.type, Frame.HELLO, "first frame");
        p.welcome(hello.id, keepaliveMs);
        return new Object[] {cs.get(20, TimeUnit.SECONDS), p};
    }

    /** Closes s, p answering its CLOSE (the next frame but PINGs, which must be a CLOSE). */
    static void close(Session s, Peer p) throws Exception {
        CompletableFuture<Void> closed = CompletableFuture.runAsync(() -> {
            try {
                Frame c = p.request();
                Check.equal(c.type, Frame.CLOSE, "the frame before the close (nothing else was due)");
                p.send(Frame.OK, c.id);
            } catch (IOException e) {
                throw new RuntimeException(e);
            }
        });
        s.close();
        closed.get(20, TimeUnit.SECONDS);
    }

    /** A lock granted by p, and the id of its acquire. */
    record Granted(Lock lock, long id) {}

    /** Acquires key in s, p granting it with token. */
    static Granted grant(Session s, Peer p, String key, long token) throws Exception {
        CompletableFuture<Lock> got = s.acquireAsync(key);
        Frame a = p.request();
        Check.equal(a.type, Frame.ACQUIRE, "the acquire");
        p.send(Frame.GRANTED, a.id, Frame.Field.str(Frame.KEY, key), Frame.Field.u64(Frame.TOKEN, token),
                Frame.Field.u32(Frame.COUNT, 1));
        return new Granted(got.get(20, TimeUnit.SECONDS), a.id);
    }

    static Frame.Field item(int tag, Frame.Field... fields) {
        byte[] f = Frame.encode(0, 0, List.of(fields));
        return new Frame.Field(tag, Arrays.copyOfRange(f, 4 + Frame.HEAD, f.length));
    }

    static void run(Check check) {
        check.test("fake: a node that does not lead names the leader, and the session opens there", () -> {
            try (Server follower = new Server(); Server leader = new Server()) {
                CompletableFuture<Session> s = connectAsync(follower.addr(), SessionOptions.defaults());
                Peer f = follower.accept();
                Frame hello = f.next();
                Check.equal(hello.type, Frame.HELLO, "first frame");
                f.send(Frame.GOODBYE, hello.id, Frame.Field.u8(Frame.CODE, 19), Frame.Field.str(Frame.MESSAGE, "follower"),
                        Frame.Field.str(Frame.LEADER, leader.addr()));
                Peer l = leader.accept();
                l.welcome(l.next().id, 10_000);
                Session session = s.get(20, TimeUnit.SECONDS);
                Check.equal(session.id(), 42L, "session id");
                close(session, l);
            }
        });
        check.test("fake: every address answers not_leader for the connect timeout: NotLeader", () -> {
            try (Server a = new Server(); Server b = new Server()) {
                CompletableFuture<Throwable> got = CompletableFuture.supplyAsync(() -> {
                    try {
                        Session.connect(List.of(a.addr(), b.addr()), SessionOptions.defaults()
                                .connectTimeout(Duration.ofMillis(600))).close();
                        return null;
                    } catch (SessionException e) {
                        return e;
                    }
                });
                int answered = 0;
                while (!got.isDone()) {
                    for (Server s : List.of(a, b)) {
                        Peer p = s.conns.poll(50, TimeUnit.MILLISECONDS);
                        if (p != null) {
                            p.send(Frame.GOODBYE, p.next().id, Frame.Field.u8(Frame.CODE, 19),
                                    Frame.Field.str(Frame.MESSAGE, "no leader yet"));
                            answered++;
                        }
                    }
                }
                Throwable t = got.get(20, TimeUnit.SECONDS);
                Check.isTrue(t instanceof SessionException.NotLeader, "got " + t);
                Check.isTrue(t.getMessage().contains("no leader yet"), "the server's message: " + t.getMessage());
                Check.isTrue(answered > 2, "the addresses were tried " + answered + " times, want more than one round");
            }
        });
        check.test("fake: a resume whose WELCOME comes in MORE frames keeps the lock and hands over a grant made while away", () -> {
            try (Server srv = new Server()) {
                List<ConnectionState> states = new CopyOnWriteArrayList<>();
                Object[] ends = open(srv, SessionOptions.defaults().onStateChange(states::add), 10_000);
                Session s = (Session) ends[0];
                Peer p = (Peer) ends[1];
                Granted a = grant(s, p, "k", -7L);
                Lock k = a.lock;
                CompletableFuture<Lock> parked = s.acquireAsync("j");
                Frame b = p.request();
                p.socket.close(); // the drop: j is granted while the client is away
                Peer q = srv.accept();
                Frame resume = q.next();
                Check.equal(resume.type, Frame.RESUME, "first frame after the drop");
                Check.equal(resume.uint(Frame.SESSION, 0), 42L, "the session resumed");
                Frame sync = q.next();
                Check.equal(sync.type, Frame.PING, "the frame after the RESUME");
                q.welcome(resume.id, 10_000, Frame.Field.u64(Frame.APPLIED, b.id),
                        item(Frame.HELD, Frame.Field.str(Frame.KEY, "k"), Frame.Field.u64(Frame.TOKEN, -7L),
                                Frame.Field.u64(Frame.REQUEST, a.id), Frame.Field.u8(Frame.MODE, 0), Frame.Field.u32(Frame.COUNT, 1)),
                        Frame.Field.u8(Frame.MORE_FLAG, 1));
                q.send(Frame.MORE, resume.id, item(Frame.HELD, Frame.Field.str(Frame.KEY, "j"), Frame.Field.u64(Frame.TOKEN, 9),
                        Frame.Field.u64(Frame.REQUEST, b.id), Frame.Field.u8(Frame.MODE, 0), Frame.Field.u32(Frame.COUNT, 1)),
                        Frame.Field.u8(Frame.MORE_FLAG, 1));
                q.send(Frame.MORE, resume.id);
                q.send(Frame.GRANTED, b.id, Frame.Field.str(Frame.KEY, "j"), Frame.Field.u64(Frame.TOKEN, 9),
                        Frame.Field.u32(Frame.COUNT, 1));
                q.send(Frame.OK, sync.id);
                Lock j = parked.get(20, TimeUnit.SECONDS);
                Check.equal(j.tokenString(), "9", "the grant made while away");
                Check.isTrue(k.isHeld(), "the held lock ended across the resume");
                Check.equal(k.tokenString(), "18446744073709551609", "the token above 2^63");
                // Nothing is released (a RELEASE would come before the CLOSE): every listed lock has its holder here.
                close(s, q);
                Check.equal(states, List.of(ConnectionState.CONNECTED, ConnectionState.SUSPENDED, ConnectionState.RECONNECTED),
                        "the states");
            }
        });
        check.test("fake: a connection silent for the keepalive and its margin is left for a new one", () -> {
            try (Server srv = new Server()) {
                Object[] ends = open(srv, SessionOptions.defaults().readTimeout(Duration.ofSeconds(5)), 200);
                Session s = (Session) ends[0];
                Peer p = (Peer) ends[1];
                Frame ping = p.next(); // sent at the keepalive, never answered
                Check.equal(ping.type, Frame.PING, "what an idle session sends");
                Peer q = srv.accept(); // it gave the silent connection up
                Frame resume = q.next();
                Check.equal(resume.type, Frame.RESUME, "first frame of the new connection");
                Frame sync = q.next();
                q.welcome(resume.id, 200, Frame.Field.u64(Frame.APPLIED, 0));
                q.send(Frame.OK, sync.id);
                close(s, q);
            }
        });
        check.test("fake: a lease given up at the client's deadline is released with lapse; a user's release has none", () -> {
            try (Server srv = new Server()) {
                Object[] ends = open(srv, SessionOptions.defaults(), 10_000);
                Session s = (Session) ends[0];
                Peer p = (Peer) ends[1];
                CompletableFuture<Lock> got = s.acquireAsync("leased", AcquireOptions.defaults().lease(Duration.ofMillis(300)));
                Frame a = p.request();
                Check.equal(a.uint(Frame.LEASE, 0), 300L, "lease_ms");
                p.send(Frame.GRANTED, a.id, Frame.Field.str(Frame.KEY, "leased"), Frame.Field.u64(Frame.TOKEN, 5),
                        Frame.Field.u32(Frame.COUNT, 1), Frame.Field.u32(Frame.LEFT, 300));
                Lock l = got.get(20, TimeUnit.SECONDS);
                CompletableFuture<LostReason> lost = new CompletableFuture<>();
                l.onLost((lk, reason) -> lost.complete(reason));
                Frame r = p.request();
                Check.equal(lost.get(20, TimeUnit.SECONDS), LostReason.LEASE_EXPIRED, "the reason");
                Check.equal(r.type, Frame.RELEASE, "what the deadline sends");
                Check.equal(r.uint(Frame.TOKEN, 0), 5L, "its token");
                Check.equal(r.uint(Frame.LAPSE, 0), 1L, "its lapse");
                p.send(Frame.REFUSED, r.id, Frame.Field.u8(Frame.CODE, 8), Frame.Field.str(Frame.MESSAGE, "tag 0x23"));
                Lock pl = grant(s, p, "plain", 6).lock;
                CompletableFuture<Void> released = CompletableFuture.runAsync(() -> {
                    try {
                        pl.release();
                    } catch (Exception e) {
                        throw new RuntimeException(e);
                    }
                });
                Frame rel = p.request();
                Check.equal(rel.type, Frame.RELEASE, "the user's release");
                Check.isTrue(!rel.has(Frame.LAPSE), "a user's release carries lapse");
                p.send(Frame.OK, rel.id);
                released.get(20, TimeUnit.SECONDS);
                close(s, p);
            }
        });
        check.test("fake: a session counted expired here is closed on the server with a RELEASE lapse of each lock it held before the CLOSE", () -> {
            try (Server srv = new Server()) {
                CompletableFuture<Void> ended = new CompletableFuture<>();
                CompletableFuture<Session> cs = connectAsync(srv.addr(), SessionOptions.defaults().onStateChange(st -> {
                    if (st == ConnectionState.LOST) {
                        ended.complete(null);
                    }
                }));
                Peer p = srv.accept();
                Frame hello = p.next();
                Check.equal(hello.type, Frame.HELLO, "first frame");
                // The TTL less its margin (900 ms) passes before the first PING (1 s) and the silence bound.
                p.welcome(hello.id, 1_000, 1_000);
                Session s = cs.get(20, TimeUnit.SECONDS);
                grant(s, p, "fw/a", 5);
                grant(s, p, "fw/b", -3L);
                grant(s, p, "fw/left", 9).lock.orphan();
                // Its lease ends here first (at 150 ms), and p leaves the RELEASE
                // with lapse unanswered: the server may still hold it.
                CompletableFuture<Lock> got = s.acquireAsync("fw/leased", AcquireOptions.defaults().lease(Duration.ofMillis(200)));
                Frame a = p.next();
                Check.equal(a.type, Frame.ACQUIRE, "the leased acquire");
                p.send(Frame.GRANTED, a.id, Frame.Field.str(Frame.KEY, "fw/leased"), Frame.Field.u64(Frame.TOKEN, 7),
                        Frame.Field.u32(Frame.COUNT, 1), Frame.Field.u32(Frame.LEFT, 200));
                got.get(20, TimeUnit.SECONDS);
                Frame lapsed = p.next();
                Check.equal(lapsed.type, Frame.RELEASE, "what the lease's deadline sends");
                Check.equal(lapsed.uint(Frame.TOKEN, 0), 7L, "its token");
                // From here p answers nothing: the session ends by the client's count.
                ended.get(20, TimeUnit.SECONDS);
                Check.isTrue(!s.isOpen(), "the session is open after its TTL");
                Peer q = srv.accept();
                Frame resume = q.next();
                Check.equal(resume.type, Frame.RESUME, "the farewell's first frame");
                Check.equal(resume.uint(Frame.SESSION, 0), 42L, "the session resumed");
                Check.isTrue(Arrays.equals(resume.get(Frame.SECRET), SECRET), "the RESUME's secret");
                List<String> released = new ArrayList<>();
                long id = resume.id;
                Frame f;
                for (;;) {
                    f = q.next();
                    Check.equal(f.id, id + 1, "the id after " + id);
                    id = f.id;
                    if (f.type != Frame.RELEASE) {
                        break;
                    }
                    Check.equal(f.uint(Frame.LAPSE, 0), 1L, "the lapse of the release of " + f.string(Frame.KEY));
                    released.add(f.string(Frame.KEY) + "/" + Long.toUnsignedString(f.uint(Frame.TOKEN, 0)));
                }
                Check.equal(f.type, Frame.CLOSE, "the farewell's last frame");
                Check.equal(released, List.of("fw/a/5", "fw/leased/7", "fw/b/18446744073709551613"),
                        "the locks released with lapse in the order of their tokens (not the orphaned one)");
                // The releases' answers are passed over: only the CLOSE's ends the farewell.
                q.welcome(resume.id, 1_000, 1_000);
                q.send(Frame.OK, resume.id + 1);
                q.send(Frame.REFUSED, resume.id + 2, Frame.Field.u8(Frame.CODE, 8), Frame.Field.str(Frame.MESSAGE, "tag 0x23"));
                q.send(Frame.OK, resume.id + 3);
                q.socket.setSoTimeout(300);
                Throwable waited = Check.thrown(q::next, "a frame after the releases' answers");
                Check.isTrue(waited instanceof SocketTimeoutException, "the farewell ended before the CLOSE's answer: " + waited);
                q.socket.setSoTimeout(20_000);
                q.send(Frame.OK, f.id);
                Check.isTrue(Check.thrown(q::next, "a frame after the CLOSE's answer") instanceof IOException,
                        "the farewell's connection was not closed after the CLOSE's answer");
                s.close();
            }
        });
        check.test("fake: GOODBYE session_expired loses every lock, says LOST, and fails what comes after", () -> {
            try (Server srv = new Server()) {
                List<ConnectionState> states = new CopyOnWriteArrayList<>();
                CompletableFuture<Void> ended = new CompletableFuture<>();
                Object[] ends = open(srv, SessionOptions.defaults().onStateChange(st -> {
                    states.add(st);
                    if (st == ConnectionState.LOST) {
                        ended.complete(null);
                    }
                }), 10_000);
                Session s = (Session) ends[0];
                Peer p = (Peer) ends[1];
                Lock l = grant(s, p, "k", 3).lock;
                CompletableFuture<LostReason> lost = new CompletableFuture<>();
                l.onLost((lk, reason) -> lost.complete(reason));
                CompletableFuture<Lock> waiting = s.acquireAsync("w");
                p.request();
                p.send(Frame.GOODBYE, 0, Frame.Field.u8(Frame.CODE, 12), Frame.Field.str(Frame.MESSAGE, "the TTL passed"));
                Check.equal(lost.get(20, TimeUnit.SECONDS), LostReason.SESSION_EXPIRED, "the reason");
                Throwable w = Check.thrown(() -> waiting.get(20, TimeUnit.SECONDS), "the waiting acquire");
                Check.isTrue(w.getCause() instanceof SessionException.SessionExpired, "the waiting acquire: " + w);
                Throwable after = Check.thrown(() -> s.acquire("x"), "an acquire after the end");
                Check.isTrue(after instanceof SessionException.SessionExpired, "after: " + after);
                Check.isTrue(after.getMessage().contains("the TTL passed"), "the server's message: " + after.getMessage());
                Check.isTrue(!s.isOpen(), "the session is open");
                s.close();
                ended.get(20, TimeUnit.SECONDS);
                Check.equal(states, List.of(ConnectionState.CONNECTED, ConnectionState.LOST), "the states");
            }
        });
        check.test("fake: bytes from the server that break the protocol drop the connection, and the session resumes", () -> {
            try (Server srv = new Server()) {
                Object[] ends = open(srv, SessionOptions.defaults(), 10_000);
                Session s = (Session) ends[0];
                Peer p = (Peer) ends[1];
                CompletableFuture<Lock> got = s.acquireAsync("k");
                Frame a = p.request();
                p.out.write(new byte[] {0, 0, 0, 3, 1, 2, 3}); // a length under 9
                Peer q = srv.accept();
                Frame resume = q.next();
                Check.equal(resume.type, Frame.RESUME, "first frame of the new connection");
                Frame sync = q.next();
                q.welcome(resume.id, 10_000, Frame.Field.u64(Frame.APPLIED, 0));
                Frame again = q.next();
                Check.equal(again.type, Frame.ACQUIRE, "the acquire sent again");
                Check.equal(again.id, a.id, "with its id");
                q.send(Frame.OK, sync.id);
                q.send(Frame.GRANTED, a.id, Frame.Field.str(Frame.KEY, "k"), Frame.Field.u64(Frame.TOKEN, 4),
                        Frame.Field.u32(Frame.COUNT, 1));
                Check.equal(got.get(20, TimeUnit.SECONDS).tokenString(), "4", "the grant");
                close(s, q);
            }
        });
    }
}
