"""Live scenarios of clients/conformance/run.sh for the Python client.

Reads LC_ADDR, LC_MANAGER_ADDR, LC_DEAD_ADDR, LC_SILENT_ADDR and LC_PROBE;
prints one line
per scenario, "ok <id>" or "FAIL <id>: <reason>". Exits 1 when a scenario
failed, 2 when the environment is incomplete.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "src"))

from lockingcenter import (  # noqa: E402
    CancelledError,
    Client,
    InvalidKeyError,
    LockingCenterError,
    ReadTimeoutError,
    RefusedError,
)

LIMIT = 60.0  # seconds a background call may take before the scenario fails
PREFIX = "python/"


class ScenarioError(Exception):
    pass


class Env:
    def __init__(self) -> None:
        self.addr = os.environ["LC_ADDR"]
        self.manager = os.environ["LC_MANAGER_ADDR"]
        self.dead = os.environ["LC_DEAD_ADDR"]
        self.silent = os.environ["LC_SILENT_ADDR"]
        self.probe = os.environ["LC_PROBE"]

    def client(self, source: str = "") -> Client:
        return Client(self.addr, source=source)

    def waiters(self, key: str, n: int) -> None:
        """Block until key has exactly n parked waiters (the probe gives up
        after 10 s)."""
        p = subprocess.run([self.probe, "waiters", self.manager, key, str(n)], capture_output=True, text=True)
        if p.returncode != 0:
            raise ScenarioError(f"probe waiters {key!r} {n}: exit {p.returncode}: {p.stderr.strip()}")

    def expect_holder(self, key: str | bytes, want: str) -> None:
        raw = key.encode() if isinstance(key, str) else key
        p = subprocess.run([self.probe, "holder", self.manager, raw.hex()], capture_output=True, text=True)
        if p.returncode != 0:
            raise ScenarioError(f"probe holder {key!r}: exit {p.returncode}: {p.stderr.strip()}")
        if p.stdout.strip() != want:
            raise ScenarioError(f"holder of {key!r} is {p.stdout.strip()!r}, want {want!r}")


class Background:
    """Runs fn in a thread and keeps what it returned or raised."""

    def __init__(self, fn: Callable[[], object]) -> None:
        self.error: BaseException | None = None
        self._fn = fn
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._fn()
        except BaseException as e:  # noqa: BLE001 - handed to the scenario
            self.error = e

    def join(self, limit: float = LIMIT) -> BaseException | None:
        self._thread.join(limit)
        if self._thread.is_alive():
            raise ScenarioError(f"background call still blocked after {limit} s")
        return self.error


def lock_unlock(e: Env) -> None:
    key, c = PREFIX + "lock-unlock", e.client("python-lock-unlock")
    c.lock(key)
    e.expect_holder(key, "python-lock-unlock")
    c.unlock(key)
    if not c.try_lock(key):
        raise ScenarioError("try_lock after unlock lost")
    c.unlock(key)


def trylock_busy(e: Env) -> None:
    key, a, b = PREFIX + "trylock-busy", e.client("python-a"), e.client("python-b")
    a.lock(key)
    try:
        if b.try_lock(key):
            raise ScenarioError("try_lock of a held key won")
        e.expect_holder(key, "python-a")
    finally:
        a.unlock(key)


def fifo_three(e: Env) -> None:
    key, holder = PREFIX + "fifo-three", e.client("python-holder")
    holder.lock(key)
    turns: list[int] = []
    workers = []
    try:
        for i in (1, 2, 3):
            w = e.client(f"python-w{i}")

            def turn(w: Client = w, i: int = i) -> None:
                w.lock(key)
                turns.append(i)
                w.unlock(key)

            workers.append(Background(turn))
            e.waiters(key, i)
    finally:
        holder.unlock(key)
    for i, w in enumerate(workers, 1):
        if (err := w.join()) is not None:
            raise ScenarioError(f"waiter {i}: {err!r}")
    if turns != [1, 2, 3]:
        raise ScenarioError(f"grant order {turns}, want [1, 2, 3]")


def wait_holds_nothing(e: Env) -> None:
    key, c = PREFIX + "wait-holds-nothing", e.client("python-wait")
    c.wait(key)
    e.expect_holder(key, "free")
    if not e.client("python-other").try_lock(key):
        raise ScenarioError("try_lock after wait lost")
    c.unlock(key)


def reset_key(e: Env) -> None:
    key, holder, waiter = PREFIX + "reset-key", e.client("python-holder"), e.client("python-waiter")
    holder.lock(key)
    w = Background(lambda: waiter.lock(key))
    e.waiters(key, 1)
    e.client().reset_by_key(key)
    if (err := w.join()) is not None:
        raise ScenarioError(f"waiter after reset: {err!r}")
    e.expect_holder(key, "python-waiter")
    waiter.unlock(key)


def reset_source_withdraws(e: Env) -> None:
    key, holder, waiter = PREFIX + "reset-source", e.client("python-s1"), e.client("python-s2")
    holder.lock(key)
    try:
        w = Background(lambda: waiter.lock(key))
        e.waiters(key, 1)
        e.client().reset_by_source("python-s2")
        err = w.join()
        if not isinstance(err, RefusedError):
            raise ScenarioError(f"withdrawn waiter: {err!r}, want RefusedError")
        e.expect_holder(key, "python-s1")
    finally:
        holder.unlock(key)


def key_lengths(e: Env) -> None:
    long = PREFIX + "key-127-"
    long += "k" * (127 - len(long))
    c = e.client("python-long")
    c.lock(long)
    e.expect_holder(long, "python-long")
    c.unlock(long)
    dead = Client(e.dead)
    for key in (long + "k", ""):
        for call in (dead.lock, dead.try_lock):
            try:
                call(key)
            except InvalidKeyError:
                continue
            except LockingCenterError as err:
                raise ScenarioError(f"{call.__name__} of a {len(key)}-byte key: {err!r}, want InvalidKeyError")
            raise ScenarioError(f"{call.__name__} of a {len(key)}-byte key succeeded")


def binary_key(e: Env) -> None:
    key, c = PREFIX.encode() + b"\x00\xff\x80a", e.client("python-binary")
    c.lock(key)
    e.expect_holder(key, "python-binary")
    c.unlock(key)
    e.expect_holder(key, "free")


def refused_connection(e: Env) -> None:
    c = Client(e.dead)
    for call in (c.lock, c.try_lock):
        try:
            won = call(PREFIX + "refused")
        except InvalidKeyError as err:
            raise ScenarioError(f"{call.__name__}: {err!r}, want a connection failure")
        except LockingCenterError:
            continue
        raise ScenarioError(f"{call.__name__} at a dead address returned {won!r}, want a failure")


def cancel_withdraws(e: Env) -> None:
    key, holder = PREFIX + "cancel", e.client("python-holder")
    holder.lock(key)
    try:
        a = e.client("python-a")
        wa = Background(lambda: a.lock(key))
        e.waiters(key, 1)
        a.close()
        err = wa.join()
        if not isinstance(err, CancelledError):
            raise ScenarioError(f"cancelled waiter: {err!r}, want CancelledError")
        e.waiters(key, 0)
        b = e.client("python-b")
        wb = Background(lambda: b.lock(key))
        e.waiters(key, 1)
    finally:
        holder.unlock(key)
    if (err := wb.join()) is not None:
        raise ScenarioError(f"waiter B: {err!r}")
    e.expect_holder(key, "python-b")
    b.unlock(key)


SILENT_TIMEOUT = 1.0  # the read timeout of silent-server-times-out, seconds
SILENT_BOUND = 10 * SILENT_TIMEOUT  # each call must return well within this


def silent_server_times_out(e: Env) -> None:
    c = Client(e.silent, source="python-silent", read_timeout=SILENT_TIMEOUT)
    key = PREFIX + "silent"
    calls: list[tuple[str, Callable[[], object]]] = [
        ("try_lock", lambda: c.try_lock(key)),
        ("unlock", lambda: c.unlock(key)),
        ("reset_by_key", lambda: c.reset_by_key(key)),
        ("reset_by_source", lambda: c.reset_by_source("python-silent")),
    ]
    for name, call in calls:
        result: list[object] = []
        start = time.monotonic()
        err = Background(lambda call=call: result.append(call())).join(SILENT_BOUND)
        took = time.monotonic() - start
        if err is None:
            busy = " (busy)" if result == [False] else ""
            raise ScenarioError(f"{name} at a silent server returned {result[0]!r}{busy}, want ReadTimeoutError")
        if not isinstance(err, ReadTimeoutError):
            raise ScenarioError(f"{name} at a silent server: {err!r}, want ReadTimeoutError")
        if took >= SILENT_BOUND:
            raise ScenarioError(f"{name} at a silent server took {took:.1f} s, want well under {SILENT_BOUND} s")


SCENARIOS = [
    ("lock-unlock", lock_unlock),
    ("trylock-busy", trylock_busy),
    ("fifo-three", fifo_three),
    ("wait-holds-nothing", wait_holds_nothing),
    ("reset-key", reset_key),
    ("reset-source-withdraws", reset_source_withdraws),
    ("key-127-ok-128-refused", key_lengths),
    ("binary-key", binary_key),
    ("refused-connection", refused_connection),
    ("cancel-withdraws", cancel_withdraws),
    ("silent-server-times-out", silent_server_times_out),
]


def main() -> int:
    try:
        env = Env()
    except KeyError as e:
        print(f"conformance: {e.args[0]} must be set", file=sys.stderr)
        return 2
    code = 0
    for name, scenario in SCENARIOS:
        try:
            scenario(env)
        except Exception as e:  # noqa: BLE001 - every failure is reported
            print(f"FAIL {name}: {e!r}".replace("\n", " "), flush=True)
            code = 1
        else:
            print(f"ok {name}", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
