"""AsyncSession: the session protocol for asyncio. One connection (a
Protocol, no reader task) and one task for keepalives and reconnects; any
number of tasks share it, none of them gets a thread."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from ._base import LockOptions, SessionBase
from ._client import BytesLike, _check_key, _split_address
from ._core import BUSY, END, WAIT, AcquireOptions, Core, HandleBase, KeyInfo, Request, now
from ._errors import (
    CommunicationError,
    InvalidOptionError,
    LockingCenterError,
    LockTimeoutError,
    ProtocolError,
    ReadTimeoutError,
)
from ._frames import Frame, FrameDecoder

if TYPE_CHECKING:
    from typing_extensions import Unpack  # for type checkers only
from ._session import close_outcome, first_answer_error, handshake_limit

_JOIN = 5.0
_TIMEOUTS = (TimeoutError, asyncio.TimeoutError)  # one class from Python 3.11


class _GaveUp(Exception):
    """The caller's own bound of an acquire ran out."""


class _Conn(asyncio.Protocol):
    """One connection of an AsyncSession. Until it is attached it keeps the
    frames that come (the handshake's answer) and sets ``arrived``; then it
    hands them to the session as they arrive."""

    def __init__(self, session: AsyncSession) -> None:
        self.session = session
        self.dec = FrameDecoder()
        self.transport: asyncio.Transport | None = None
        self.frames: list[Frame] = []
        self.arrived = asyncio.Event()
        self.attached = False
        self.gone = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            frames = self.dec.feed(data)
        except ProtocolError:
            self.abort()
            return
        if self.attached:
            self.session._on_frames(self, frames)
        elif frames:
            self.frames += frames
            self.arrived.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self.gone = True
        self.arrived.set()
        if self.attached:
            self.session._core.detach(self)

    def write(self, data: bytes) -> None:
        if self.transport is not None and not self.gone:
            self.transport.write(data)

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    async def more(self, timeout: float) -> list[Frame]:
        """The frames that came since the last call, waiting for some at most
        timeout seconds; none once the connection is gone."""
        if not self.frames and not self.gone:
            self.arrived.clear()
            with contextlib.suppress(*_TIMEOUTS):
                await asyncio.wait_for(self.arrived.wait(), max(timeout, 0))
        frames, self.frames = self.frames, []
        return frames


class AsyncLock(HandleBase):
    """A key held by an AsyncSession: as Lock, with coroutines. ``lost`` is
    an asyncio.Event. Use it in ``async with``. It belongs to the session's
    event loop."""

    __slots__ = ("_session",)

    def __init__(self, session: AsyncSession, key: bytes, token: int) -> None:
        super().__init__(key, token)
        self._session = session

    @property
    def lost(self) -> asyncio.Event:
        """Set once the lock is lost (not when it is released or orphaned)."""
        return self._lost_event(asyncio.Event)  # type: ignore[no-any-return]

    async def release(self) -> None:
        """As Lock.release."""
        await self._session._call(lambda core, w: core.release(self, w), f"release {self.key!r}")

    async def renew(self, lease: float | None = None) -> float | None:
        """As Lock.renew."""
        return await self._session._call(lambda core, w: core.renew(self, lease, w), f"renew {self.key!r}")  # type: ignore[no-any-return]

    def orphan(self) -> None:
        """As Lock.orphan."""
        self._session._core.orphan(self)

    async def __aenter__(self) -> AsyncLock:
        return self

    async def __aexit__(self, exc_type: object, exc: object, tb: object) -> None:
        try:
            await self.release()
        except LockingCenterError:
            if exc_type is None:
                raise


class AsyncSession(SessionBase):
    """A session of the session protocol for asyncio: Session's options and
    methods, as coroutines (``open``, ``close``, ``acquire``, ``try_lock``,
    ``release``, ``describe``; ``lock`` is an async context manager).
    Cancelling a task that waits in acquire (``asyncio.wait_for``,
    ``asyncio.timeout``, ``task.cancel()``) takes its request out of the
    server's queue. ``owner`` defaults to the calling task, so that tasks
    sharing the session queue behind each other. Use it from one event
    loop."""

    def _setup(self) -> None:
        self._closing: asyncio.Future[Any] | None = None
        self._loop_task: asyncio.Task[None] | None = None
        self._wakeup: asyncio.Event | None = None
        self._stop: asyncio.Event | None = None
        self._flush_due = False

    def _new_lock(self, key: bytes, token: int) -> AsyncLock:
        return AsyncLock(self, key, token)

    def _wake(self) -> None:
        if self._wakeup is not None:
            self._wakeup.set()

    def _default_owner(self) -> str:
        task = asyncio.current_task()
        return f"task-{id(task):x}" if task is not None else "task"

    # --- opening and closing ---

    async def open(self) -> AsyncSession:
        """As Session.open."""
        if not self._to_open():
            return self
        self._wakeup, self._stop = asyncio.Event(), asyncio.Event()
        core = self._core
        hello, bound = core.hello(), core.handshake_bound()
        err: LockingCenterError | None = None
        for _ in range(core.open_attempts()):
            addr, sent_at = core.target(), now()
            try:
                conn, welcome = await self._handshake(addr, hello, bound)
            except LockingCenterError as e:
                err = e
                if core.open_failed(addr, e):
                    continue
                break
            try:
                core.welcome(welcome, sent_at)
            except ProtocolError:
                conn.abort()
                raise
            core.attach(conn, addr)
            self._state = "open"
            self._attach_frames(conn)
            self._loop_task = asyncio.get_running_loop().create_task(self._run())
            return self
        assert err is not None
        raise err

    async def __aenter__(self) -> AsyncSession:
        return await self.open()

    async def __aexit__(self, exc_type: object, exc: object, tb: object) -> None:
        try:
            await self.close()
        except LockingCenterError:
            if exc_type is None:
                raise

    async def close(self) -> None:
        """As Session.close."""
        if self._state == "closed":
            return
        was_open, self._state = self._state == "open", "closed"
        core = self._core
        err: LockingCenterError | None = None
        if was_open and core.error is None:
            fut = self._closing = asyncio.get_running_loop().create_future()
            core.close(fut)
            self._flush()
            try:
                await asyncio.wait_for(asyncio.shield(fut), self.read_timeout)
            except _TIMEOUTS:
                err = ReadTimeoutError(f"close session {core.session_id}: no answer within {self.read_timeout} s")
            except LockingCenterError as e:
                err = e
        err = close_outcome(err, core)
        conn = core.conn
        core.detach(conn)
        if conn is not None:
            conn.abort()
        if self._stop is not None:
            self._stop.set()
        task = self._loop_task
        if task is not None and task is not asyncio.current_task():
            with contextlib.suppress(*_TIMEOUTS, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(task), _JOIN)
        if err is not None:
            raise err

    # --- locks ---

    async def acquire(
        self, key: BytesLike, *, timeout: float | None = None, wait: float | None = None, **options: Unpack[LockOptions]
    ) -> AsyncLock:
        """As Session.acquire; cancelling the task gives the wait up too."""
        if wait is not None and wait <= 0:
            raise InvalidOptionError("wait must be above 0 seconds; try_lock tries once")
        if timeout is not None and timeout <= 0:
            # No time to wait: a try, and a held key is the timeout.
            got = await self.try_lock(key, **options)
            if got is None:
                raise LockTimeoutError(f"acquire {key!r}: the key is held, and a timeout of {timeout} s waits for nothing")
            return got
        return await self._acquire(self._options(key, wait, options), timeout, LockTimeoutError)  # type: ignore[no-any-return]

    async def try_lock(self, key: BytesLike, **options: Unpack[LockOptions]) -> AsyncLock | None:
        """As Session.try_lock."""
        got = await self._acquire(self._options(key, 0, options), self.read_timeout, ReadTimeoutError)
        return None if got is BUSY else got  # type: ignore[no-any-return]

    @contextlib.asynccontextmanager
    async def lock(self, key: BytesLike, **options: Any) -> AsyncIterator[AsyncLock]:
        """``async with session.lock("k") as lk:``, as Session.lock."""
        lk = await self.acquire(key, **options)
        async with lk:
            yield lk

    async def release(self, key: BytesLike, token: int) -> None:
        """As Session.release."""
        k = _check_key(key)
        await self._call(lambda core, w: core.release_token(k, token, w), f"release {k!r}")

    async def describe(self, key: BytesLike) -> KeyInfo:
        """As Session.describe."""
        k = _check_key(key)
        return await self._call(lambda core, w: core.describe(k, w), f"describe {k!r}")  # type: ignore[no-any-return]

    # --- calls ---

    def _bound(self, fut: asyncio.Future[Any], timeout: float | None, exc: Callable[[], BaseException]) -> Any:
        """Fail fut with exc() after timeout seconds, unless it is done."""
        if timeout is None:
            return None

        def due() -> None:
            if not fut.done():
                fut.set_exception(exc())

        return asyncio.get_running_loop().call_later(max(timeout, 0), due)

    async def _acquire(self, opts: AcquireOptions, timeout: float | None, timeout_error: type) -> Any:
        self._check_open()
        fut = asyncio.get_running_loop().create_future()
        r = self._core.acquire(opts, fut)
        self._flush_soon()
        timer = self._bound(fut, timeout, _GaveUp)
        try:
            return await fut
        except _GaveUp:
            self._give_up(r, fut)
            raise timeout_error(f"acquire {opts.key!r}: no grant within {timeout} s") from None
        except asyncio.CancelledError:
            self._give_up(r, fut)
            raise
        finally:
            if timer is not None:
                timer.cancel()

    def _give_up(self, r: Request, fut: asyncio.Future[Any]) -> None:
        """As Session._give_up."""
        core = self._core
        if fut.done() and not fut.cancelled() and fut.exception() is None:
            got = fut.result()
            if isinstance(got, HandleBase) and got.held:
                core.release(got, None)
        else:
            core.abandon(r)
        self._flush_soon()

    async def _call(self, make: Callable[[Core, Any], Any], what: str) -> Any:
        """As Session._call."""
        self._check_open()
        fut = asyncio.get_running_loop().create_future()
        if make(self._core, fut) is None:
            return None
        self._flush_soon()

        def late() -> BaseException:
            return ReadTimeoutError(f"{what}: no answer within {self.read_timeout} s; it goes out again after a reconnect")

        timer = self._bound(fut, self.read_timeout, late)
        try:
            return await fut
        finally:
            if timer is not None:
                timer.cancel()

    # --- the connection ---

    def _flush_soon(self) -> None:
        """Write what is queued at the end of this turn of the loop, so that
        the frames of many tasks leave in one write."""
        if not self._flush_due:
            self._flush_due = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_due = False
        core = self._core
        if core.out and core.conn is not None:
            out, core.out = core.out, bytearray()
            core.conn.write(bytes(out))

    async def _handshake(self, addr: str, payload: bytes, bound: float | None) -> tuple[_Conn, Frame]:
        """As Session._handshake; the frames after the WELCOME stay in the
        connection until it is attached."""
        limit = handshake_limit(self.read_timeout, bound)
        what = f"session at {addr}"
        host, port = _split_address(addr)
        loop = asyncio.get_running_loop()
        conn = _Conn(self)
        deadline = None if limit is None else now() + limit

        def left() -> float | None:
            return None if deadline is None else max(deadline - now(), 0)

        ct = left()
        if self.connect_timeout is not None:
            ct = self.connect_timeout if ct is None else min(ct, self.connect_timeout)
        hostname = (self._server_hostname or host) if self._ssl is not None else None
        try:
            await asyncio.wait_for(loop.create_connection(lambda: conn, host, port, ssl=self._ssl,
                                                          server_hostname=hostname), ct)  # fmt: skip
        except _TIMEOUTS as e:
            raise ReadTimeoutError(f"{what}: no connection within {ct} s") from e
        except OSError as e:
            raise CommunicationError(f"{what}: {e}") from e
        try:
            conn.write(payload)
            await asyncio.wait_for(conn.arrived.wait(), left())
            err = first_answer_error(conn.frames, conn.dec.pending, what)
            if err is not None:
                raise err
        except _TIMEOUTS as e:
            conn.abort()
            raise ReadTimeoutError(f"{what}: no answer within {limit} s") from e
        except BaseException:
            conn.abort()
            raise
        return conn, conn.frames.pop(0)

    def _attach_frames(self, conn: _Conn) -> None:
        """Hand the connection's frames to the session from now on, those
        already come first."""
        conn.attached = True
        frames, conn.frames = conn.frames, []
        if conn.gone:
            self._core.detach(conn)
        elif frames:
            self._on_frames(conn, frames)

    def _on_frames(self, conn: _Conn, frames: list[Frame]) -> None:
        core = self._core
        if core.conn is not conn:
            conn.abort()
            return
        core.heard = now()
        for f in frames:
            if not core.handle(f):
                conn.abort()
                break
        if core.error is not None:
            conn.abort()
        if core.out:
            self._flush_soon()

    @staticmethod
    async def _pause(event: asyncio.Event, seconds: float) -> bool:
        """Wait until event is set (True) or seconds have passed (False)."""
        if not event.is_set():
            with contextlib.suppress(*_TIMEOUTS):
                await asyncio.wait_for(event.wait(), max(seconds, 0))
        return event.is_set()

    async def _run(self) -> None:
        """As Session._run."""
        core = self._core
        assert self._wakeup is not None and self._stop is not None
        while not self._stop.is_set():
            self._wakeup.clear()
            drop = core.tick()
            step, delay = core.next_step(self._closing is not None and self._closing.done())
            if drop is not None:
                drop.abort()
            self._flush()
            if step == END:
                break
            if step == WAIT:
                await self._pause(self._wakeup, delay)
            elif not await self._pause(self._stop, delay):
                await self._resume()
        conn = core.conn
        core.detach(conn)
        if conn is not None:
            conn.abort()
        if core.farewell:
            await self._farewell()

    async def _resume(self) -> None:
        """As Session._resume."""
        core = self._core
        payload, sync_id, addr, bound, sent_at = core.start_resume()
        try:
            conn, welcome = await self._handshake(addr, payload, bound)
        except LockingCenterError as e:
            core.resume_failed(addr, e)
            return
        try:
            if core.error is not None or (self._stop is not None and self._stop.is_set()):
                raise ProtocolError("the session ended meanwhile")
            core.attach_resumed(conn, addr, welcome, sent_at, sync_id)
        except ProtocolError:
            conn.abort()
            return
        self._attach_frames(conn)
        self._flush()

    async def _farewell(self) -> None:
        """As Session._farewell."""
        core = self._core
        assert self._stop is not None
        until, attempt = core.farewell_until(), 0
        while not self._stop.is_set() and now() < until:
            payload, close_id, addr, bound = core.start_farewell()
            try:
                conn, welcome = await self._handshake(addr, payload, bound)
            except LockingCenterError as e:
                if not core.failed_at(addr, e):
                    return
            else:
                try:
                    deadline, frames = now() + (bound or 5.0), conn.frames
                    while (done := core.farewell_answer(frames, close_id)) is None and deadline > now() and not conn.gone:
                        frames = await conn.more(deadline - now())
                    if done:
                        return
                finally:
                    conn.abort()
            attempt += 1
            await self._pause(self._stop, core.backoff(attempt))
