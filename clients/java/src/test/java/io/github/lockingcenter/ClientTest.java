package io.github.lockingcenter;

import java.io.EOFException;
import java.io.IOException;
import java.net.SocketTimeoutException;
import java.nio.channels.ClosedByInterruptException;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicReference;

/** Behaviour of the client against a stand-in server: failures, timeouts, interruption. */
final class ClientTest {
    private ClientTest() {}

    /** Starts call on a daemon thread; the future holds what it threw, or null. */
    private static CompletableFuture<Throwable> inThread(Check.Body call) {
        CompletableFuture<Throwable> f = new CompletableFuture<>();
        Thread t = new Thread(() -> {
            try {
                call.run();
                f.complete(null);
            } catch (Throwable e) {
                f.complete(e);
            }
        });
        t.setDaemon(true);
        t.start();
        return f;
    }

    /** What call threw, or null; a call still running after 10 s fails the test. */
    private static Throwable within10s(Check.Body call) throws InterruptedException, ExecutionException {
        try {
            return inThread(call).get(10, TimeUnit.SECONDS);
        } catch (TimeoutException e) {
            throw new AssertionError("the call did not return within 10 s");
        }
    }

    private static boolean isReadTimeout(Throwable t) {
        return t instanceof SocketTimeoutException && t.getMessage().contains("no answer within 50 ms");
    }

    static void run(Check check) {
        check.test("a refused connection is a failure, not busy", () -> {
            LockingCenterClient c = new LockingCenterClient(FakeServer.deadAddress());
            Throwable t = Check.thrown(() -> c.lock("k"), "lock");
            Check.isTrue(t instanceof IOException && !(t instanceof LockingCenterException), "lock: " + t);
            t = Check.thrown(() -> c.tryLock("k"), "tryLock");
            Check.isTrue(t instanceof IOException, "tryLock: " + t);
        });

        check.test("answers map to results and exceptions", () -> {
            try (FakeServer s = new FakeServer(new byte[] {'-'})) {
                Throwable t = Check.thrown(() -> new LockingCenterClient(s.address()).lock("k"), "'-'");
                Check.isTrue(t instanceof RefusedException, "'-': " + t);
            }
            try (FakeServer s = new FakeServer(new byte[] {'#'})) {
                Check.isTrue(!new LockingCenterClient(s.address()).tryLock("k"), "'#' to tryLock");
                Throwable t = Check.thrown(() -> new LockingCenterClient(s.address()).lock("k"), "'#' to lock");
                Check.isTrue(t instanceof UnexpectedAnswerException, "'#' to lock: " + t);
            }
            try (FakeServer s = new FakeServer(new byte[0])) {
                Throwable t = Check.thrown(() -> new LockingCenterClient(s.address()).unlock("k"), "no answer");
                Check.isTrue(t instanceof EOFException, "no answer: " + t);
            }
        });

        check.test("a timed tryLock withdraws when the time passes", () -> {
            try (FakeServer s = new FakeServer(null)) {
                Check.isTrue(!new LockingCenterClient(s.address()).tryLock("k", Duration.ofMillis(200)), "granted");
                Check.isTrue(s.peerClosed.await(10, TimeUnit.SECONDS), "the server never saw the connection close");
            }
        });

        check.test("interrupting a parked lock withdraws it", () -> {
            try (FakeServer s = new FakeServer(null)) {
                LockingCenterClient c = new LockingCenterClient(s.address());
                AtomicReference<Throwable> thrown = new AtomicReference<>();
                Thread t = new Thread(() -> {
                    try {
                        c.lock("k");
                    } catch (Throwable e) {
                        thrown.set(e);
                    }
                });
                t.start();
                Check.isTrue(s.received.await(10, TimeUnit.SECONDS), "the request never arrived");
                t.interrupt();
                t.join(10_000);
                Check.isTrue(!t.isAlive(), "lock still blocked after interrupt");
                Check.isTrue(thrown.get() instanceof ClosedByInterruptException, "thrown: " + thrown.get());
                Check.isTrue(s.peerClosed.await(10, TimeUnit.SECONDS), "the server never saw the connection close");
            }
        });

        check.test("hold unlocks on close", () -> {
            try (FakeServer s = new FakeServer(new byte[] {'+'})) {
                LockingCenterClient c = LockingCenterClient.builder(s.address()).source("s").build();
                try (LockingCenterClient.Held h = c.hold(new byte[] {'k', 0})) {
                    Check.equal(s.requests.size(), 1, "requests while held");
                }
                Check.equal(Json.toHex(s.requests.get(0)), "01026b000173", "lock");
                Check.equal(Json.toHex(s.requests.get(1)), "02026b00", "unlock");
            }
        });

        check.test("calls that do not wait for a key give up after the read timeout", () -> {
            try (FakeServer s = new FakeServer(null)) {
                LockingCenterClient c = LockingCenterClient.builder(s.address()).readTimeout(Duration.ofMillis(50)).build();
                Map<String, Check.Body> calls = new LinkedHashMap<>();
                calls.put("tryLock", () -> c.tryLock("k"));
                calls.put("unlock", () -> c.unlock("k"));
                calls.put("resetByKey", () -> c.resetByKey("k"));
                calls.put("resetBySource", () -> c.resetBySource("s"));
                for (Map.Entry<String, Check.Body> call : calls.entrySet()) {
                    Throwable t = within10s(call.getValue());
                    Check.isTrue(isReadTimeout(t), call.getKey() + ": " + t);
                }
            }
        });

        check.test("the release of waitFor gives up after the read timeout", () -> {
            // The lock is granted at once; the unlock after it is never answered.
            try (FakeServer s = new FakeServer(action -> action == 1 ? new byte[] {'+'} : null, null)) {
                LockingCenterClient c = LockingCenterClient.builder(s.address()).readTimeout(Duration.ofMillis(50)).build();
                Throwable t = within10s(() -> c.waitFor("k"));
                Check.isTrue(isReadTimeout(t) && t.getMessage().startsWith("unlock"), "waitFor: " + t);
            }
        });

        check.test("a lock has no read timeout", () -> {
            CountDownLatch grant = new CountDownLatch(1);
            try (FakeServer s = new FakeServer(action -> new byte[] {'+'}, grant)) {
                LockingCenterClient c = LockingCenterClient.builder(s.address()).readTimeout(Duration.ofMillis(10)).build();
                CompletableFuture<Throwable> lock = inThread(() -> c.lock("k"));
                Check.isTrue(s.received.await(10, TimeUnit.SECONDS), "the request never arrived");
                try {
                    // Fifty read timeouts pass without an answer.
                    Throwable early = lock.get(500, TimeUnit.MILLISECONDS);
                    throw new AssertionError("lock returned before its grant: " + early);
                } catch (TimeoutException e) {
                    // still waiting, as it should
                }
                grant.countDown();
                Throwable t = lock.get(10, TimeUnit.SECONDS);
                Check.isTrue(t == null, "lock after its grant: " + t);
            }
        });

        check.test("bad addresses", () -> {
            for (String a : new String[] {"localhost", "localhost:", ":1", "host:port", "host:99999"}) {
                Throwable t = Check.thrown(() -> new LockingCenterClient(a), a);
                Check.isTrue(t instanceof IllegalArgumentException, a + ": " + t);
            }
        });
    }
}
