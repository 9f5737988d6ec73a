package io.github.lockingcenter;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * The session scenarios of clients/conformance/SESSIONS.md for the Java
 * client, in order: one line per scenario on standard output, "ok &lt;id&gt;"
 * or "FAIL &lt;id&gt;: &lt;reason&gt;"; chatter on standard error. Reads the
 * harness's environment (LC_ADDR, LC_CLUSTER, LC_PROBE, ...).
 */
public final class SessionConformance {
    private static final String PREFIX = "java/";
    /** How long a scenario waits for anything it awaits before it fails. */
    private static final long LIMIT_S = 15;

    private final Map<String, String> env;
    private final Probe probe;
    private final List<AutoCloseable> open = new ArrayList<>();

    private SessionConformance(Map<String, String> env) {
        this.env = env;
        this.probe = new Probe(env.get("LC_PROBE"));
    }

    interface Scenario {
        void run() throws Exception;
    }

    static final class Failure extends Exception {
        private static final long serialVersionUID = 1L;

        Failure(String message) {
            super(message);
        }
    }

    static void ensure(boolean cond, String message) throws Failure {
        if (!cond) {
            throw new Failure(message);
        }
    }

    private String e(String name) {
        return env.get(name);
    }

    /** Opens a session that the scenario's end closes. */
    private Session open(String addr, String name) throws Exception {
        return open(addr, SessionOptions.defaults().name(name));
    }

    private Session open(String addr, SessionOptions o) throws Exception {
        Session s = Session.connect(addr, o);
        open.add(s);
        return s;
    }

    private void closeAll() {
        for (int i = open.size() - 1; i >= 0; i--) {
            try {
                open.get(i).close();
            } catch (Exception ex) {
                System.err.println("close: " + ex);
            }
        }
        open.clear();
    }

    static <T> T await(CompletableFuture<T> f, String what) throws Exception {
        try {
            return f.get(LIMIT_S, TimeUnit.SECONDS);
        } catch (TimeoutException ex) {
            throw new Failure(what + ": nothing after " + LIMIT_S + " s");
        } catch (ExecutionException ex) {
            throw new Failure(what + ": " + ex.getCause());
        }
    }

    /** Fails unless the key's only holder is l (its token and session), as the probe reads it at manager. */
    private void heldBy(String manager, Session s, Lock l) throws Exception {
        List<String[]> hs = probe.holders(manager, l.key());
        ensure(hs.size() == 1 && hs.get(0)[0].equals(l.tokenString()) && hs.get(0)[1].equals(Long.toUnsignedString(s.id())),
                "holders of " + l.key() + ": " + Probe.show(hs) + ", want token " + l.tokenString() + " of session "
                        + Long.toUnsignedString(s.id()));
    }

    private String leaderManager() throws Exception {
        int i = Integer.parseInt(probe.run("leader", e("LC_CLUSTER_MANAGER")).trim());
        return e("LC_CLUSTER_MANAGER").split(",")[i];
    }

    // --- the scenarios ---

    void acquireRelease() throws Exception {
        Session s = open(e("LC_ADDR"), "java-acquire-release");
        String key = PREFIX + "acquire-release";
        Lock first = s.acquire(key);
        heldBy(e("LC_MANAGER_ADDR"), s, first);
        first.release();
        Lock second = s.acquire(key);
        ensure(Long.compareUnsigned(second.token(), first.token()) > 0,
                "second token " + second.tokenString() + ", not above the first " + first.tokenString());
        second.release();
        second.release();
        ensure(!second.isHeld(), "a released lock is held");
    }

    void tryBusy() throws Exception {
        String key = PREFIX + "try-busy";
        open(e("LC_ADDR"), "java-holder").acquire(key);
        Optional<Lock> got = open(e("LC_ADDR"), "java-asker").tryAcquire(key);
        ensure(got.isEmpty(), "a try of a held key was granted: " + got);
    }

    void waitBound() throws Exception {
        String key = PREFIX + "wait-bound";
        open(e("LC_ADDR"), "java-holder").acquire(key);
        Session s = open(e("LC_ADDR"), "java-asker");
        try {
            s.acquire(key, AcquireOptions.defaults().waitFor(Duration.ofMillis(500)));
            throw new Failure("a bounded wait for a held key was granted");
        } catch (SessionException.Timeout t) {
            System.err.println("wait bound: " + t.getMessage());
        }
        probe.waiters(e("LC_MANAGER_ADDR"), key, 0);
    }

    void cancel() throws Exception {
        String key = PREFIX + "cancel";
        Lock held = open(e("LC_ADDR"), "java-holder").acquire(key);
        Session s = open(e("LC_ADDR"), "java-asker");
        // The thread's interrupt is the blocking acquire's cancellation.
        CompletableFuture<Throwable> interrupted = new CompletableFuture<>();
        Thread t = new Thread(() -> {
            try {
                s.acquire(key);
                interrupted.complete(null);
            } catch (Throwable ex) {
                interrupted.complete(ex);
            }
        });
        t.start();
        probe.waiters(e("LC_MANAGER_ADDR"), key, 1);
        long at = System.nanoTime();
        t.interrupt();
        Throwable got = await(interrupted, "the interrupted acquire");
        ensure(got instanceof InterruptedException, "the interrupted acquire: " + got + ", want InterruptedException");
        probe.waiters(e("LC_MANAGER_ADDR"), key, 0);
        long ms = (System.nanoTime() - at) / 1_000_000;
        ensure(ms <= 1000, "the queue was empty " + ms + " ms after the interrupt, want within 1 s");
        // The future's cancel, likewise.
        CompletableFuture<Lock> f = s.acquireAsync(key);
        probe.waiters(e("LC_MANAGER_ADDR"), key, 1);
        at = System.nanoTime();
        ensure(f.cancel(true), "the future's cancel returned false");
        probe.waiters(e("LC_MANAGER_ADDR"), key, 0);
        ms = (System.nanoTime() - at) / 1_000_000;
        ensure(ms <= 1000, "the queue was empty " + ms + " ms after the future's cancel, want within 1 s");
        Session next = open(e("LC_ADDR"), "java-next");
        CompletableFuture<Lock> granted = next.acquireAsync(key);
        probe.waiters(e("LC_MANAGER_ADDR"), key, 1);
        held.release();
        heldBy(e("LC_MANAGER_ADDR"), next, await(granted, "the next waiter"));
    }

    void staleRelease() throws Exception {
        String key = PREFIX + "stale-release";
        Session holder = open(e("LC_ADDR"), "java-holder");
        Session other = open(e("LC_ADDR"), "java-other");
        Lock l = holder.acquire(key);
        Object[][] cases = {{"another session", other, l.token()}, {"a wrong token", holder, l.token() + 1}};
        for (Object[] c : cases) {
            try {
                ((Session) c[1]).release(key, (Long) c[2]);
                throw new Failure("the release by " + c[0] + " was not refused");
            } catch (SessionException.StaleToken st) {
                ensure(st.reason() == LostReason.STALE_TOKEN, "reason " + st.reason());
            }
        }
        heldBy(e("LC_MANAGER_ADDR"), holder, l);
        ensure(l.isHeld(), "the real holder's lock ended");
        l.release();
    }

    void leaseExpiry() throws Exception {
        String key = PREFIX + "lease-expiry";
        Session s = open(e("LC_ADDR"), "java-lease");
        Session o = open(e("LC_ADDR"), "java-after");
        long asked = System.nanoTime();
        Lock l = s.acquire(key, AcquireOptions.defaults().lease(Duration.ofMillis(500)).lockDelay(Duration.ofSeconds(2)));
        CompletableFuture<LostReason> lost = new CompletableFuture<>();
        l.onLost((lk, reason) -> lost.complete(reason));
        LostReason reason;
        try {
            reason = lost.get(2_000_000_000L - (System.nanoTime() - asked), TimeUnit.NANOSECONDS);
        } catch (TimeoutException t) {
            throw new Failure("a lock with a 500 ms lease not reported lost 2 s after the acquire");
        }
        long lostAt = System.nanoTime();
        ensure(reason == LostReason.LEASE_EXPIRED, "lost for " + reason + ", want LEASE_EXPIRED");
        System.err.println("lease lost after " + (lostAt - asked) / 1_000_000 + " ms");
        Optional<Lock> got = o.tryAcquire(key);
        ensure(got.isEmpty(), "a try right after the loss was granted (no lock-delay): " + got);
        Lock next = o.acquire(key, AcquireOptions.defaults().waitFor(Duration.ofMillis(4800)));
        long ms = (System.nanoTime() - lostAt) / 1_000_000;
        ensure(ms <= 5000, "the waiting acquire was granted " + ms + " ms after the loss, want within 5 s");
        System.err.println("granted " + ms + " ms after the loss");
        next.release();
    }

    void killClient() throws Exception {
        List<String> keys = List.of(PREFIX + "kill-1", PREFIX + "kill-2", PREFIX + "kill-3");
        Session s = open(e("LC_ADDR"), "java-after-kill");
        List<String> cmd = new ArrayList<>(List.of(Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                "-cp", System.getProperty("java.class.path"), HoldKeys.class.getName(), e("LC_ADDR")));
        cmd.addAll(keys);
        Process child = new ProcessBuilder(cmd).redirectError(ProcessBuilder.Redirect.INHERIT).start();
        try {
            BufferedReader r = new BufferedReader(new InputStreamReader(child.getInputStream(), StandardCharsets.UTF_8));
            String line = r.readLine();
            ensure(line != null && line.startsWith("held "), "the child said " + line);
            String[] tokens = line.substring(5).split(" ");
            child.destroyForcibly(); // SIGKILL
            long killed = System.nanoTime();
            child.waitFor();
            TimeUnit.NANOSECONDS.sleep(killed + 1_000_000_000L - System.nanoTime());
            for (int i = 0; i < keys.size(); i++) {
                List<String[]> hs = probe.holders(e("LC_MANAGER_ADDR"), keys.get(i));
                ensure(hs.size() == 1 && hs.get(0)[0].equals(tokens[i]), "1 s after the kill, " + keys.get(i)
                        + " has holders " + Probe.show(hs) + ", want the child's token " + tokens[i]);
            }
            List<CompletableFuture<Lock>> waits = new ArrayList<>();
            long leftMs = (killed + 5_000_000_000L - System.nanoTime()) / 1_000_000;
            for (String k : keys) {
                waits.add(s.acquireAsync(k, AcquireOptions.defaults().waitFor(Duration.ofMillis(leftMs))));
            }
            for (int i = 0; i < keys.size(); i++) {
                await(waits.get(i), keys.get(i) + " within 5 s of the kill");
            }
        } finally {
            child.destroyForcibly();
        }
    }

    void resume() throws Exception {
        String keyA = PREFIX + "resume-a", keyB = PREFIX + "resume-b";
        Session s = open(e("LC_PROXY_ADDR"), "java-resume");
        Lock a = s.acquire(keyA);
        Lock b = open(e("LC_ADDR"), "java-resume-other").acquire(keyB);
        CompletableFuture<Lock> parked = s.acquireAsync(keyB);
        probe.waiters(e("LC_MANAGER_ADDR"), keyB, 1);
        probe.run("cut", e("LC_PROXY_CTL"));
        b.release();
        Lock got = await(parked, "the parked acquire after the cut");
        ensure(a.isHeld(), "the lock of " + keyA + " ended across the cut: " + a.lostCause());
        heldBy(e("LC_MANAGER_ADDR"), s, a);
        heldBy(e("LC_MANAGER_ADDR"), s, got);
    }

    void leaderStop() throws Exception {
        Session s = open(e("LC_CLUSTER"), SessionOptions.defaults().name("java-leader-stop").ttl(Duration.ofSeconds(3)));
        Lock l = s.acquire(PREFIX + "leader-stop");
        CountDownLatch lost = new CountDownLatch(1);
        l.onLost((lk, reason) -> lost.countDown());
        probe.run("signal-leader", "STOP");
        boolean ended;
        try {
            ended = lost.await(6, TimeUnit.SECONDS);
        } finally {
            probe.run("signal-leader", "CONT");
        }
        ensure(!ended, "the lock was lost during the leader's SIGSTOP: " + l.lostCause());
        ensure(s.isOpen(), "the session ended");
        heldBy(leaderManager(), s, l);
    }

    void leaderKill() throws Exception {
        String nodes = e("LC_CLUSTER");
        Session s = open(nodes, "java-leader-kill");
        Lock held = s.acquire(PREFIX + "leader-kill-held");
        String keyB = PREFIX + "leader-kill-parked";
        Lock b = open(nodes, "java-leader-kill-other").acquire(keyB);
        CompletableFuture<Lock> parked = s.acquireAsync(keyB);
        probe.waiters(leaderManager(), keyB, 1);
        probe.run("signal-leader", "KILL");
        String leader = leaderManager();
        heldByEventually(leader, s, held);
        b.release();
        Lock got = await(parked, "the parked acquire after the failover");
        ensure(held.isHeld(), "the held lock ended across the failover: " + held.lostCause());
        heldBy(leader, s, got);
    }

    /** heldBy, tried again while the new leader has not yet applied the whole log (at most LIMIT_S). */
    private void heldByEventually(String manager, Session s, Lock l) throws Exception {
        long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(LIMIT_S);
        for (;;) {
            try {
                heldBy(manager, s, l);
                return;
            } catch (Exception ex) {
                if (System.nanoTime() - end > 0) {
                    throw ex;
                }
                probe.run("leader", e("LC_CLUSTER_MANAGER"));
            }
        }
    }

    void tlsToken() throws Exception {
        SessionOptions tls = SessionOptions.defaults()
                .tls(Tls.context(Path.of(e("LC_CA_FILE")), null, null)).serverName("localhost");
        Session s = open(e("LC_TLS_ADDR"), tls.name("java-tls").token(e("LC_TOKEN")));
        s.acquire(PREFIX + "tls").release();
        try {
            open(e("LC_TLS_ADDR"), tls.name("java-tls-wrong").token("not-the-token-" + e("LC_TOKEN")));
            throw new Failure("a session with a wrong token opened");
        } catch (SessionException.Unauthenticated u) {
            System.err.println("wrong token: " + u.getMessage());
        }
        try {
            s.acquire("outside-" + PREFIX + "tls");
            throw new Failure("a key outside " + PREFIX + " was granted");
        } catch (SessionException.Forbidden f) {
            System.err.println("outside: " + f.getMessage());
        }
    }

    void modes() throws Exception {
        String addr = e("LC_ADDR"), manager = e("LC_MANAGER_ADDR");
        Session[] s = {open(addr, "java-modes-0"), open(addr, "java-modes-1"), open(addr, "java-modes-2")};
        String shared = PREFIX + "modes-shared";
        for (int i = 0; i < 2; i++) {
            ensure(s[i].tryAcquire(shared, AcquireOptions.defaults().shared()).isPresent(), "shared holder " + i + " busy");
        }
        ensure(probe.holders(manager, shared).size() == 2, "holders of the shared key: " + Probe.show(probe.holders(manager, shared)));
        String sem = PREFIX + "modes-semaphore";
        AcquireOptions two = AcquireOptions.defaults().limit(2);
        for (int i = 0; i < 2; i++) {
            ensure(s[i].tryAcquire(sem, two).isPresent(), "semaphore holder " + i + " busy");
        }
        ensure(probe.holders(manager, sem).size() == 2, "holders of the semaphore: " + Probe.show(probe.holders(manager, sem)));
        ensure(s[2].tryAcquire(sem, two).isEmpty(), "a third try of a semaphore of 2 was granted");
        String re = PREFIX + "modes-reentrant";
        AcquireOptions job = AcquireOptions.defaults().reentrant("worker-1");
        Lock first = s[0].acquire(re, job);
        Lock again = s[0].acquire(re, job);
        ensure(again.token() == first.token(), "reentrant token " + again.tokenString() + ", want " + first.tokenString());
        KeyInfo info = s[1].describe(re);
        ensure(info.holders().size() == 1 && info.holders().get(0).count() == 2, "after a reentrant acquire: " + info);
        String pri = PREFIX + "modes-priority";
        Lock holder = s[0].acquire(pri);
        CompletableFuture<Lock> low = s[1].acquireAsync(pri);
        probe.waiters(manager, pri, 1);
        CompletableFuture<Lock> high = s[2].acquireAsync(pri, AcquireOptions.defaults().priority(10));
        probe.waiters(manager, pri, 2);
        holder.release();
        Object firstDone = await(CompletableFuture.anyOf(high, low), "the waiters after the release");
        ensure(high.isDone() && firstDone == high.getNow(null), "the waiter of priority 0 was granted first");
        high.get().release();
        await(low, "the waiter of priority 0").release();
    }

    void note() throws Exception {
        Session s = open(e("LC_ADDR"), "java-note");
        String text = "nightly build 7 on host-3, ünïcode — see ci/runs/7";
        Lock l = s.acquire(PREFIX + "note", AcquireOptions.defaults().note(text));
        List<String[]> hs = probe.holders(e("LC_MANAGER_ADDR"), l.key());
        ensure(hs.size() == 1 && hs.get(0)[0].equals(l.tokenString()) && hs.get(0).length == 3 && hs.get(0)[2].equals(text),
                "holders " + Probe.show(hs) + ", want token " + l.tokenString() + " with the note " + text);
    }

    void bigToken() throws Exception {
        Session s = open(e("LC_BIG_ADDR"), "java-big-token");
        Lock l = s.acquire(PREFIX + "big-token");
        ensure(Long.compareUnsigned(l.token(), 1L << 63) > 0, "token " + l.tokenString() + ", want one above 2^63");
        heldBy(e("LC_BIG_MANAGER"), s, l);
    }

    void silentServer() throws Exception {
        long start = System.nanoTime();
        try {
            open(e("LC_SILENT_ADDR"), SessionOptions.defaults().name("java-silent").readTimeout(Duration.ofSeconds(2)));
            throw new Failure("a session opened at a server that never answers");
        } catch (SessionException.Timeout t) {
            long ms = (System.nanoTime() - start) / 1_000_000;
            ensure(ms <= 10_000, "the session failed after " + ms + " ms, want within 10 s");
            System.err.println("silent server: " + t.getMessage());
        }
    }

    void fifoMixed() throws Exception {
        String key = PREFIX + "fifo-mixed", addr = e("LC_ADDR"), manager = e("LC_MANAGER_ADDR");
        Lock held = open(addr, "java-fifo-holder").acquire(key);
        LinkedBlockingQueue<Object[]> grants = new LinkedBlockingQueue<>();
        Probe.SessionLock[] probes = new Probe.SessionLock[5];
        try {
            for (int i = 0; i < 5; i++) {
                int waiter = i;
                if (i % 2 == 0) {
                    open(addr, "java-fifo-" + i).acquireAsync(key)
                            .whenComplete((l, ex) -> grants.add(new Object[] {waiter, l, ex}));
                } else {
                    probes[i] = probe.sessionLock(addr, key, ex -> grants.add(new Object[] {waiter, null, ex}));
                }
                probe.waiters(manager, key, i + 1);
            }
            held.release();
            for (int want = 0; want < 5; want++) {
                Object[] g = grants.poll(LIMIT_S, TimeUnit.SECONDS);
                ensure(g != null, "waiter " + want + " not granted within " + LIMIT_S + " s");
                ensure(g[2] == null, "waiter " + g[0] + ": " + g[2]);
                ensure((int) g[0] == want, "waiter " + g[0] + " was granted the key when waiter " + want + " was due");
                if (g[1] != null) {
                    ((Lock) g[1]).release();
                } else {
                    probes[want].release();
                }
            }
        } finally {
            for (Probe.SessionLock p : probes) {
                if (p != null) {
                    p.stop();
                }
            }
        }
    }

    public static void main(String[] args) throws Exception {
        SessionConformance c = new SessionConformance(System.getenv());
        Map<String, Scenario> scenarios = new LinkedHashMap<>();
        scenarios.put("s-acquire-release", c::acquireRelease);
        scenarios.put("s-try-busy", c::tryBusy);
        scenarios.put("s-wait-bound", c::waitBound);
        scenarios.put("s-cancel", c::cancel);
        scenarios.put("s-stale-release", c::staleRelease);
        scenarios.put("s-lease-expiry", c::leaseExpiry);
        scenarios.put("s-kill-client", c::killClient);
        scenarios.put("s-resume", c::resume);
        scenarios.put("s-leader-stop", c::leaderStop);
        scenarios.put("s-leader-kill", c::leaderKill);
        scenarios.put("s-tls-token", c::tlsToken);
        scenarios.put("s-modes", c::modes);
        scenarios.put("s-note", c::note);
        scenarios.put("s-big-token", c::bigToken);
        scenarios.put("s-silent-server", c::silentServer);
        scenarios.put("s-fifo-mixed", c::fifoMixed);
        List<String> only = Arrays.asList(args);
        int failed = 0;
        for (Map.Entry<String, Scenario> sc : scenarios.entrySet()) {
            if (!only.isEmpty() && !only.contains(sc.getKey())) {
                continue;
            }
            long t0 = System.nanoTime();
            try {
                sc.getValue().run();
                System.out.println("ok " + sc.getKey());
            } catch (Throwable ex) {
                failed++;
                System.out.println("FAIL " + sc.getKey() + ": " + String.valueOf(ex.getMessage()).replace('\n', ' '));
                ex.printStackTrace();
            } finally {
                c.closeAll();
            }
            System.out.flush();
            System.err.printf("%s: %d ms%n", sc.getKey(), (System.nanoTime() - t0) / 1_000_000);
        }
        System.exit(failed == 0 ? 0 : 1);
    }
}
