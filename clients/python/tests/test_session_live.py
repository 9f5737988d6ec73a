"""Session and AsyncSession against real lcd processes (lcdproc): built from
the repository with go, or LC_LCD. Each class starts the servers it needs."""

from __future__ import annotations

import asyncio
import hashlib
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import lcdproc
import lockingcenter as lc
import lockingcenter._core as core_module
from fakelcd import until
from lockingcenter import LostReason

from conformance import Background

HERE = pathlib.Path(__file__).resolve().parent
PYTHON_ROOT = HERE.parent


def holder_tokens(manager: str, key: str) -> list[int]:
    return [h["token"] for h in lcdproc.holders(manager) if h["key"] == key.encode()]  # type: ignore[misc]


class Single(unittest.TestCase):
    lcd: lcdproc.Lcd

    @classmethod
    def setUpClass(cls) -> None:
        cls.lcd = lcdproc.Lcd({"SESSION_TTL_MIN": "1s"}).start()

    @classmethod
    def tearDownClass(cls) -> None:
        cls.lcd.stop()

    def session(self, **kw) -> lc.Session:  # type: ignore[no-untyped-def]
        s = lc.Session(self.lcd.address, **kw).open()
        self.addCleanup(s.close)
        return s

    def key(self) -> str:
        return "python/" + self.id().rsplit(".", 1)[-1]

    def queue(self, key: str) -> int:
        return self.session().describe(key).queue

    def test_timeout_zero_is_a_try(self) -> None:
        s, k = self.session(), self.key()
        a = s.acquire(k, timeout=0)  # free: taken
        other = self.session()
        with self.assertRaises(lc.LockTimeoutError):
            other.acquire(k, timeout=0)  # held: the timeout, at once
        self.assertEqual(self.queue(k), 0)
        a.release()

    def test_timeout_zero_is_a_try_asyncio(self) -> None:
        async def run() -> None:
            k = self.key()
            async with lc.AsyncSession(self.lcd.address) as s, lc.AsyncSession(self.lcd.address) as other:
                a = await s.acquire(k, timeout=0)
                with self.assertRaises(lc.LockTimeoutError):
                    await other.acquire(k, timeout=0)
                await a.release()

        asyncio.run(run())

    def test_acquire_release_and_tokens(self) -> None:
        s, k = self.session(name="python-t"), self.key()
        a = s.acquire(k)
        self.assertEqual(holder_tokens(self.lcd.manager, k), [a.fencing_token])
        a.release()
        a.release()
        self.assertFalse(a.held)
        self.assertIsNone(a.cause)
        b = s.acquire(k)
        self.assertGreater(b.fencing_token, a.fencing_token)
        # Tokens here start at the server's clock in nanoseconds: far above
        # 2^53, and exact.
        self.assertGreater(b.fencing_token, 2**53)
        self.assertEqual(s.describe(k).holders[0].token, b.fencing_token)
        s.release(k, b.fencing_token)
        s.release(k, b.fencing_token)  # by token, again: no error
        self.assertFalse(b.held)
        self.assertEqual(holder_tokens(self.lcd.manager, k), [])

    def test_try_lock_busy_is_none(self) -> None:
        k = self.key()
        with self.session().lock(k):
            self.assertIsNone(self.session().try_lock(k))
        lk = self.session().try_lock(k)
        self.assertIsNotNone(lk)

    def test_wait_bound(self) -> None:
        k = self.key()
        with self.session().lock(k):
            t0 = time.monotonic()
            with self.assertRaises(lc.LockTimeoutError) as cm:
                self.session().acquire(k, wait=0.3)
            self.assertGreaterEqual(time.monotonic() - t0, 0.29)
            self.assertEqual(cm.exception.code, lc.Code.TIMEOUT)
            self.assertEqual(self.queue(k), 0)

    def test_giving_up_leaves_the_queue(self) -> None:
        k = self.key()
        w = self.session()
        with self.session().lock(k):
            with self.assertRaises(lc.LockTimeoutError):
                w.acquire(k, timeout=0.2)
            self.assertEqual(w.describe(k).queue, 0)  # the CANCEL went first on the same connection
            stop = threading.Event()
            threading.Timer(0.2, stop.set).start()
            with self.assertRaises(lc.CancelledError):
                w.acquire(k, cancel=stop)
            self.assertEqual(w.describe(k).queue, 0)

            async def cancelled() -> None:
                async with lc.AsyncSession(self.lcd.address) as a:
                    task = asyncio.create_task(a.acquire(k))
                    while (await a.describe(k)).queue == 0:
                        await asyncio.sleep(0.01)
                    task.cancel()
                    with self.assertRaises(asyncio.CancelledError):
                        await task
                    self.assertEqual((await a.describe(k)).queue, 0)

            asyncio.run(cancelled())

    def test_close_ends_a_waiting_acquire_and_releases(self) -> None:
        k = self.key()
        h = self.session()
        held = h.acquire(k)
        s = lc.Session(self.lcd.address).open()
        mine = s.acquire(k + "/mine")
        w = Background(lambda: s.acquire(k))
        until(lambda: h.describe(k).queue == 1)
        s.close()
        self.assertIsInstance(w.join(5), lc.SessionClosedError)
        self.assertFalse(mine.held)
        self.assertFalse(mine.lost.is_set())  # released, not lost
        self.assertEqual(h.describe(k).queue, 0)
        self.assertEqual(holder_tokens(self.lcd.manager, k + "/mine"), [])
        with self.assertRaises(lc.SessionClosedError):
            s.acquire(k)
        held.release()

    def test_lease_renew_and_expiry(self) -> None:
        s, k = self.session(), self.key()
        lk = s.acquire(k, lease=1.0)
        first = lk.lease_deadline
        assert first is not None
        time.sleep(0.3)
        moved = lk.renew(2.0)
        assert moved is not None
        self.assertGreater(moved, first + 1.0)
        self.assertEqual(moved, lk.lease_deadline)
        self.assertLess(s.describe(k).holders[0].lease_left, 2.01)  # type: ignore[operator]
        self.assertTrue(lk.lost.wait(3))
        self.assertIs(lk.cause.reason, LostReason.LEASE_EXPIRED)  # type: ignore[union-attr]
        with self.assertRaises(lc.LockLostError):
            lk.release()
        with self.assertRaises(lc.LockLostError):
            lk.renew()
        until(lambda: not holder_tokens(self.lcd.manager, k), 1.0)  # released by token, or ended by the server

    def test_lock_lost_inside_a_with_block_raises_there(self) -> None:
        s, k = self.session(), self.key()
        with self.assertRaises(lc.LockLostError) as cm:
            with s.lock(k, lease=0.3) as lk:
                lk.lost.wait(2)
        self.assertIs(cm.exception.reason, LostReason.LEASE_EXPIRED)

    def test_orphan(self) -> None:
        s, k = self.session(), self.key()
        lk = s.acquire(k)
        lk.orphan()
        self.assertFalse(lk.held)
        self.assertFalse(lk.lost.is_set())
        lk.release()  # nothing: it was orphaned
        self.assertEqual(holder_tokens(self.lcd.manager, k), [lk.fencing_token])
        s.release(k, lk.fencing_token)  # by token, an orphaned lock
        self.assertEqual(holder_tokens(self.lcd.manager, k), [])

    def test_stale_release(self) -> None:
        k = self.key()
        h, o = self.session(), self.session()
        lk = h.acquire(k)
        for s, token in ((o, lk.fencing_token), (h, lk.fencing_token + 1)):
            with self.assertRaises(lc.StaleTokenError) as cm:
                s.release(k, token)
            self.assertIsInstance(cm.exception, lc.LockLostError)
            self.assertIsInstance(cm.exception, lc.RefusedError)
            self.assertEqual(cm.exception.code, lc.Code.STALE_TOKEN)
        self.assertTrue(lk.held)
        self.assertEqual(holder_tokens(self.lcd.manager, k), [lk.fencing_token])

    def test_modes(self) -> None:
        k = self.key()
        a, b, c = self.session(), self.session(), self.session()
        r1, r2 = a.acquire(k + "/s", shared=True), b.acquire(k + "/s", shared=True)
        self.assertEqual(len(a.describe(k + "/s").holders), 2)
        with self.assertRaises(lc.UpgradeError):
            a.acquire(k + "/s", reentrant=True)  # the same owner (this thread), exclusively
        r1.release()
        r2.release()
        p1, p2 = a.acquire(k + "/p", limit=2), b.acquire(k + "/p", limit=2)
        self.assertIsNone(c.try_lock(k + "/p", limit=2))
        with self.assertRaises(lc.LimitMismatchError) as cm:
            c.acquire(k + "/p", limit=3)
        self.assertEqual(cm.exception.limit, 2)
        p1.release()
        p2.release()
        x = a.acquire(k + "/r", reentrant=True, owner="job")
        y = a.acquire(k + "/r", reentrant=True, owner="job")
        self.assertEqual(x.fencing_token, y.fencing_token)
        self.assertEqual(a.describe(k + "/r").holders[0].count, 2)
        y.release()
        self.assertEqual(a.describe(k + "/r").holders[0].count, 1)
        with self.assertRaises(lc.DeadlockError):
            a.acquire(k + "/r", owner="job")  # the same owner, not reentrant: it would wait for itself
        x.release()
        self.assertEqual(a.describe(k + "/r").holders, ())

    def test_priority(self) -> None:
        k = self.key()
        h = self.session().acquire(k)
        order: list[int] = []

        def take(s: lc.Session, prio: int) -> None:
            with s.lock(k, priority=prio):
                order.append(prio)

        waits = []
        for prio in (1, 9, 5):
            waits.append(Background(lambda s=self.session(), prio=prio: take(s, prio)))
            until(lambda n=len(waits): self.queue(k) == n)
        h.release()
        for w in waits:
            self.assertIsNone(w.join(10))
        self.assertEqual(order, [9, 5, 1])

    def test_threads_share_a_session(self) -> None:
        """16 threads of one session on one key: each owner queues behind the
        others, and the key has one holder at a time."""
        s, k = self.session(), self.key()
        inside, most, count = [0], [0], [0]
        mu = threading.Lock()

        def work() -> None:
            for _ in range(20):
                with s.lock(k):
                    with mu:
                        inside[0] += 1
                        most[0] = max(most[0], inside[0])
                    time.sleep(0.0005)
                    with mu:
                        inside[0] -= 1
                        count[0] += 1

        ts = [threading.Thread(target=work) for _ in range(16)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(60)
        self.assertEqual((count[0], most[0]), (320, 1))

    def test_note(self) -> None:
        s, k = self.session(), self.key()
        note = "deploy 4.2 by ci-7, ünïcode"
        with s.lock(k, note=note) as lk:
            self.assertEqual(s.describe(k).holders[0].note, note)
            (h,) = [h for h in lcdproc.holders(self.lcd.manager) if h["key"] == k.encode()]
            self.assertEqual((h["token"], h["session"], h["note"]), (lk.fencing_token, s.session_id, note))

    def test_options_checked_before_sending(self) -> None:
        s = self.session()
        cases = [
            (lc.InvalidKeyError, dict(key="")),
            (lc.InvalidKeyError, dict(key="k" * 128)),
            (lc.InvalidOptionError, dict(key="k", note=b"\xff")),
            (lc.InvalidOptionError, dict(key="k", note="n" * 1025)),
            (lc.InvalidOptionError, dict(key="k", owner="o" * 128)),
            (lc.InvalidOptionError, dict(key="k", lock_delay=61)),
            (lc.InvalidOptionError, dict(key="k", shared=True, limit=2)),
            (lc.InvalidOptionError, dict(key="k", priority=2**31)),
            (lc.InvalidOptionError, dict(key="k", wait=0)),
            (lc.InvalidOptionError, dict(key="k", lease=float("nan"))),
            (lc.InvalidOptionError, dict(key="k", lease=float("inf"))),
            (lc.InvalidOptionError, dict(key="k", lease=2**32 / 1000)),  # over a u32 of milliseconds
            (lc.InvalidOptionError, dict(key="k", wait=float("nan"))),
            (lc.InvalidOptionError, dict(key="k", lock_delay=float("nan"))),
            (TypeError, dict(key="k", lease="30")),
        ]
        for cls, kw in cases:
            with self.subTest(kw=kw), self.assertRaises(cls):
                s.acquire(kw.pop("key"), **kw)
        for token, cls in (("12", TypeError), (0, lc.InvalidOptionError), (2**64, lc.InvalidOptionError)):
            with self.subTest(token=token), self.assertRaises(cls):
                s.release("k", token)  # type: ignore[arg-type]
        self.assertEqual(s._core.next_id, 1, "nothing was sent")

    def test_sigkill_holding_three_keys(self) -> None:
        """A process holding three keys (TTL 2 s, lock-delay 1 s) is killed:
        no key is free before the TTL less the last keepalive plus the
        lock-delay, every key is free within TTL plus lock-delay."""
        ttl, delay = 2.0, 1.0
        keys = [f"{self.key()}/{i}" for i in range(3)]
        child = subprocess.Popen(
            [sys.executable, str(HERE / "hold_keys.py"), self.lcd.address, str(ttl), str(delay), *keys],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            self.assertTrue(child.stdout.readline().startswith("held"))  # type: ignore[union-attr]
            keepalive = ttl / 3
            killed = time.monotonic()
            child.kill()
            child.wait()
            s = self.session()
            free: dict[str, float] = {}
            while len(free) < 3 and time.monotonic() < killed + ttl + delay + 2:
                for k in keys:
                    if k not in free and (lk := s.try_lock(k)) is not None:
                        free[k] = time.monotonic() - killed
                        lk.release()
                time.sleep(0.005)
            print(f"\nSIGKILL with TTL {ttl:g} s and lock-delay {delay:g} s: keys free after "
                  + ", ".join(f"{t:.3f} s" for t in free.values()), file=sys.stderr)  # fmt: skip
            self.assertEqual(len(free), 3)
            for t in free.values():
                self.assertGreaterEqual(t, ttl - keepalive + delay - 0.05)
                self.assertLessEqual(t, ttl + delay + 0.25)
        finally:
            child.kill()
            child.wait()
            child.stdout.close()  # type: ignore[union-attr]

    def test_thousand_tasks_ten_keys(self) -> None:
        """1,000 tasks contend for 10 keys on one AsyncSession: every task is
        granted, each key in the order its requests were sent (FIFO), and no
        thread is added for them."""
        keys = [f"{self.key()}/{i}" for i in range(10)]

        async def run() -> tuple[dict[str, list[int]], dict[str, list[int]], int, float]:
            async with lc.AsyncSession(self.lcd.address, name="python-1000") as s:
                sent: dict[str, list[int]] = {k: [] for k in keys}
                granted: dict[str, list[int]] = {k: [] for k in keys}
                threads_before = threading.active_count()
                most_threads = threads_before

                async def task(i: int) -> None:
                    nonlocal most_threads
                    k = keys[i % 10]
                    sent[k].append(i)  # the acquire's frame is queued in this order
                    async with s.lock(k):
                        granted[k].append(i)
                        most_threads = max(most_threads, threading.active_count())
                        await asyncio.sleep(0)

                t0 = time.monotonic()
                await asyncio.wait_for(asyncio.gather(*(task(i) for i in range(1000))), 120)
                return sent, granted, most_threads - threads_before, time.monotonic() - t0

        sent, granted, more_threads, took = asyncio.run(run())
        print(f"\n1,000 tasks on 10 keys, one AsyncSession: {took:.2f} s, {1000 / took:,.0f} grants/s",
              file=sys.stderr)  # fmt: skip
        self.assertEqual(sum(len(v) for v in granted.values()), 1000)
        for k in keys:
            self.assertEqual(granted[k], sent[k], f"{k} not granted in the order asked")
        self.assertEqual(more_threads, 0)

    def test_resume_through_a_cut(self) -> None:
        proxy = lcdproc.Proxy(self.lcd.address)
        self.addCleanup(proxy.close)
        ka, kb = self.key() + "/a", self.key() + "/b"
        s = lc.Session(proxy.address, ttl=5).open()
        self.addCleanup(s.close)
        a = s.acquire(ka)
        other = self.session()
        b = other.acquire(kb)
        got: list[lc.Lock] = []
        w = Background(lambda: got.append(s.acquire(kb)))
        until(lambda: other.describe(kb).queue == 1)
        proxy.cut()
        b.release()  # granted while the connection is down
        self.assertIsNone(w.join(10))
        self.assertEqual(holder_tokens(self.lcd.manager, ka), [a.fencing_token])
        self.assertEqual(holder_tokens(self.lcd.manager, kb), [got[0].fencing_token])
        self.assertTrue(a.held)

    def test_farewell_keeps_lock_delay(self) -> None:
        # The client's clock jumps past the session's TTL while the server's
        # does not: the client counts the session expired while the server
        # keeps it, and the farewell then reaches the server.
        offset = [0.0]
        real = core_module.now
        core_module.now = lambda: real() + offset[0]
        self.addCleanup(setattr, core_module, "now", real)
        proxy = lcdproc.Proxy(self.lcd.address)
        self.addCleanup(proxy.close)
        delayed, plain, leased = (self.key() + "/" + k for k in ("delayed", "plain", "leased"))
        s = lc.Session(proxy.address, ttl=10).open()
        self.addCleanup(s.close)
        lk = s.acquire(delayed, lock_delay=30)
        s.acquire(plain)
        short = s.acquire(leased, lease=5, lock_delay=30)
        # Its lease ends on the client while the server is out of reach (and
        # not on the server, whose clock has not moved): its RELEASE with
        # lapse goes unanswered, and then with the farewell.
        proxy.blocked = True
        proxy.cut()
        offset[0] = 5.0
        s._wake()
        self.assertTrue(short.lost.wait(5))
        self.assertIs(short.cause.reason, LostReason.LEASE_EXPIRED)  # type: ignore[union-attr]
        self.assertTrue(lk.held)
        offset[0] = 20.0
        s._wake()
        self.assertTrue(lk.lost.wait(5))
        self.assertIs(lk.cause.reason, LostReason.SESSION_EXPIRED)  # type: ignore[union-attr]
        proxy.blocked = False
        until(lambda: s.session_id not in lcdproc.sessions(self.lcd.manager))
        offset[0] = 0.0
        other = self.session()
        self.assertIsNone(other.try_lock(delayed), "a key in its lock-delay after the farewell")
        self.assertIsNone(other.try_lock(leased), "a key whose lease ended on the client, after the farewell")
        other.try_lock(plain).release()  # type: ignore[union-attr]

    def test_silent_server(self) -> None:
        import socket

        with socket.create_server(("127.0.0.1", 0)) as ls:
            addr = "127.0.0.1:%d" % ls.getsockname()[1]
            for ttl, bound in ((None, 1.0), (1.5, 0.55 + 0.25)):
                t0 = time.monotonic()
                with self.assertRaises(TimeoutError):
                    lc.Session(addr, ttl=ttl, read_timeout=1.0).open()
                self.assertLess(time.monotonic() - t0, bound + 0.5)

    def test_readme_example(self) -> None:
        p = subprocess.run([sys.executable, str(PYTHON_ROOT / "examples" / "session_example.py"), self.lcd.address],
                           capture_output=True, text=True, timeout=60)  # fmt: skip
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("reports/daily is busy", p.stdout)
        # The README shows that file.
        readme = (PYTHON_ROOT / "README.md").read_text()
        shown = readme.split("## Sessions", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
        self.assertIn(shown, (PYTHON_ROOT / "examples" / "session_example.py").read_text())


class BigTokens(unittest.TestCase):
    def test_tokens_above_2_63(self) -> None:
        wal = os.path.join(lcdproc.WORK, f"big-{time.monotonic_ns()}.wal")
        lcdproc.wal_with_token(wal, 2**64 - 1000)
        with lcdproc.Lcd({"DATA_PATH": wal}) as lcd:
            for cls in (lc.Session, lc.AsyncSession):
                with self.subTest(cls.__name__):
                    if cls is lc.Session:
                        with lc.Session(lcd.address) as s, s.lock("python/big") as lk:
                            token = lk.fencing_token
                            self.assertEqual(s.describe("python/big").holders[0].token, token)
                            self.assertEqual(holder_tokens(lcd.manager, "python/big"), [token])
                    else:

                        async def run() -> int:
                            async with lc.AsyncSession(lcd.address) as s:
                                async with s.lock("python/big") as lk:
                                    self.assertEqual(holder_tokens(lcd.manager, "python/big"), [lk.fencing_token])
                                    return lk.fencing_token

                        token = asyncio.run(run())
                    self.assertGreater(token, 2**64 - 1000)
                    self.assertLess(token, 2**64)


def openssl(*args: str, cwd: str) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@unittest.skipIf(shutil.which("openssl") is None, "no openssl to make certificates")
class Security(unittest.TestCase):
    """TLS with a CA and a client certificate, tokens, and each refusal as
    its own error."""

    token = "python-test-token-0123456789abcdef"

    @classmethod
    def setUpClass(cls) -> None:
        d = cls.dir = tempfile.mkdtemp(dir=lcdproc.WORK)
        openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
                "-subj", "/CN=test CA", cwd=d)  # fmt: skip
        for name, ext in (("server", "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"),
                          ("client", "extendedKeyUsage=clientAuth\n")):  # fmt: skip
            pathlib.Path(d, f"{name}.ext").write_text(ext)
            openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj",
                    f"/CN={name}", cwd=d)  # fmt: skip
            openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                    "-out", f"{name}.crt", "-days", "2", "-extfile", f"{name}.ext", cwd=d)  # fmt: skip
        digest = hashlib.sha256(cls.token.encode()).hexdigest()
        pathlib.Path(d, "tokens").write_text(f"python client sha256:{digest} python/\n")
        cls.lcd = lcdproc.Lcd({
            "TLS_CERT_FILE": f"{d}/server.crt", "TLS_KEY_FILE": f"{d}/server.key", "TLS_CLIENT_CA_FILE": f"{d}/ca.crt",
            "AUTH_TOKENS_FILE": f"{d}/tokens",
        }).start()  # fmt: skip

    @classmethod
    def tearDownClass(cls) -> None:
        cls.lcd.stop()

    def env(self, **extra: str) -> dict[str, str]:
        d = self.dir
        return {"LC_CA_FILE": f"{d}/ca.crt", "LC_CERT_FILE": f"{d}/client.crt", "LC_KEY_FILE": f"{d}/client.key",
                "LC_TOKEN": self.token, **extra}  # fmt: skip

    def test_mutual_tls_and_token_from_the_environment(self) -> None:
        opts = lc.env_options(self.env())
        self.assertEqual(opts["credential"], self.token)
        with lc.Session(self.lcd.address, server_hostname="localhost", **opts) as s:
            with s.lock("python/tls") as lk:
                self.assertGreater(lk.fencing_token, 0)
            with self.assertRaises(lc.ForbiddenError) as cm:
                s.acquire("billing/x")
            self.assertEqual(cm.exception.code, lc.Code.FORBIDDEN)
            self.assertIn("billing/x", cm.exception.server_message)

        async def run() -> None:
            async with lc.AsyncSession(self.lcd.address, server_hostname="localhost", **opts) as a:
                async with a.lock("python/tls-async"):
                    pass

        asyncio.run(run())

    def test_unauthenticated(self) -> None:
        for credential in (None, "not-the-token-0123456789"):
            with self.subTest(credential=credential):
                opts = lc.env_options(self.env(LC_TOKEN=credential or ""))
                with self.assertRaises(lc.UnauthenticatedError) as cm:
                    lc.Session(self.lcd.address, server_hostname="localhost", **opts).open()
                self.assertEqual(cm.exception.code, lc.Code.UNAUTHENTICATED)

    def test_no_client_certificate(self) -> None:
        with self.assertRaises(lc.CommunicationError):
            lc.Session(self.lcd.address, server_hostname="localhost", credential=self.token,
                       ssl=lc.tls_context(f"{self.dir}/ca.crt")).open()  # fmt: skip


class Limits(unittest.TestCase):
    def test_rate_limited_and_over_limit(self) -> None:
        with lcdproc.Lcd({"RATE_PER_SOURCE": "5", "RATE_BURST": "5", "MAX_HELD_PER_SOURCE": "2"}) as lcd:
            with lc.Session(lcd.address) as s:
                a, b = s.acquire("python/a"), s.acquire("python/b")
                with self.assertRaises(lc.OverLimitError) as over:
                    s.acquire("python/c")
                self.assertEqual(over.exception.code, lc.Code.OVER_LIMIT)
                b.release()  # below the cap again: a try may become a lock, and counts
                with self.assertRaises(lc.RateLimitedError) as rate:
                    for _ in range(20):
                        self.assertIsNone(s.try_lock("python/a", owner="another"))  # busy: holds nothing more
                self.assertEqual(rate.exception.code, lc.Code.RATE_LIMITED)
                self.assertTrue(rate.exception.server_message)
                self.assertTrue(a.held)
            # A HELLO over the rate: GOODBYE rate_limited, its own error too.
            with self.assertRaises(lc.RateLimitedError):
                for _ in range(20):
                    lc.Session(lcd.address).open().close()


class Cluster(unittest.TestCase):
    def test_leader_followed_and_killed(self) -> None:
        nodes = lcdproc.cluster()
        try:
            until(lambda: any(lcdproc.is_leader(n.manager) for n in nodes), 20)
            addrs = [n.address for n in nodes]
            with lc.Session(addrs, ttl=5) as s, lc.Session(list(reversed(addrs)), ttl=5) as o:
                (leader,) = [n for n in nodes if lcdproc.is_leader(n.manager)]
                self.assertEqual(s.address, leader.address)
                held = s.acquire("python/held")
                other = o.acquire("python/parked")
                got: list[lc.Lock] = []
                w = Background(lambda: got.append(s.acquire("python/parked")))
                until(lambda: o.describe("python/parked").queue == 1)
                leader.signal(signal.SIGKILL)
                other.release()
                self.assertIsNone(w.join(20))
                self.assertTrue(held.held)
                (new,) = [n for n in nodes if n is not leader and lcdproc.is_leader(n.manager)]
                self.assertEqual(s.address, new.address)
                self.assertEqual(holder_tokens(new.manager, "python/held"), [held.fencing_token])
                self.assertEqual(holder_tokens(new.manager, "python/parked"), [got[0].fencing_token])
        finally:
            for n in nodes:
                n.stop()


if __name__ == "__main__":
    unittest.main()
