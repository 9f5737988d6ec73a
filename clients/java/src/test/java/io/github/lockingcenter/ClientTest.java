package io.github.lockingcenter;

import java.io.EOFException;
import java.io.IOException;
import java.nio.channels.ClosedByInterruptException;
import java.time.Duration;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;

/** Behaviour of the client against a stand-in server: failures, timeouts, interruption. */
final class ClientTest {
    private ClientTest() {}

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

        check.test("bad addresses", () -> {
            for (String a : new String[] {"localhost", "localhost:", ":1", "host:port", "host:99999"}) {
                Throwable t = Check.thrown(() -> new LockingCenterClient(a), a);
                Check.isTrue(t instanceof IllegalArgumentException, a + ": " + t);
            }
        });
    }
}
