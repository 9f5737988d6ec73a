"""Session: the session protocol for threads. One connection, one reader
thread and one thread for keepalives and reconnects; any number of caller
threads, each of which writes its own requests."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from ._base import LockOptions, SessionBase
from ._client import BytesLike, _check_key, _split_address
from ._conn import PlainConn, TLSConn
from ._core import BUSY, END, WAIT, AcquireOptions, Core, HandleBase, KeyInfo, Request, goodbye_error, now
from ._errors import (
    CancelledError,
    CommunicationError,
    InvalidOptionError,
    LockingCenterError,
    LockTimeoutError,
    LostReason,
    ProtocolError,
    ReadTimeoutError,
    RefusedError,
    SessionClosedError,
    SessionExpiredError,
)
from ._frames import Frame, FrameDecoder, FrameType

if TYPE_CHECKING:
    from typing_extensions import Unpack  # for type checkers only

_CANCEL_POLL = 0.02  # how often an acquire with a cancel event looks at it, seconds
_JOIN = 5.0  # how long close() waits for the session's threads


class _Waiter:
    """A one-shot result for one thread: set under the session's lock,
    waited for by the caller. While the reader applies a batch of frames
    (``deferred`` is a list) the caller is woken only once the reader has
    let go of the lock, which the caller needs next."""

    __slots__ = ("_gate", "_done", "_value", "_exc", "_session")

    def __init__(self, session: Session) -> None:
        self._gate = threading.Lock()
        self._gate.acquire()
        self._done = False
        self._value: Any = None
        self._exc: BaseException | None = None
        self._session = session

    def done(self) -> bool:
        return self._done

    def _open(self) -> None:
        deferred = self._session._deferred
        if deferred is None:
            self._gate.release()
        else:
            deferred.append(self._gate)

    def set_result(self, value: Any) -> None:
        self._value, self._done = value, True
        self._open()

    def set_exception(self, exc: BaseException) -> None:
        self._exc, self._done = exc, True
        self._open()

    def wait(self, timeout: float | None) -> bool:
        if timeout is None:
            return self._gate.acquire()
        return self._gate.acquire(timeout=max(timeout, 0))

    def result(self) -> Any:
        if self._exc is not None:
            raise self._exc
        return self._value


def handshake_limit(read_timeout: float | None, bound: float | None) -> float | None:
    """How long a handshake may wait for its answer: the read timeout, and
    the session's bound when tighter."""
    if bound is None:
        return read_timeout
    return bound if read_timeout is None else min(read_timeout, bound)


def first_answer_error(frames: list[Frame], pending: bytes, what: str) -> LockingCenterError | None:
    """Why the first frames of a handshake are no WELCOME, or None when
    they are; also for a v1 server's '-'."""
    if not frames:
        if pending == b"-":
            return RefusedError(f"{what}: '-' to the session protocol's preface (a server without sessions?)")
        return CommunicationError(f"{what}: the connection closed before the WELCOME")
    f = frames[0]
    if f.type == FrameType.WELCOME:
        return None
    if f.type in (FrameType.GOODBYE, FrameType.REFUSED):
        return goodbye_error(f, what)
    return ProtocolError(f"{what}: frame 0x{f.type:02x} before the WELCOME")


def close_outcome(err: LockingCenterError | None, core: Core) -> LockingCenterError | None:
    """End the session at close(), after the CLOSE's answer (err None) or
    its failure; returns the error close() raises. A session the server no
    longer knows is closed: the CLOSE's OK went with the connection, or it
    expired first; either way the server holds nothing for it."""
    if isinstance(err, SessionExpiredError):
        err = None
    if err is None:
        core.end(SessionClosedError("the session is closed"), None, released=True)
        return None
    core.end(SessionClosedError(f"the session is closed; {err}"), LostReason.SESSION_CLOSED,
             "close() could not tell the server, which ends it with the session's TTL")  # fmt: skip
    return None if isinstance(err, SessionClosedError) else err


class Lock(HandleBase):
    """A key held by a Session, from its grant until it is released,
    orphaned or lost. ``fencing_token`` is its token (an int, exact at any
    size); ``lost`` is a threading.Event set when the lock is lost, and
    ``cause`` then says why (a LockLostError with its ``reason``). Use it
    in ``with``: it is released at the end of the block. Safe to use from
    any thread."""

    __slots__ = ("_session",)

    def __init__(self, session: Session, key: bytes, token: int) -> None:
        super().__init__(key, token)
        self._session = session

    @property
    def lost(self) -> threading.Event:
        """Set once the lock is lost (not when it is released or orphaned)."""
        ev = self._lost
        if ev is not None:
            return ev  # type: ignore[no-any-return]
        with self._session._mu:
            return self._lost_event(threading.Event)  # type: ignore[no-any-return]

    def release(self) -> None:
        """Release the lock and wait for the server's answer, at most the
        session's read timeout. Idempotent: a lock released (or orphaned)
        before returns at once. Raises the ``cause`` of a lock that was lost
        (LockLostError), StaleTokenError when the server no longer held it,
        ReadTimeoutError without an answer in time (the release goes out
        again after a reconnect), or the session's end."""
        self._session._call(lambda core, w: core.release(self, w), f"release {self.key!r}")

    def renew(self, lease: float | None = None) -> float | None:
        """Start the lease again, for ``lease`` seconds or the last lease
        the lock had; returns the new ``lease_deadline`` (None for a lock
        without a lease). Raises the ``cause`` of a lost lock,
        StaleTokenError when the server no longer holds it,
        ReadTimeoutError."""
        return self._session._call(lambda core, w: core.renew(self, lease, w), f"renew {self.key!r}")

    def orphan(self) -> None:
        """Stop caring about the lock without releasing it: the server keeps
        it until the session ends or its lease runs out."""
        with self._session._mu:
            self._session._core.orphan(self)

    def __enter__(self) -> Lock:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        try:
            self.release()
        except LockingCenterError:
            if exc_type is None:
                raise


class Session(SessionBase):
    """A session of the session protocol with a Locking-Center server, for
    threads: one connection carries every lock and request of the session,
    any number of threads share it.

    ``address`` is "host:port" of the mutex port, or several (a list, or a
    comma list): the nodes of a cluster, tried in turn. ``name`` is the
    session's source (reset by source matches it; empty lets the server use
    the client's IP address). ``ttl`` (seconds) is the TTL asked for: how
    long the server keeps the session, and its locks, without hearing from
    it (the server's default when None). ``credential`` is the token for a
    server with authentication on; ``ssl`` an SSLContext to speak TLS
    (tls_context makes one from a CA and a client certificate), with
    ``server_hostname`` (default: the address's host). ``connect_timeout``
    bounds each connect, ``read_timeout`` every call that waits for no key
    (opening, try_lock, release, renew, describe, close).

    Open it with ``open()`` or ``with Session(...) as session:``. The
    session pings when idle, reconnects and resumes after a drop, and
    follows a cluster's leader; its locks survive that with their tokens.
    ``session_id``, ``ttl``, ``keepalive``, ``server``, ``address`` and
    ``error`` describe it.
    """

    def _setup(self) -> None:
        self._mu = threading.Lock()
        self._wakeup = threading.Event()
        self._stop = threading.Event()
        self._wlock = threading.Lock()
        self._closing: _Waiter | None = None
        self._loop: threading.Thread | None = None
        self._deferred: list[Any] | None = None  # the gates of waiters to open after the reader's batch

    def _new_lock(self, key: bytes, token: int) -> Lock:
        return Lock(self, key, token)

    def _wake(self) -> None:
        self._wakeup.set()

    def _default_owner(self) -> str:
        return f"thread-{threading.get_ident()}"

    # --- opening and closing ---

    def open(self) -> Session:
        """Connect and open the session: each address in turn, following a
        node that names the leader. Returns the session. Raises
        UnauthenticatedError, RateLimitedError, OverLimitError,
        NotLeaderError (no address leads), ReadTimeoutError (no answer in
        time), CommunicationError, RefusedError, ProtocolError."""
        if not self._to_open():
            return self
        core = self._core
        hello, bound = core.hello(), core.handshake_bound()
        err: LockingCenterError | None = None
        for _ in range(core.open_attempts()):
            addr, sent_at = core.target(), now()
            try:
                conn, welcome, rest, dec = self._handshake(addr, hello, bound)
            except LockingCenterError as e:
                err = e
                if core.open_failed(addr, e):
                    continue
                break
            try:
                core.welcome(welcome, sent_at)
            except ProtocolError:
                conn.close()
                raise
            core.attach(conn, addr)
            self._state = "open"
            self._start_reader(conn, dec, rest)
            self._loop = threading.Thread(target=self._run, name=f"lockingcenter-session-{core.session_id}", daemon=True)
            self._loop.start()
            return self
        assert err is not None
        raise err

    def __enter__(self) -> Session:
        return self.open()

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        try:
            self.close()
        except LockingCenterError:
            if exc_type is None:
                raise

    def close(self) -> None:
        """End the session: CLOSE releases every lock at once (orphaned ones
        too) and withdraws every waiting acquire (they raise
        SessionClosedError). Waits for the answer at most the read timeout;
        when none came (ReadTimeoutError, or the connection's error), the
        locks count as lost and the server ends them with the TTL. Safe to
        call more than once."""
        with self._mu:
            if self._state == "closed":
                return
            was_open, self._state = self._state == "open", "closed"
            core = self._core
            if was_open and core.error is None:
                self._closing = _Waiter(self)
                core.close(self._closing)
        err: LockingCenterError | None = None
        w = self._closing
        if w is not None:
            self._kick()
            if not w.wait(self.read_timeout):
                err = ReadTimeoutError(f"close session {core.session_id}: no answer within {self.read_timeout} s")
            else:
                try:
                    w.result()
                except LockingCenterError as e:
                    err = e
        with self._mu:
            err = close_outcome(err, core)
            conn = core.conn
            core.detach(conn)
        self._stop.set()
        self._wakeup.set()
        if conn is not None:
            conn.abort()
        if self._loop is not None and self._loop is not threading.current_thread():
            self._loop.join(_JOIN)
        if err is not None:
            raise err

    # --- locks ---

    def acquire(
        self,
        key: BytesLike,
        *,
        timeout: float | None = None,
        cancel: threading.Event | None = None,
        wait: float | None = None,
        **options: Unpack[LockOptions],
    ) -> Lock:
        """Wait until the session holds ``key`` (1 to 127 bytes; str as
        UTF-8) and return its Lock, however long it takes, through
        reconnections.

        Giving up: ``timeout`` (seconds, counted here) or ``cancel`` (an
        Event, looked at every 20 ms) ends the wait with LockTimeoutError or
        CancelledError, and the request leaves the server's queue (CANCEL);
        ``wait`` (seconds, above 0) is a bound the server keeps
        (LockTimeoutError, code timeout). Use try_lock for a try.

        Options: ``lease`` (seconds: the lock ends that long after its grant
        unless renewed), ``lock_delay`` (seconds, at most 60: nobody gets
        the key for that long after the lock is lost by expiry),
        ``shared`` (any number of shared holders), ``limit`` (a semaphore of
        that many holders), ``priority`` (higher first; ages a point a
        second), ``reentrant`` with ``owner`` (a holder with the same owner
        counts up, same token), ``note`` (the holder's note, UTF-8, at most
        1 KiB, shown by describe and lc-cli keys -d). ``owner`` (at most
        127 bytes) defaults to the calling thread, so that threads sharing
        the session queue behind each other.

        Raises InvalidKeyError, InvalidOptionError (nothing sent);
        LockTimeoutError, CancelledError; DeadlockError, LimitMismatchError,
        UpgradeError, WithdrawnError (a reset), ForbiddenError,
        RateLimitedError, OverLimitError, RefusedError (the server's
        refusal, with its code and words); AnswerLostError; the session's
        end (SessionExpiredError, SessionClosedError, ...)."""
        if wait is not None and wait <= 0:
            raise InvalidOptionError("wait must be above 0 seconds; try_lock tries once")
        if timeout is not None and timeout <= 0:
            # No time to wait: a try, and a held key is the timeout.
            got = self.try_lock(key, **options)
            if got is None:
                raise LockTimeoutError(f"acquire {key!r}: the key is held, and a timeout of {timeout} s waits for nothing")
            return got
        return self._acquire(self._options(key, wait, options), timeout, cancel, LockTimeoutError)  # type: ignore[no-any-return]

    def try_lock(self, key: BytesLike, **options: Unpack[LockOptions]) -> Lock | None:
        """Take ``key`` only if it can be had now: its Lock, or None when
        the key is held (or in lock-delay). Options and errors as acquire;
        ReadTimeoutError without an answer within the read timeout."""
        got = self._acquire(self._options(key, 0, options), self.read_timeout, None, ReadTimeoutError)
        return None if got is BUSY else got  # type: ignore[no-any-return]

    @contextlib.contextmanager
    def lock(self, key: BytesLike, **options: Any) -> Iterator[Lock]:
        """``with session.lock("k") as lk:``: acquire on entry (its
        arguments as acquire's), release on exit. A lock lost inside the
        block raises its LockLostError at the exit."""
        lk = self.acquire(key, **options)
        with lk:
            yield lk

    def release(self, key: BytesLike, token: int) -> None:
        """Release the session's lock of ``key`` by its fencing token, e.g. one
        kept across a restart of the program's logic or orphaned. Idempotent
        for a token released here. Raises StaleTokenError when the session
        does not hold that token for the key, ReadTimeoutError."""
        k = _check_key(key)
        self._call(lambda core, w: core.release_token(k, token, w), f"release {k!r}")

    def describe(self, key: BytesLike) -> KeyInfo:
        """The key's holders (token, session, name, note, ...), how many
        requests wait for it and what is left of a lock-delay. Raises
        ReadTimeoutError, ForbiddenError."""
        k = _check_key(key)
        return self._call(lambda core, w: core.describe(k, w), f"describe {k!r}")  # type: ignore[no-any-return]

    # --- calls ---

    def _acquire(
        self, opts: AcquireOptions, timeout: float | None, cancel: threading.Event | None, timeout_error: type
    ) -> Any:
        self._check_open()
        w = _Waiter(self)
        r = self._submit(lambda core: core.acquire(opts, w))
        if cancel is None:
            got = w.wait(timeout)
        else:
            deadline = None if timeout is None else now() + timeout
            while True:
                step = _CANCEL_POLL if deadline is None else min(_CANCEL_POLL, deadline - now())
                got = w.wait(step)
                if got or cancel.is_set() or (deadline is not None and now() >= deadline):
                    break
        if not got:
            self._give_up(r, w)
            if cancel is not None and cancel.is_set():
                raise CancelledError(f"acquire {opts.key!r}: cancelled")
            raise timeout_error(f"acquire {opts.key!r}: no grant within {timeout} s")
        return w.result()

    def _give_up(self, r: Request, w: _Waiter) -> None:
        """The caller of the acquire r gives up: cancel it, or release a
        grant that crossed."""
        with self._mu:
            if not w.done():
                self._core.abandon(r)
            else:
                got = w._value
                if isinstance(got, HandleBase) and got.held:
                    self._core.release(got, None)
        self._kick()

    def _call(self, make: Callable[[Core, _Waiter], Any], what: str) -> Any:
        """A request that waits for no key: made by make(core, waiter) under
        the lock (None: nothing to send), answered within the read
        timeout."""
        self._check_open()
        w = _Waiter(self)
        if self._submit(lambda core: make(core, w)) is None:
            return None
        if not w.wait(self.read_timeout):
            raise ReadTimeoutError(f"{what}: no answer within {self.read_timeout} s; it goes out again after a reconnect")
        return w.result()

    # --- the connection ---

    def _submit(self, make: Callable[[Core], Any]) -> Any:
        """Run make(core) under the lock and write what it queued: at once,
        taken in the same hold of the lock, unless another thread is
        writing, which then writes it too. Returns what make returned."""
        core = self._core
        with self._mu:
            r = make(core)
            out, conn = core.out, core.conn
            if not out or conn is None or not self._wlock.acquire(blocking=False):
                return r
            core.out = bytearray()
        try:
            conn.sendall(out)
        except OSError:
            conn.abort()  # its reader sees it and detaches it
        finally:
            self._wlock.release()
        if core.out:
            self._kick()
        return r

    def _kick(self) -> None:
        """Write what is queued for the attached connection. A thread that
        finds another writing leaves its frames to it: the writer looks for
        more after each write, and again once it has let go."""
        core = self._core
        while core.out and core.conn is not None:
            if not self._wlock.acquire(blocking=False):
                return
            try:
                while True:
                    with self._mu:
                        out, conn = core.out, core.conn
                        if not out or conn is None:
                            break
                        core.out = bytearray()
                    try:
                        conn.sendall(out)
                    except OSError:
                        conn.abort()
                    if not core.out:
                        break
            finally:
                self._wlock.release()

    def _handshake(self, addr: str, payload: bytes, bound: float | None) -> tuple[Any, Frame, list[Frame], FrameDecoder]:
        """Connect to addr, write payload (the preface and first frames) and
        read up to the first answer, within the connect timeout and the
        read timeout (or bound, when tighter). Returns the connection, its
        WELCOME, the frames that came after it, and the decoder."""
        limit = handshake_limit(self.read_timeout, bound)
        deadline = None if limit is None else now() + limit
        what = f"session at {addr}"

        def left() -> float | None:
            if deadline is None:
                return None
            t = deadline - now()
            if t <= 0:
                raise TimeoutError
            return t

        host, port = _split_address(addr)
        try:
            ct = left()
            if self.connect_timeout is not None:
                ct = self.connect_timeout if ct is None else min(ct, self.connect_timeout)
            sock = socket.create_connection((host, port), timeout=ct)
        except TimeoutError as e:
            raise ReadTimeoutError(f"{what}: no connection within {limit} s") from e
        except OSError as e:
            raise CommunicationError(f"{what}: {e}") from e
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.settimeout(left())
            conn: PlainConn
            if self._ssl is not None:
                conn = TLSConn(sock, self._ssl, self._server_hostname or host)
            else:
                conn = PlainConn(sock)
            conn.sendall(payload)
            dec = FrameDecoder()
            frames: list[Frame] = []
            while not frames:
                sock.settimeout(left())
                data = conn.recv(65536)
                if not data:
                    break
                frames = dec.feed(data)
            err = first_answer_error(frames, dec.pending, what)
            if err is not None:
                raise err
            sock.settimeout(None)
            return conn, frames[0], frames[1:], dec
        except LockingCenterError:
            sock.close()
            raise
        except TimeoutError as e:
            sock.close()
            raise ReadTimeoutError(f"{what}: no answer within {limit} s") from e
        except (OSError, ValueError) as e:
            sock.close()
            raise CommunicationError(f"{what}: {e}") from e

    def _start_reader(self, conn: Any, dec: FrameDecoder, rest: list[Frame]) -> None:
        t = threading.Thread(target=self._read, args=(conn, dec, rest), name="lockingcenter-reader", daemon=True)
        t.start()

    def _read(self, conn: Any, dec: FrameDecoder, frames: list[Frame]) -> None:
        """Apply the frames of conn until it ends."""
        core = self._core
        try:
            while True:
                if frames:
                    with self._mu:
                        if core.conn is not conn:
                            return
                        core.heard = now()
                        self._deferred = []
                        try:
                            go_on = all(core.handle(f) for f in frames) and core.error is None
                        finally:
                            woken, self._deferred = self._deferred, None
                    for gate in woken:
                        gate.release()
                    if core.out:
                        self._kick()
                    if not go_on:
                        return
                data = conn.recv(65536)
                if not data:
                    return
                frames = dec.feed(data)
        except (OSError, ProtocolError):
            return
        finally:
            with self._mu:
                core.detach(conn)
            conn.close()

    def _run(self) -> None:
        """Ping, end leases, and reconnect after a drop, until the session
        ends or is closed; then, for a session the client counted expired,
        the farewell."""
        core = self._core
        while not self._stop.is_set():
            self._wakeup.clear()
            with self._mu:
                drop = core.tick()
                step, delay = core.next_step(self._closing is not None and self._closing.done())
            if drop is not None:
                drop.abort()
            self._kick()
            if step == END:
                break
            if step == WAIT:
                self._wakeup.wait(delay)
            elif not self._stop.wait(delay):
                self._resume()
        with self._mu:
            conn = core.conn
            core.detach(conn)
        if conn is not None:
            conn.abort()
        if core.farewell:
            self._farewell()

    def _resume(self) -> None:
        """One attempt to resume the session on a new connection."""
        core = self._core
        with self._mu:
            payload, sync_id, addr, bound, sent_at = core.start_resume()
        try:
            conn, welcome, rest, dec = self._handshake(addr, payload, bound)
        except LockingCenterError as e:
            with self._mu:
                core.resume_failed(addr, e)
            return
        with self._mu:
            try:
                if core.error is not None or self._stop.is_set():
                    raise ProtocolError("the session ended meanwhile")
                core.attach_resumed(conn, addr, welcome, sent_at, sync_id)
            except ProtocolError:
                conn.close()
                return
        self._start_reader(conn, dec, rest)
        self._kick()

    def _farewell(self) -> None:
        """Close on the server a session that the client counted expired:
        RESUME, a RELEASE with lapse of each lock it held, and CLOSE
        (Core.start_farewell), at each address in turn, until a server
        answers, close(), or Core.farewell_until; the server then ends those
        locks as their leases running out would (each key keeps its
        lock-delay) and frees at once what else it has for the session."""
        core = self._core
        until, attempt = core.farewell_until(), 0
        while not self._stop.is_set() and now() < until:
            with self._mu:
                payload, close_id, addr, bound = core.start_farewell()
            try:
                conn, _, frames, dec = self._handshake(addr, payload, bound)
            except LockingCenterError as e:
                with self._mu:
                    if not core.failed_at(addr, e):
                        return
            else:
                try:
                    deadline = now() + (bound or 5.0)
                    while (done := core.farewell_answer(frames, close_id)) is None and deadline > now():
                        conn.sock.settimeout(deadline - now())
                        data = conn.recv(65536)
                        if not data:
                            break
                        frames = dec.feed(data)
                    if done:
                        return
                except (OSError, ProtocolError):
                    pass
                finally:
                    conn.close()
            attempt += 1
            self._stop.wait(core.backoff(attempt))
