"""Session and AsyncSession against a scripted server (fakelcd): what a real
lcd does only in a failure, on cue."""

from __future__ import annotations

import asyncio
import threading
import time
import unittest

import lockingcenter as lc
from fakelcd import SECRET, FakeConn, FakeLcd, held_item, parked_item, until
from lockingcenter import Code, Frame, FrameType, LostReason, Tag
from lockingcenter._frames import u8, u64

from conformance import Background


def goodbye(c: FakeConn, to: int, code: int, leader: str | None = None) -> None:
    fields = [u8(Tag.CODE, code), (Tag.MESSAGE, b"from the fake")]
    if leader is not None:
        fields.append((Tag.LEADER, leader.encode()))
    c.send(FrameType.GOODBYE, to, fields)


def serve_forever(c: FakeConn) -> None:
    """Answer PINGs, CLOSEs and RELEASEs until the client leaves."""
    while True:
        f = c.read(30)
        if f.type in (FrameType.PING, FrameType.RELEASE):
            c.ok(f)
        elif f.type == FrameType.CLOSE:
            c.ok(f)
            return


class Resume:
    """The reconciliation after a resume: one connection that drops with
    requests in every state, and the WELCOME of the resume that lists what
    the server has."""

    def __init__(self) -> None:
        self.first: dict[str, object] = {}
        self.released: list[int] = []
        self.resent: object = None

    def script(self, c: FakeConn) -> None:
        if c.index == 0:
            c.welcome(c.expect(FrameType.HELLO))
            a = c.expect(FrameType.ACQUIRE)
            c.granted(a, 100)
            e = c.expect(FrameType.ACQUIRE)
            c.granted(e, 500)
            for name in ("B", "C", "D"):  # B parks, C is granted while away, D never arrives
                self.first[name] = c.expect(FrameType.ACQUIRE)
            self.first["A"], self.first["E"] = a, e
            c.reset()
            return
        r = c.expect(FrameType.RESUME)
        assert r.uint(Tag.SESSION) == 42 and r.get(Tag.SECRET) == SECRET, r
        p = c.expect(FrameType.PING)
        a, b, cc, d = (self.first[n] for n in "ABCD")
        c.welcome(r, extra=[
            u64(Tag.APPLIED, cc.id),  # type: ignore[attr-defined]
            held_item(b"A", 100, a.id),  # type: ignore[attr-defined]
            held_item(b"C", 300, cc.id, left_ms=5000),  # type: ignore[attr-defined]
            held_item(b"X", 999, 1),  # nobody here holds it: released
            parked_item(b"B", b.id),  # type: ignore[attr-defined]
        ])  # fmt: skip
        d2 = c.expect(FrameType.ACQUIRE)
        self.resent = d2
        assert (d2.id, d2.fields) == (d.id, d.fields), (d2, d)  # type: ignore[attr-defined]
        c.ok(p)  # every frame owed has been sent
        rel = c.expect(FrameType.RELEASE)
        self.released.append(rel.uint(Tag.TOKEN) or 0)
        c.ok(rel)
        c.granted(d2, 400)
        c.granted(b, 200)  # type: ignore[arg-type]
        serve_forever(c)


class Farewell:
    """A server that grants k (token 7), o (token 8) and l (token 5, with a
    lease of 300 ms, which ends on the client before the session does),
    then never answers again, and takes the farewell of the session the
    client counts expired: it keeps the farewell's frames, refuses its
    RELEASEs (passed over by the client) and answers its CLOSE."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.frames: list[Frame] = []

    def script(self, c: FakeConn) -> None:
        if c.index == 0:
            c.welcome(c.expect(FrameType.HELLO), ttl_ms=1000, keepalive_ms=333)
            c.granted(c.expect(FrameType.ACQUIRE), 7)
            c.granted(c.expect(FrameType.ACQUIRE), 8)
            c.granted(c.expect(FrameType.ACQUIRE), 5, left_ms=300)
            while True:
                c.read(10)  # never answers again: the RELEASE of l at its lease's end neither
        r = c.expect(FrameType.RESUME)
        f = c.read()
        if f.type == FrameType.PING:
            while True:
                c.read(10)  # a resume: never answered
        self.frames = [r, f]
        while f.type != FrameType.CLOSE:
            self.frames.append(f := c.read())
        c.welcome(r, ttl_ms=1000, keepalive_ms=333,
                  extra=[u64(Tag.APPLIED, 0), held_item(b"k", 7, 2), held_item(b"o", 8, 3),
                         held_item(b"l", 5, 4)])  # fmt: skip
        for rel in self.frames[1:-1]:
            c.send(FrameType.REFUSED, rel.id, [u8(Tag.CODE, Code.STALE_TOKEN)])
        c.ok(f)
        self.done.set()

    def check(self, t: unittest.TestCase) -> None:
        """The farewell is RESUME, a RELEASE with lapse of l (its RELEASE
        unanswered) and of k (not of the orphaned o), in the order of their
        tokens, and CLOSE, with ids one after another."""
        t.assertEqual([f.type for f in self.frames],
                      [FrameType.RESUME, FrameType.RELEASE, FrameType.RELEASE, FrameType.CLOSE])  # fmt: skip
        t.assertEqual([(f.get(Tag.KEY), f.uint(Tag.TOKEN), f.uint(Tag.LAPSE)) for f in self.frames[1:-1]],
                      [(b"l", 5, 1), (b"k", 7, 1)])  # fmt: skip
        t.assertEqual([f.id for f in self.frames], [self.frames[0].id + i for i in range(4)])


class ThreadSession(unittest.TestCase):
    def test_resume_reconciles(self) -> None:
        plan = Resume()
        with FakeLcd(plan.script) as fake, lc.Session(fake.address, read_timeout=5) as s:
            a, e = s.acquire("A"), s.acquire("E")
            got: dict[str, lc.Lock] = {}
            waits = []
            for name in "BCD":
                waits.append(Background(lambda name=name: got.__setitem__(name, s.acquire(name))))
                # Sent before the next (AsyncSessions.test_resume_reconciles).
                until(lambda k=name.encode(), n=name: n in got or any(r.key == k for r in list(s._core.inflight.values())))
            for w in waits:
                self.assertIsNone(w.join(10))
            fake.check()
            self.assertEqual({k: v.fencing_token for k, v in got.items()}, {"B": 200, "C": 300, "D": 400})
            self.assertTrue(a.held)
            self.assertEqual(a.fencing_token, 100)
            self.assertTrue(e.lost.is_set())
            self.assertIs(e.cause.reason, LostReason.WHILE_AWAY)  # type: ignore[union-attr]
            self.assertEqual(plan.released, [999])
            c = got["C"]
            self.assertIsNotNone(c.lease_deadline)
            self.assertLess(c.lease_deadline - time.monotonic(), 4.5)  # type: ignore[operator]
            self.assertEqual(s.address, fake.address)

    def test_keepalive_and_silence(self) -> None:
        times: dict[str, float] = {}

        def script(c: FakeConn) -> None:
            if c.index == 0:
                c.welcome(c.expect(FrameType.HELLO), ttl_ms=3000, keepalive_ms=300)
                times["open"] = time.monotonic()
                p = c.expect(FrameType.PING, 2)
                times["ping"] = time.monotonic()
                c.ok(p)
                times["heard"] = time.monotonic()
                c.expect(FrameType.PING, 2)  # not answered
                try:
                    c.read(5)
                except EOFError:
                    times["dropped"] = time.monotonic()
                return
            r = c.expect(FrameType.RESUME)
            p = c.expect(FrameType.PING)
            times["resumed"] = time.monotonic()
            c.welcome(r, ttl_ms=3000, keepalive_ms=300, extra=[u64(Tag.APPLIED, 0)])
            c.ok(p)
            serve_forever(c)

        with FakeLcd(script) as fake, lc.Session(fake.address) as s:
            self.assertEqual(s.keepalive, 0.3)
            until(lambda: "resumed" in times)
            until(lambda: s.address != "")
            fake.check()
        self.assertAlmostEqual(times["ping"] - times["open"], 0.3, delta=0.2)
        # keepalive 0.3 s plus its margin (at least 0.25 s) after the last frame heard
        self.assertAlmostEqual(times["dropped"] - times["heard"], 0.55, delta=0.25)

    def test_leader_followed(self) -> None:
        with FakeLcd(lambda c: (c.welcome(c.expect(FrameType.HELLO)), serve_forever(c))) as leader:

            def follower(c: FakeConn) -> None:
                goodbye(c, c.expect(FrameType.HELLO).id, Code.NOT_LEADER, leader.address)

            with FakeLcd(follower) as f, lc.Session(f.address) as s:
                self.assertEqual(s.address, leader.address)

    def test_not_leader_once_every_address_failed(self) -> None:
        def follower(c: FakeConn) -> None:
            goodbye(c, c.expect(FrameType.HELLO).id, Code.NOT_LEADER)

        with FakeLcd(follower) as f1, FakeLcd(follower) as f2:
            with self.assertRaises(lc.NotLeaderError) as cm:
                lc.Session([f1.address, f2.address]).open()
            self.assertEqual(cm.exception.code, Code.NOT_LEADER)
            self.assertEqual(cm.exception.server_message, "from the fake")
            self.assertEqual((f1.count, f2.count), (1, 1))

    def test_refusals_of_the_hello(self) -> None:
        cases = [(Code.UNAUTHENTICATED, lc.UnauthenticatedError, 0), (Code.RATE_LIMITED, lc.RateLimitedError, 1),
                 (Code.OVER_LIMIT, lc.OverLimitError, 1), (Code.PROTOCOL_ERROR, lc.ProtocolError, 0)]  # fmt: skip
        for code, cls, second in cases:
            with self.subTest(code.name):

                def refuse(c: FakeConn, code: int = code) -> None:
                    goodbye(c, c.expect(FrameType.HELLO).id, code)

                with FakeLcd(refuse) as f1, FakeLcd(refuse) as f2:
                    with self.assertRaises(cls):
                        lc.Session([f1.address, f2.address]).open()
                    until(lambda: f1.count == 1)
                    time.sleep(0.05)
                    self.assertEqual(f2.count, second, "a refusal any node gives is final")

    def test_v1_server(self) -> None:
        def v1(c: FakeConn) -> None:
            c.sock.recv(100)
            c.sock.sendall(b"-")
            c.close()

        with FakeLcd(v1) as f:
            with self.assertRaisesRegex(lc.RefusedError, "without sessions"):
                lc.Session(f.address).open()

    def test_client_counts_the_session_expired(self) -> None:
        plan = Farewell()
        with FakeLcd(plan.script) as fake:
            s = lc.Session(fake.address).open()
            lk, kept, leased = s.acquire("k"), s.acquire("o"), s.acquire("l", lease=0.3)
            kept.orphan()
            t0 = time.monotonic()
            self.assertTrue(leased.lost.wait(3))
            self.assertIs(leased.cause.reason, LostReason.LEASE_EXPIRED)  # type: ignore[union-attr]
            self.assertFalse(lk.lost.is_set())
            self.assertTrue(lk.lost.wait(3))
            took = time.monotonic() - t0
            # The TTL less a tenth, from the acquire's sending (0.9 s), and
            # what a loaded machine adds to a thread's wake-up.
            self.assertGreater(took, 0.8)
            self.assertLess(took, 1.4)
            self.assertIs(lk.cause.reason, LostReason.SESSION_EXPIRED)  # type: ignore[union-attr]
            self.assertIsInstance(s.error, lc.SessionExpiredError)
            with self.assertRaises(lc.SessionExpiredError):
                s.acquire("other")
            self.assertTrue(plan.done.wait(5), "the session was not closed on the server")
            s.close()
            fake.check()
        plan.check(self)

    def test_goodbye_session_expired(self) -> None:
        def script(c: FakeConn) -> None:
            c.welcome(c.expect(FrameType.HELLO))
            c.granted(c.expect(FrameType.ACQUIRE), 7)
            goodbye(c, 0, Code.SESSION_EXPIRED)
            c.close()

        with FakeLcd(script) as fake:
            s = lc.Session(fake.address).open()
            lk = s.acquire("k")
            self.assertTrue(lk.lost.wait(3))
            self.assertIs(lk.cause.reason, LostReason.SESSION_EXPIRED)  # type: ignore[union-attr]
            with self.assertRaises(lc.LockLostError):
                lk.release()
            self.assertEqual(fake.count, 1, "an expired session is not resumed")
            s.close()

    def test_protocol_error_of_the_server_drops_the_connection(self) -> None:
        def script(c: FakeConn) -> None:
            if c.index == 0:
                c.welcome(c.expect(FrameType.HELLO))
                c.granted(c.expect(FrameType.ACQUIRE), 7)
                c.sock.sendall(b"\x00\x00\x00\x03xyz")  # a length under 9
                c.read(5)
                return
            r = c.expect(FrameType.RESUME)
            p = c.expect(FrameType.PING)
            c.welcome(r, extra=[u64(Tag.APPLIED, 2), held_item(b"k", 7, 2)])
            c.ok(p)
            serve_forever(c)

        with FakeLcd(script) as fake, lc.Session(fake.address) as s:
            lk = s.acquire("k")
            until(lambda: fake.count == 2)
            until(lambda: s.address != "" and s._core.replay is None)
            self.assertTrue(lk.held)
            fake.check()

    def test_long_welcome_of_a_resume(self) -> None:
        """A WELCOME whose held items go on in MORE frames, and a grant that
        comes after the last."""
        n = 3000

        def script(c: FakeConn) -> None:
            if c.index == 0:
                c.welcome(c.expect(FrameType.HELLO))
                for i in range(n):
                    c.granted(c.expect(FrameType.ACQUIRE), 1000 + i)
                c.reset()
                return
            r = c.expect(FrameType.RESUME)
            p = c.expect(FrameType.PING)
            items = [held_item(b"k%d" % i, 1000 + i, 2 + i) for i in range(n)]
            chunks = [items[i : i + 500] for i in range(0, n, 500)]
            c.welcome(r, extra=[u64(Tag.APPLIED, 1 + n), *chunks[0], u8(Tag.MORE, 1)])
            for j, chunk in enumerate(chunks[1:], 1):
                more = [u8(Tag.MORE, 1)] if j < len(chunks) - 1 else []
                c.send(FrameType.MORE, r.id, [*chunk, *more])
            c.ok(p)
            serve_forever(c)

        with FakeLcd(script) as fake, lc.Session(fake.address) as s:
            locks = [s.acquire("k%d" % i) for i in range(n)]
            until(lambda: fake.count == 2)
            until(lambda: s.address != "" and s._core.replay is None)
            self.assertTrue(all(lk.held for lk in locks))
            fake.check()

    def test_lease_counted_from_the_grant(self) -> None:
        released = threading.Event()

        def script(c: FakeConn) -> None:
            c.welcome(c.expect(FrameType.HELLO))
            a = c.expect(FrameType.ACQUIRE)
            c.granted(a, 9, left_ms=500)
            rel = c.expect(FrameType.RELEASE, 3)
            assert rel.uint(Tag.TOKEN) == 9
            released.set()
            serve_forever(c)

        with FakeLcd(script) as fake, lc.Session(fake.address) as s:
            t0 = time.monotonic()
            lk = s.acquire("k", lease=0.5)
            t1 = time.monotonic()
            # From the grant's arrival less 0.1 s, or the acquire's sending
            # when later, less a tenth (at least 0.05 s).
            self.assertLessEqual(lk.lease_deadline, t1 + 0.5 - 0.05)  # type: ignore[operator]
            self.assertGreaterEqual(lk.lease_deadline, t0 + 0.5 - 0.05 - 0.1)  # type: ignore[operator]
            self.assertTrue(lk.lost.wait(2))
            self.assertLess(time.monotonic() - t0, 0.5)
            self.assertIs(lk.cause.reason, LostReason.LEASE_EXPIRED)  # type: ignore[union-attr]
            self.assertTrue(released.wait(2), "a lock given up was not released by token")
            fake.check()

    def test_calls_are_bounded(self) -> None:
        """A server that answers the HELLO and nothing else: every call that
        waits for no key fails within the read timeout."""

        def script(c: FakeConn) -> None:
            c.welcome(c.expect(FrameType.HELLO), ttl_ms=60000, keepalive_ms=20000)
            while True:
                c.read(30)

        with FakeLcd(script) as fake:
            s = lc.Session(fake.address, read_timeout=0.3).open()
            for name, call in [("try_lock", lambda: s.try_lock("k")), ("describe", lambda: s.describe("k")),
                               ("release", lambda: s.release("k", 5)), ("close", s.close)]:  # fmt: skip
                with self.subTest(name):
                    t0 = time.monotonic()
                    with self.assertRaises(lc.ReadTimeoutError):
                        call()
                    self.assertLess(time.monotonic() - t0, 1.0)


class AsyncSessions(unittest.TestCase):
    def test_resume_reconciles(self) -> None:
        plan = Resume()

        async def client(address: str) -> None:
            async with lc.AsyncSession(address, read_timeout=5) as s:
                a, e = await s.acquire("A"), await s.acquire("E")
                tasks = {}
                for name in "BCD":
                    # Each ACQUIRE goes out before the next is made, so that
                    # their ids follow the names. (Not a count of inflight:
                    # the server may drop the connection as soon as D comes,
                    # and the resume answer C before this loop looks again.)
                    tasks[name] = t = asyncio.create_task(s.acquire(name))
                    key = name.encode()
                    while not t.done() and all(r.key != key for r in s._core.inflight.values()):
                        await asyncio.sleep(0.001)
                got = {k: (await t).fencing_token for k, t in tasks.items()}
                self.assertEqual(got, {"B": 200, "C": 300, "D": 400})
                self.assertTrue(a.held)
                self.assertIs(e.cause.reason, LostReason.WHILE_AWAY)  # type: ignore[union-attr]
                await e.lost.wait()

        with FakeLcd(plan.script) as fake:
            asyncio.run(asyncio.wait_for(client(fake.address), 20))
            fake.check()
        self.assertEqual(plan.released, [999])

    def test_client_counts_the_session_expired(self) -> None:
        plan = Farewell()

        async def client(address: str) -> None:
            s = await lc.AsyncSession(address).open()
            lk, kept, leased = await s.acquire("k"), await s.acquire("o"), await s.acquire("l", lease=0.3)
            kept.orphan()
            await asyncio.wait_for(leased.lost.wait(), 3)
            self.assertIs(leased.cause.reason, LostReason.LEASE_EXPIRED)  # type: ignore[union-attr]
            self.assertFalse(lk.lost.is_set())
            await asyncio.wait_for(lk.lost.wait(), 3)
            self.assertIs(lk.cause.reason, LostReason.SESSION_EXPIRED)  # type: ignore[union-attr]
            while not plan.done.is_set():
                await asyncio.sleep(0.01)
            await s.close()

        with FakeLcd(plan.script) as fake:
            asyncio.run(asyncio.wait_for(client(fake.address), 10))
            fake.check()
        plan.check(self)

    def test_cancel_sends_cancel(self) -> None:
        cancels: list[int] = []

        def script(c: FakeConn) -> None:
            c.welcome(c.expect(FrameType.HELLO))
            a = c.expect(FrameType.ACQUIRE)
            cancel = c.expect(FrameType.CANCEL)
            cancels.append(cancel.uint(Tag.TARGET) or 0)
            c.send(FrameType.REFUSED, a.id, [u8(Tag.CODE, Code.CANCELLED)])
            c.ok(cancel)
            a2 = c.expect(FrameType.ACQUIRE)
            cancel2 = c.expect(FrameType.CANCEL)
            c.granted(a2, 77)  # the grant crossed the cancel: the client releases it
            c.ok(cancel2)
            rel = c.expect(FrameType.RELEASE)
            cancels.append(rel.uint(Tag.TOKEN) or 0)
            serve_forever(c)

        async def client(address: str) -> None:
            async with lc.AsyncSession(address) as s:
                with self.assertRaises(asyncio.TimeoutError):
                    await asyncio.wait_for(s.acquire("k"), 0.2)
                with self.assertRaises(lc.LockTimeoutError):
                    await s.acquire("k", timeout=0.2)
                while len(cancels) < 2:
                    await asyncio.sleep(0.01)

        with FakeLcd(script) as fake:
            asyncio.run(asyncio.wait_for(client(fake.address), 10))
            fake.check()
        self.assertEqual(cancels[1], 77)

    def test_keepalive_and_silence(self) -> None:
        resumed = threading.Event()

        def script(c: FakeConn) -> None:
            if c.index == 0:
                c.welcome(c.expect(FrameType.HELLO), ttl_ms=3000, keepalive_ms=300)
                c.ok(c.expect(FrameType.PING, 2))
                while True:
                    c.read(5)  # silent from now on
            r = c.expect(FrameType.RESUME)
            p = c.expect(FrameType.PING)
            c.welcome(r, ttl_ms=3000, keepalive_ms=300, extra=[u64(Tag.APPLIED, 0)])
            c.ok(p)
            resumed.set()
            serve_forever(c)

        async def client(address: str) -> None:
            async with lc.AsyncSession(address) as s:
                t0 = time.monotonic()
                while not resumed.is_set():
                    await asyncio.sleep(0.01)
                self.assertLess(time.monotonic() - t0, 2.0)
                while s.address == "":
                    await asyncio.sleep(0.01)

        with FakeLcd(script) as fake:
            asyncio.run(asyncio.wait_for(client(fake.address), 10))
            fake.check()


if __name__ == "__main__":
    unittest.main()
