"""Session scenarios of clients/conformance/sessions.sh for the Python
client (clients/conformance/SESSIONS.md).

    python3 session_conformance.py [ID...]

Runs every scenario, or those named, in SESSIONS.md's order, and prints one
line per scenario, "ok <id>" or "FAIL <id>: <reason>"; chatter goes to
standard error. Each scenario reads only the variables it needs (LC_ADDR,
LC_MANAGER_ADDR, LC_PROBE, ...), so that one can be run alone against
servers started by hand. Exits 1 when a scenario failed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "src"))

from conformance import Background, ScenarioError  # noqa: E402
from lockingcenter import (  # noqa: E402
    AsyncSession,
    CancelledError,
    ForbiddenError,
    Lock,
    LockTimeoutError,
    LostReason,
    Session,
    StaleTokenError,
    UnauthenticatedError,
    tls_context,
)

RUN = uuid.uuid4().hex[:6]  # keys of one run differ from a run before against the same servers
PROBE_LIMIT = 20.0  # seconds a probe command may take


def env(name: str) -> str:
    v = os.environ.get(name)
    if not v:
        raise ScenarioError(f"{name} is not set")
    return v


def key(name: str) -> str:
    return f"python/{name}/{RUN}"


def log(msg: str) -> None:
    print(f"  {msg}", file=sys.stderr, flush=True)


def probe(*args: str, check: bool = True) -> str:
    p = subprocess.run([env("LC_PROBE"), *args], capture_output=True, text=True, timeout=PROBE_LIMIT)
    if check and p.returncode != 0:
        raise ScenarioError(f"probe {' '.join(args)}: exit {p.returncode}: {p.stderr.strip()}")
    return p.stdout


def waiters(manager: str, k: str, n: int) -> None:
    probe("waiters", manager, k, str(n))


def holders(manager: str, k: str) -> list[tuple[int, int, str]]:
    """(token, session, note) of every holder of k."""
    out = []
    for line in probe("holders", manager, k).splitlines():
        token, session, *note = line.split(" ", 2)
        out.append((int(token), int(session), note[0] if note else ""))
    return out


def expect_held(manager: str, k: str, token: int) -> None:
    got = [h[0] for h in holders(manager, k)]
    if got != [token]:
        raise ScenarioError(f"holders of {k}: {got}, want [{token}]")


def single() -> tuple[str, str]:
    return env("LC_ADDR"), env("LC_MANAGER_ADDR")


@contextlib.contextmanager
def sessions(*specs: tuple[str, dict]) -> Iterator[list[Session]]:
    opened: list[Session] = []
    try:
        for address, kw in specs:
            opened.append(Session(address, **kw).open())
        yield opened
    finally:
        for s in opened:
            with contextlib.suppress(Exception):
                s.close()


def s_acquire_release() -> None:
    addr, _ = single()
    k = key("acquire-release")
    with sessions((addr, {"name": "python-ar"})) as (s,):
        a = s.acquire(k)
        a.release()
        b = s.acquire(k)
        if not b.fencing_token > a.fencing_token:
            raise ScenarioError(f"second token {b.fencing_token} not above the first {a.fencing_token}")
        b.release()
        b.release()  # again: no error
        s.release(k, b.fencing_token)  # by token, released here: no error either


def s_try_busy() -> None:
    addr, _ = single()
    k = key("try-busy")
    with sessions((addr, {"name": "python-holder"}), (addr, {"name": "python-try"})) as (h, t):
        with h.lock(k):
            got = t.try_lock(k)
            if got is not None:
                raise ScenarioError(f"try_lock of a held key gave {got!r}, want None")


def s_wait_bound() -> None:
    addr, manager = single()
    k = key("wait-bound")
    with sessions((addr, {"name": "python-holder"}), (addr, {"name": "python-waiter"})) as (h, w):
        with h.lock(k):
            start = time.monotonic()
            try:
                w.acquire(k, wait=0.5)
            except LockTimeoutError as e:
                if e.code != 2:
                    raise ScenarioError(f"timeout without the server's code: {e!r}") from None
            else:
                raise ScenarioError("acquire with wait=0.5 of a held key was granted")
            took = time.monotonic() - start
            if not 0.45 <= took < 3:
                raise ScenarioError(f"the wait bound of 0.5 s took {took:.2f} s")
            waiters(manager, k, 0)


def s_cancel() -> None:
    addr, manager = single()
    k = key("cancel")

    async def cancel_task() -> None:
        async with AsyncSession(addr, name="python-cancel") as a:
            task = asyncio.create_task(a.acquire(k))
            await asyncio.to_thread(waiters, manager, k, 1)
            task.cancel()
            start = time.monotonic()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await asyncio.to_thread(waiters, manager, k, 0)
            if time.monotonic() - start > 1.0:
                raise ScenarioError(f"the queue emptied {time.monotonic() - start:.2f} s after the cancel, want 1 s")

    with sessions((addr, {"name": "python-holder"}), (addr, {"name": "python-b"})) as (h, b):
        held = h.acquire(k)
        asyncio.run(cancel_task())
        # A thread's own cancellation: its Event.
        stop = threading.Event()
        err: list[BaseException] = []

        def wait_for_it() -> None:
            try:
                b.acquire(k, cancel=stop)
            except CancelledError as e:
                err.append(e)

        t = threading.Thread(target=wait_for_it)
        t.start()
        waiters(manager, k, 1)
        stop.set()
        start = time.monotonic()
        t.join(5)
        waiters(manager, k, 0)
        if not err or time.monotonic() - start > 1.0:
            raise ScenarioError(f"cancel by event: {err!r} after {time.monotonic() - start:.2f} s")
        got: list[Lock] = []
        wb = Background(lambda: got.append(b.acquire(k)))
        waiters(manager, k, 1)
        held.release()
        if (e := wb.join(10)) is not None:
            raise ScenarioError(f"the next waiter: {e!r}")
        got[0].release()


def s_stale_release() -> None:
    addr, manager = single()
    k = key("stale")
    with sessions((addr, {"name": "python-holder"}), (addr, {"name": "python-other"})) as (h, o):
        lk = h.acquire(k)
        for who, s, token in (("another session", o, lk.fencing_token), ("a wrong token", h, lk.fencing_token + 1)):
            try:
                s.release(k, token)
            except StaleTokenError as e:
                if e.reason is not LostReason.STALE_TOKEN:
                    raise ScenarioError(f"stale release by {who}: reason {e.reason}") from None
            else:
                raise ScenarioError(f"release by {who} was not refused")
        expect_held(manager, k, lk.fencing_token)
        lk.release()


def s_lease_expiry() -> None:
    addr, manager = single()
    k = key("lease")
    with sessions((addr, {"name": "python-lease"}), (addr, {"name": "python-after"})) as (s, o):
        start = time.monotonic()
        lk = s.acquire(k, lease=0.5, lock_delay=2)
        if not lk.lost.wait(2):
            raise ScenarioError("a 500 ms lease not reported lost within 2 s")
        lost = time.monotonic()
        log(f"lease lost after {lost - start:.3f} s: {lk.cause}")
        if lk.cause is None or lk.cause.reason is not LostReason.LEASE_EXPIRED:
            raise ScenarioError(f"cause {lk.cause!r}, want lease expired")
        # What the session sends after the loss comes after its release (with
        # lapse) of the lock: the key is in its lock-delay of 2 s.
        s.describe(k)
        if (early := o.try_lock(k)) is not None:
            early.release()
            raise ScenarioError("a try right after the loss was granted: the lock-delay was skipped")
        got = o.acquire(k, timeout=max(0.1, lost + 5 - time.monotonic()))
        got.release()


def s_kill_client() -> None:
    addr, manager = single()
    keys = [key(f"kill-{i}") for i in range(3)]
    hold = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tests", "hold_keys.py")
    child = subprocess.Popen([sys.executable, hold, addr, "2", "1", *keys], stdout=subprocess.PIPE, text=True)
    try:
        line = child.stdout.readline() if child.stdout else ""
        if not line.startswith("held"):
            raise ScenarioError(f"the child said {line!r}")
        killed = time.monotonic()
        child.send_signal(signal.SIGKILL)
        child.wait()
        with sessions((addr, {"name": "python-after-kill"})) as (s,):
            time.sleep(max(0.0, killed + 1.0 - time.monotonic()))
            for k in keys:
                if not holders(manager, k):
                    raise ScenarioError(f"{k} free 1 s after the kill, before its TTL and lock-delay")
            free: dict[str, float] = {}
            while len(free) < len(keys) and time.monotonic() < killed + 5.0:
                for k in keys:
                    if k not in free and (lk := s.try_lock(k)) is not None:
                        free[k] = time.monotonic() - killed
                        lk.release()
                time.sleep(0.01)
            log("free after the kill: " + ", ".join(f"{t:.3f} s" for t in free.values()))
            if len(free) < len(keys):
                raise ScenarioError(f"{len(keys) - len(free)} keys still held 5 s after the kill")
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        if child.stdout:
            child.stdout.close()


def s_resume() -> None:
    _, manager = single()
    proxy, ctl = env("LC_PROXY_ADDR"), env("LC_PROXY_CTL")
    ka, kb = key("resume-a"), key("resume-b")
    with sessions((proxy, {"name": "python-resume", "ttl": 5}), (single()[0], {"name": "python-b"})) as (s, o):
        a = s.acquire(ka)
        b_held = o.acquire(kb)
        got: list[Lock] = []
        wb = Background(lambda: got.append(s.acquire(kb)))
        waiters(manager, kb, 1)
        probe("cut", ctl)
        b_held.release()
        if (e := wb.join(10)) is not None:
            raise ScenarioError(f"the parked acquire after the cut: {e!r}")
        expect_held(manager, ka, a.fencing_token)
        expect_held(manager, kb, got[0].fencing_token)
        if not a.held:
            raise ScenarioError(f"lock A lost over the cut: {a.cause!r}")
        a.release()
        got[0].release()


def cluster() -> tuple[list[str], list[str]]:
    return env("LC_CLUSTER").split(","), env("LC_CLUSTER_MANAGER").split(",")


def leader_manager(managers: list[str]) -> str:
    return managers[int(probe("leader", ",".join(managers)).strip())]


def s_leader_kill() -> None:
    addrs, managers = cluster()
    k1, k2 = key("leader-kill-1"), key("leader-kill-2")
    with sessions((addrs, {"name": "python-lk", "ttl": 5}), (addrs, {"name": "python-lk-2", "ttl": 5})) as (s, o):
        held = s.acquire(k1)
        other = o.acquire(k2)
        got: list[Lock] = []
        wb = Background(lambda: got.append(s.acquire(k2)))
        waiters(leader_manager(managers), k2, 1)
        killed = int(probe("signal-leader", "KILL").strip())
        log(f"killed node {killed}")
        live = [m for i, m in enumerate(managers) if i != killed]
        expect_held(leader_manager(live), k1, held.fencing_token)
        other.release()
        if (e := wb.join(15)) is not None:
            raise ScenarioError(f"the parked acquire after the failover: {e!r}")
        expect_held(leader_manager(live), k2, got[0].fencing_token)
        if not held.held:
            raise ScenarioError(f"the held lock was lost: {held.cause!r}")


def s_leader_stop() -> None:
    addrs, managers = cluster()
    k = key("leader-stop")
    with sessions((addrs, {"name": "python-ls", "ttl": 3})) as (s,):
        lk = s.acquire(k)
        stopped = int(probe("signal-leader", "STOP").strip())
        log(f"stopped node {stopped}")
        try:
            time.sleep(6)
        finally:
            probe("signal-leader", "CONT")
        if s.error is not None:
            raise ScenarioError(f"the session ended: {s.error!r}")
        if not lk.held:
            raise ScenarioError(f"the lock was lost: {lk.cause!r}")
        live = [m for i, m in enumerate(managers) if i != stopped]
        expect_held(leader_manager(live), k, lk.fencing_token)
        log(f"session on {s.address}")
        lk.release()


def s_tls_token() -> None:
    addr, ca, token = env("LC_TLS_ADDR"), env("LC_CA_FILE"), env("LC_TOKEN")
    ctx = tls_context(ca)
    tls = {"ssl": ctx, "server_hostname": "localhost"}
    with sessions((addr, {"name": "python-tls", "credential": token, **tls})) as (s,):
        with s.lock(key("tls")):
            pass
        try:
            s.acquire("outside/python")
        except ForbiddenError:
            pass
        else:
            raise ScenarioError("a key outside python/ was granted")
    try:
        Session(addr, credential=token + "-wrong", **tls).open().close()
    except UnauthenticatedError:
        pass
    else:
        raise ScenarioError("a wrong token opened a session")


def s_modes() -> None:
    addr, manager = single()
    ks, kp, kr, kq = key("shared"), key("pool"), key("reentrant"), key("priority")
    with sessions(*[(addr, {"name": f"python-m{i}"}) for i in range(3)]) as (a, b, c):
        r1, r2 = a.acquire(ks, shared=True), b.acquire(ks, shared=True)
        if len(holders(manager, ks)) != 2:
            raise ScenarioError(f"shared: holders {holders(manager, ks)}")
        r1.release()
        r2.release()
        p1, p2 = a.acquire(kp, limit=2), b.acquire(kp, limit=2)
        if (p3 := c.try_lock(kp, limit=2)) is not None:
            raise ScenarioError(f"a third try of a semaphore of 2 gave {p3!r}")
        p1.release()
        p2.release()
        x = a.acquire(kr, reentrant=True, owner="job")
        y = a.acquire(kr, reentrant=True, owner="job")
        if x.fencing_token != y.fencing_token:
            raise ScenarioError(f"reentrant tokens {x.fencing_token} and {y.fencing_token}")
        y.release()
        expect_held(manager, kr, x.fencing_token)
        x.release()
        h = a.acquire(kq)
        order: list[str] = []

        def take(s: Session, name: str, prio: int) -> None:
            with s.lock(kq, priority=prio):
                order.append(name)

        low = Background(lambda: take(b, "low", 1))
        waiters(manager, kq, 1)
        high = Background(lambda: take(c, "high", 5))
        waiters(manager, kq, 2)
        h.release()
        for w in (low, high):
            if (e := w.join(10)) is not None:
                raise ScenarioError(f"priority waiter: {e!r}")
        if order != ["high", "low"]:
            raise ScenarioError(f"grant order {order}, want the higher priority first")


def s_note() -> None:
    addr, manager = single()
    k, note = key("note"), "nightly build 42 on ci-7, ünïcode"
    with sessions((addr, {"name": "python-note"})) as (s,):
        with s.lock(k, note=note) as lk:
            got = holders(manager, k)
            if got != [(lk.fencing_token, s.session_id, note)]:
                raise ScenarioError(f"holders {got}, want the note {note!r}")


def s_big_token() -> None:
    addr = env("LC_BIG_ADDR")
    k = key("big")
    with sessions((addr, {"name": "python-big"})) as (s,):
        with s.lock(k) as lk:
            if lk.fencing_token <= 2**63:
                raise ScenarioError(f"token {lk.fencing_token} is not above 2^63")
            info = s.describe(k)
            if [h.token for h in info.holders] != [lk.fencing_token]:
                raise ScenarioError(f"describe shows {info.holders}")
            # The big-token lcd's management port is LC_BIG_MANAGER; without
            # it, lcd's default, the mutex port + 1.
            host, port = addr.rsplit(":", 1)
            manager = os.environ.get("LC_BIG_MANAGER") or f"{host}:{int(port) + 1}"
            try:
                socket.create_connection((manager.rsplit(":", 1)[0], int(manager.rsplit(":", 1)[1])), 2).close()
            except OSError:
                log(f"no management port at {manager}: the token checked by DESCRIBE only")
            else:
                expect_held(manager, k, lk.fencing_token)
            log(f"token {lk.fencing_token} (2^63 + {lk.fencing_token - 2**63})")


def s_silent_server() -> None:
    addr = env("LC_SILENT_ADDR")
    start = time.monotonic()
    try:
        Session(addr, name="python-silent", read_timeout=3).open().close()
    except TimeoutError:
        pass
    else:
        raise ScenarioError("a session opened at a silent server")
    took = time.monotonic() - start
    if took > 10:
        raise ScenarioError(f"the timeout took {took:.1f} s")


def s_fifo_mixed() -> None:
    addr, manager = single()
    k = key("fifo-mixed")
    with sessions(*[(addr, {"name": f"python-f{i}"}) for i in range(4)]) as (h, *mine):
        held = h.acquire(k)
        tokens: dict[int, int] = {}
        threads: list[Background] = []
        probes: list[tuple[int, subprocess.Popen[str]]] = []
        try:
            for i in range(5):
                if i % 2 == 0:
                    s = mine[i // 2]

                    def take(s: Session = s, i: int = i) -> None:
                        with s.lock(k) as lk:
                            tokens[i] = lk.fencing_token

                    threads.append(Background(take))
                else:
                    p = subprocess.Popen([env("LC_PROBE"), "session-lock", addr, k],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # fmt: skip
                    probes.append((i, p))
                waiters(manager, k, i + 1)
            held.release()
            for i, p in probes:
                line = p.stdout.readline() if p.stdout else ""
                if not line.startswith("granted "):
                    raise ScenarioError(f"probe session-lock said {line!r}")
                tokens[i] = int(line.split()[1])
                if p.stdin:
                    p.stdin.close()
                p.wait(10)
            for t in threads:
                if (e := t.join(10)) is not None:
                    raise ScenarioError(f"a Python waiter: {e!r}")
        finally:
            for _, p in probes:
                if p.poll() is None:
                    p.kill()
        order = sorted(tokens, key=tokens.__getitem__)
        if order != list(range(5)):
            raise ScenarioError(f"granted in the order {order}, want [0, 1, 2, 3, 4]")


SCENARIOS: list[tuple[str, Callable[[], None]]] = [
    ("s-acquire-release", s_acquire_release),
    ("s-try-busy", s_try_busy),
    ("s-wait-bound", s_wait_bound),
    ("s-cancel", s_cancel),
    ("s-stale-release", s_stale_release),
    ("s-lease-expiry", s_lease_expiry),
    ("s-kill-client", s_kill_client),
    ("s-resume", s_resume),
    ("s-leader-stop", s_leader_stop),
    ("s-leader-kill", s_leader_kill),
    ("s-tls-token", s_tls_token),
    ("s-modes", s_modes),
    ("s-note", s_note),
    ("s-big-token", s_big_token),
    ("s-silent-server", s_silent_server),
    ("s-fifo-mixed", s_fifo_mixed),
]


def main(args: list[str]) -> int:
    known = dict(SCENARIOS)
    if unknown := [a for a in args if a not in known]:
        print(f"session_conformance: unknown scenario {unknown} (want: {' '.join(known)})", file=sys.stderr)
        return 2
    code = 0
    for name, scenario in SCENARIOS:
        if args and name not in args:
            continue
        print(f"== {name}", file=sys.stderr, flush=True)
        start = time.monotonic()
        try:
            scenario()
        except Exception as e:  # noqa: BLE001 - every failure is reported
            print(f"FAIL {name}: {e!r}".replace("\n", " "), flush=True)
            code = 1
        else:
            print(f"ok {name}", flush=True)
        log(f"{time.monotonic() - start:.2f} s")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
