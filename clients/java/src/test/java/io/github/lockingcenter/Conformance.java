package io.github.lockingcenter;

import java.io.IOException;
import java.net.SocketTimeoutException;
import java.nio.channels.ClosedByInterruptException;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * Live scenarios of clients/conformance/run.sh for the Java client.
 *
 * <p>Reads LC_ADDR, LC_MANAGER_ADDR, LC_DEAD_ADDR, LC_SILENT_ADDR and
 * LC_PROBE; prints one line per scenario, "ok &lt;id&gt;" or "FAIL &lt;id&gt;: &lt;reason&gt;".
 * Exits 1 when a scenario failed, 2 when the environment is incomplete.
 */
public final class Conformance {
    /** Seconds a background call may take before the scenario fails. */
    private static final long LIMIT = 60;
    private static final String PREFIX = "java/";
    /** The read timeout of silent-server-times-out, and the bound each call must return well within. */
    private static final Duration SILENT_TIMEOUT = Duration.ofSeconds(1);
    private static final Duration SILENT_BOUND = SILENT_TIMEOUT.multipliedBy(10);

    private final String addr;
    private final String manager;
    private final String dead;
    private final String silent;
    private final String probe;

    private Conformance(String addr, String manager, String dead, String silent, String probe) {
        this.addr = addr;
        this.manager = manager;
        this.dead = dead;
        this.silent = silent;
        this.probe = probe;
    }

    interface Scenario {
        void run() throws Exception;
    }

    interface Call {
        void run() throws Exception;
    }

    private static final class Failure extends Exception {
        private static final long serialVersionUID = 1L;

        Failure(String message) {
            super(message);
        }
    }

    private static void ensure(boolean cond, String message) throws Failure {
        if (!cond) {
            throw new Failure(message);
        }
    }

    private LockingCenterClient client(String source) {
        return LockingCenterClient.builder(addr).source(source).build();
    }

    /** Runs the probe and returns its standard output; fails on a non-zero exit. */
    private String probe(String... args) throws Exception {
        List<String> cmd = new ArrayList<>();
        cmd.add(probe);
        cmd.addAll(List.of(args));
        Process p = new ProcessBuilder(cmd).redirectError(ProcessBuilder.Redirect.INHERIT).start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8).trim();
        int code = p.waitFor();
        ensure(code == 0, "probe " + String.join(" ", args) + ": exit " + code);
        return out;
    }

    /** Blocks until key has exactly n parked waiters (the probe gives up after 10 s). */
    private void waiters(String key, int n) throws Exception {
        probe("waiters", manager, key, Integer.toString(n));
    }

    private void expectHolder(byte[] key, String want) throws Exception {
        String got = probe("holder", manager, Json.toHex(key));
        ensure(got.equals(want), "holder of " + Json.toHex(key) + " is \"" + got + "\", want \"" + want + "\"");
    }

    private void expectHolder(String key, String want) throws Exception {
        expectHolder(key.getBytes(StandardCharsets.UTF_8), want);
    }

    /** Starts call on its own thread. */
    private static CompletableFuture<Void> background(Call call) {
        CompletableFuture<Void> f = new CompletableFuture<>();
        Thread t = new Thread(() -> {
            try {
                call.run();
                f.complete(null);
            } catch (Throwable e) {
                f.completeExceptionally(e);
            }
        });
        t.setDaemon(true);
        t.start();
        return f;
    }

    /** Waits for a background call: null when it succeeded, else what it threw. */
    private static Throwable outcome(Future<Void> f) throws Exception {
        try {
            f.get(LIMIT, TimeUnit.SECONDS);
            return null;
        } catch (ExecutionException e) {
            return e.getCause();
        } catch (TimeoutException e) {
            throw new Failure("background call still blocked after " + LIMIT + " s");
        }
    }

    void lockUnlock() throws Exception {
        String key = PREFIX + "lock-unlock";
        LockingCenterClient c = client("java-lock-unlock");
        c.lock(key);
        expectHolder(key, "java-lock-unlock");
        c.unlock(key);
        ensure(c.tryLock(key), "tryLock after unlock lost");
        c.unlock(key);
    }

    void tryLockBusy() throws Exception {
        String key = PREFIX + "trylock-busy";
        LockingCenterClient a = client("java-a");
        try (LockingCenterClient.Held held = a.hold(key)) {
            ensure(!client("java-b").tryLock(key), "tryLock of a held key won");
            expectHolder(key, "java-a");
        }
    }

    void fifoThree() throws Exception {
        String key = PREFIX + "fifo-three";
        LockingCenterClient holder = client("java-holder");
        List<Integer> turns = java.util.Collections.synchronizedList(new ArrayList<>());
        List<CompletableFuture<Void>> waiting = new ArrayList<>();
        try (LockingCenterClient.Held held = holder.hold(key)) {
            for (int i = 1; i <= 3; i++) {
                int turn = i;
                LockingCenterClient w = client("java-w" + i);
                waiting.add(background(() -> {
                    w.lock(key);
                    turns.add(turn);
                    w.unlock(key);
                }));
                waiters(key, i);
            }
        }
        for (int i = 0; i < waiting.size(); i++) {
            Throwable t = outcome(waiting.get(i));
            ensure(t == null, "waiter " + (i + 1) + ": " + t);
        }
        ensure(turns.equals(List.of(1, 2, 3)), "grant order " + turns + ", want [1, 2, 3]");
    }

    void waitHoldsNothing() throws Exception {
        String key = PREFIX + "wait-holds-nothing";
        LockingCenterClient c = client("java-wait");
        c.waitFor(key);
        expectHolder(key, "free");
        ensure(client("java-other").tryLock(key), "tryLock after waitFor lost");
        c.unlock(key);
    }

    void resetKey() throws Exception {
        String key = PREFIX + "reset-key";
        client("java-holder").lock(key);
        LockingCenterClient waiter = client("java-waiter");
        CompletableFuture<Void> w = background(() -> waiter.lock(key));
        waiters(key, 1);
        client("").resetByKey(key);
        Throwable t = outcome(w);
        ensure(t == null, "waiter after reset: " + t);
        expectHolder(key, "java-waiter");
        waiter.unlock(key);
    }

    void resetSourceWithdraws() throws Exception {
        String key = PREFIX + "reset-source";
        try (LockingCenterClient.Held held = client("java-s1").hold(key)) {
            LockingCenterClient waiter = client("java-s2");
            CompletableFuture<Void> w = background(() -> waiter.lock(key));
            waiters(key, 1);
            client("").resetBySource("java-s2");
            Throwable t = outcome(w);
            ensure(t instanceof RefusedException, "withdrawn waiter: " + t + ", want RefusedException");
            expectHolder(key, "java-s1");
        }
    }

    void keyLengths() throws Exception {
        String longKey = PREFIX + "key-127-";
        longKey += "k".repeat(127 - longKey.length());
        LockingCenterClient c = client("java-long");
        c.lock(longKey);
        expectHolder(longKey, "java-long");
        c.unlock(longKey);
        LockingCenterClient deadClient = new LockingCenterClient(dead);
        for (String key : new String[] {longKey + "k", ""}) {
            Map<String, Call> calls = new LinkedHashMap<>();
            calls.put("lock", () -> deadClient.lock(key));
            calls.put("tryLock", () -> deadClient.tryLock(key));
            for (Map.Entry<String, Call> call : calls.entrySet()) {
                try {
                    call.getValue().run();
                    throw new Failure(call.getKey() + " of a " + key.length() + "-byte key succeeded");
                } catch (IllegalArgumentException e) {
                    // refused before connecting, as it should be
                } catch (IOException e) {
                    throw new Failure(call.getKey() + " of a " + key.length() + "-byte key: " + e);
                }
            }
        }
    }

    void binaryKey() throws Exception {
        byte[] prefix = PREFIX.getBytes(StandardCharsets.UTF_8);
        byte[] key = java.util.Arrays.copyOf(prefix, prefix.length + 4);
        System.arraycopy(new byte[] {0x00, (byte) 0xff, (byte) 0x80, 'a'}, 0, key, prefix.length, 4);
        LockingCenterClient c = client("java-binary");
        c.lock(key);
        expectHolder(key, "java-binary");
        c.unlock(key);
        expectHolder(key, "free");
    }

    void refusedConnection() throws Exception {
        LockingCenterClient c = new LockingCenterClient(dead);
        String key = PREFIX + "refused";
        try {
            c.lock(key);
            throw new Failure("lock at a dead address succeeded");
        } catch (LockingCenterException e) {
            throw new Failure("lock at a dead address: " + e + ", want a connection failure");
        } catch (IOException e) {
            // a connection failure, as it should be
        }
        try {
            boolean won = c.tryLock(key);
            throw new Failure("tryLock at a dead address returned " + won);
        } catch (LockingCenterException e) {
            throw new Failure("tryLock at a dead address: " + e + ", want a connection failure");
        } catch (IOException e) {
            // a connection failure, as it should be
        }
    }

    void cancelWithdraws() throws Exception {
        String key = PREFIX + "cancel";
        LockingCenterClient b = client("java-b");
        CompletableFuture<Void> wb;
        try (LockingCenterClient.Held held = client("java-holder").hold(key)) {
            LockingCenterClient a = client("java-a");
            CompletableFuture<Throwable> doneA = new CompletableFuture<>();
            Thread ta = new Thread(() -> {
                try {
                    a.lock(key);
                    doneA.complete(null);
                } catch (Throwable e) {
                    doneA.complete(e);
                }
            });
            ta.setDaemon(true);
            ta.start();
            waiters(key, 1);
            ta.interrupt();
            Throwable t = doneA.get(LIMIT, TimeUnit.SECONDS);
            ensure(t instanceof ClosedByInterruptException, "interrupted waiter: " + t + ", want ClosedByInterruptException");
            waiters(key, 0);
            wb = background(() -> b.lock(key));
            waiters(key, 1);
        }
        Throwable t = outcome(wb);
        ensure(t == null, "waiter B: " + t);
        expectHolder(key, "java-b");
        b.unlock(key);
    }

    void silentServerTimesOut() throws Exception {
        LockingCenterClient c = LockingCenterClient.builder(silent).source("java-silent").readTimeout(SILENT_TIMEOUT).build();
        String key = PREFIX + "silent";
        Map<String, Call> calls = new LinkedHashMap<>();
        calls.put("tryLock", () -> ensure(c.tryLock(key), "tryLock reported busy"));
        calls.put("unlock", () -> c.unlock(key));
        calls.put("resetByKey", () -> c.resetByKey(key));
        calls.put("resetBySource", () -> c.resetBySource("java-silent"));
        for (Map.Entry<String, Call> call : calls.entrySet()) {
            String name = call.getKey();
            long start = System.nanoTime();
            Throwable t;
            try {
                background(call.getValue()).get(SILENT_BOUND.toMillis(), TimeUnit.MILLISECONDS);
                throw new Failure(name + " at a silent server succeeded");
            } catch (ExecutionException e) {
                t = e.getCause();
            } catch (TimeoutException e) {
                throw new Failure(name + " at a silent server did not return within " + SILENT_BOUND.toMillis() + " ms");
            }
            Duration took = Duration.ofNanos(System.nanoTime() - start);
            ensure(t instanceof SocketTimeoutException, name + " at a silent server: " + t + ", want SocketTimeoutException");
            ensure(took.compareTo(SILENT_BOUND) < 0, name + " at a silent server took " + took.toMillis() + " ms, want well under " + SILENT_BOUND.toMillis());
        }
    }

    public static void main(String[] args) {
        String[] env = new String[5];
        String[] names = {"LC_ADDR", "LC_MANAGER_ADDR", "LC_DEAD_ADDR", "LC_SILENT_ADDR", "LC_PROBE"};
        for (int i = 0; i < names.length; i++) {
            env[i] = System.getenv(names[i]);
            if (env[i] == null || env[i].isEmpty()) {
                System.err.println("conformance: " + names[i] + " must be set");
                System.exit(2);
            }
        }
        Conformance c = new Conformance(env[0], env[1], env[2], env[3], env[4]);
        Map<String, Scenario> scenarios = new LinkedHashMap<>();
        scenarios.put("lock-unlock", c::lockUnlock);
        scenarios.put("trylock-busy", c::tryLockBusy);
        scenarios.put("fifo-three", c::fifoThree);
        scenarios.put("wait-holds-nothing", c::waitHoldsNothing);
        scenarios.put("reset-key", c::resetKey);
        scenarios.put("reset-source-withdraws", c::resetSourceWithdraws);
        scenarios.put("key-127-ok-128-refused", c::keyLengths);
        scenarios.put("binary-key", c::binaryKey);
        scenarios.put("refused-connection", c::refusedConnection);
        scenarios.put("cancel-withdraws", c::cancelWithdraws);
        scenarios.put("silent-server-times-out", c::silentServerTimesOut);
        boolean failed = false;
        for (Map.Entry<String, Scenario> s : scenarios.entrySet()) {
            try {
                s.getValue().run();
                System.out.println("ok " + s.getKey());
            } catch (Exception e) {
                failed = true;
                String reason = e instanceof Failure ? e.getMessage() : e.toString();
                System.out.println("FAIL " + s.getKey() + ": " + reason.replace('\n', ' '));
            }
        }
        System.exit(failed ? 1 : 0);
    }
}
