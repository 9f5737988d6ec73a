"""What a session knows and decides, without any I/O: the requests in
flight, the locks held, their leases, when to ping, when a connection is
dead, which address to try next, and how a resumed session reconciles what
the server lists with what the client has in flight.

Session (threads) and AsyncSession (asyncio) each drive one Core: they
open connections, write ``Core.out`` to the attached one, feed it the
frames that arrive and call ``tick`` when ``next_wakeup`` comes. Every
method runs under the driver's lock (or in its event loop). Results reach
the callers through their waiters (``set_result`` / ``set_exception``).
"""

from __future__ import annotations

import dataclasses
import heapq
import math
import random
import re
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from ._client import BytesLike, _check_key, _split_address, _to_bytes
from ._errors import (
    AnswerLostError,
    CancelledError,
    CommunicationError,
    DeadlockError,
    ForbiddenError,
    InvalidOptionError,
    LimitMismatchError,
    LockingCenterError,
    LockLostError,
    LockTimeoutError,
    LostReason,
    NotLeaderError,
    OverLimitError,
    ProtocolError,
    RateLimitedError,
    RefusedError,
    SessionClosedError,
    SessionExpiredError,
    StaleTokenError,
    UnauthenticatedError,
    UpgradeError,
    WithdrawnError,
)
from ._frames import (
    MAX_CREDENTIAL_LEN,
    MAX_NOTE_LEN,
    MAX_OWNER_LEN,
    PREFACE,
    Code,
    Field,
    Frame,
    FrameType,
    Tag,
    code_name,
    encode_fields,
    encode_frame,
    frame_head,
    u8,
    u32,
    u64,
)

now = time.monotonic

#: What the client allows between the server's measuring of a left_ms and
#: the arrival of its frame: a lease is counted from the arrival less this,
#: or from the sending of the request when that is later.
DELIVERY_BOUND = 0.1
MAX_U32 = 0xFFFFFFFF
MAX_LOCK_DELAY = 60.0
BUSY = object()  # what a try that found the key held delivers
_RELEASED_MEMORY = 4096  # tokens released by handle, remembered for release by token


def margin(d: float) -> float:
    """What the client takes off a duration the server measures, for the
    drift between the two clocks: a tenth, at least 50 ms, at most half."""
    return min(max(d / 10, 0.05), d / 2)


def silence(keepalive: float) -> float:
    """How long a connection may bring nothing before it counts as dead:
    the keepalive, when the ping is due, plus a tenth of it (at least
    250 ms) for the ping's round trip and a stall."""
    return keepalive + max(keepalive / 10, 0.25)


def millis(seconds: float) -> int:
    """Seconds as whole milliseconds, rounded up, within a u32."""
    if seconds <= 0:
        return 0
    return min(math.ceil(seconds * 1000 - 1e-9), MAX_U32)


def parse_addresses(address: str | Sequence[str]) -> list[str]:
    """The addresses of a "host:port" (or a comma list of them) or a list,
    blanks dropped, each once, in order. Raises ValueError."""
    parts = address.split(",") if isinstance(address, str) else [p for a in address for p in a.split(",")]
    out: list[str] = []
    for a in parts:
        a = a.strip()
        if a and a not in out:
            _split_address(a)
            out.append(a)
    if not out:
        raise ValueError(f"no address in {address!r}")
    return out


class Waiter(Protocol):
    """Where the answer of a request goes: a Future, or the thread driver's
    one-shot waiter."""

    def set_result(self, value: Any) -> None: ...
    def set_exception(self, exc: BaseException) -> None: ...
    def done(self) -> bool: ...


def _deliver(w: Waiter | None, value: Any = None, exc: BaseException | None = None) -> None:
    if w is None or w.done():
        return
    if exc is not None:
        w.set_exception(exc)
    else:
        w.set_result(value)


# --- options ---


class AcquireOptions:
    """What an acquire asks for, checked (see acquire_options); ``body`` is
    its ACQUIRE's fields, encoded once."""

    __slots__ = ("key", "wait", "lease", "lock_delay", "shared", "limit", "priority", "reentrant", "owner", "note",
                 "body")  # fmt: skip

    def __init__(self, key: bytes, wait: float | None = None, lease: float | None = None,
                 lock_delay: float | None = None, shared: bool = False, limit: int | None = None, priority: int = 0,
                 reentrant: bool = False, owner: bytes = b"", note: bytes = b"") -> None:  # fmt: skip
        self.key, self.wait, self.lease, self.lock_delay = key, wait, lease, lock_delay
        self.shared, self.limit, self.priority, self.reentrant = shared, limit, priority, reentrant
        self.owner, self.note = owner, note
        self.body = encode_fields(self.fields())

    def fields(self) -> list[Field]:
        fs: list[Field] = [(Tag.KEY, self.key)]
        if self.wait is not None:
            fs.append(u32(Tag.WAIT_MS, millis(self.wait)))
        if self.lease:
            fs.append(u32(Tag.LEASE_MS, millis(self.lease)))
        if self.lock_delay is not None:
            fs.append(u32(Tag.DELAY_MS, millis(self.lock_delay)))
        if self.shared:
            fs.append(u8(Tag.MODE, 1))
        if self.limit:
            fs.append(u32(Tag.LIMIT, self.limit))
        if self.priority:
            fs.append(u32(Tag.PRIORITY, self.priority & MAX_U32))
        if self.reentrant:
            fs.append(u8(Tag.REENTRANT, 1))
        if self.owner:
            fs.append((Tag.OWNER, self.owner))
        if self.note:
            fs.append((Tag.NOTE, self.note))
        return fs


MAX_SECONDS = MAX_U32 / 1000  # what a u32 of milliseconds holds: about 49.7 days


def check_seconds(name: str, v: float | None, most: float = MAX_SECONDS) -> None:
    """Check a duration option, in seconds: None, or a finite number from 0
    to ``most`` (what the frame's u32 of milliseconds holds). Raises
    InvalidOptionError (a ValueError) for any other number, TypeError for
    what is not a number."""
    if v is None:
        return
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError(f"{name} must be a number of seconds, got {v!r}")
    if not (math.isfinite(v) and 0 <= v <= most):
        raise InvalidOptionError(f"{name} must be 0 to {most:g} seconds, got {v}")


def check_token(token: int) -> None:
    """Check a fencing token given by the caller: an int from 1 to 2^64 - 1.
    Raises TypeError, InvalidOptionError."""
    if isinstance(token, bool) or not isinstance(token, int):
        raise TypeError(f"a fencing token is an int, got {token!r}")
    if not 0 < token < 2**64:
        raise InvalidOptionError(f"a fencing token is 1 to 2^64 - 1, got {token}")


def acquire_options(
    key: BytesLike,
    *,
    wait: float | None = None,
    lease: float | None = None,
    lock_delay: float | None = None,
    shared: bool = False,
    limit: int | None = None,
    priority: int = 0,
    reentrant: bool = False,
    owner: BytesLike | None = None,
    note: str | bytes | None = None,
) -> AcquireOptions:
    """Check the options of an acquire. Raises InvalidKeyError,
    InvalidOptionError."""
    k = _check_key(key)
    check_seconds("wait", wait)
    check_seconds("lease", lease)
    check_seconds("lock_delay", lock_delay, MAX_LOCK_DELAY)
    if limit is not None and not 0 <= limit <= MAX_U32:
        raise InvalidOptionError(f"limit must be 0 to {MAX_U32}, got {limit}")
    if shared and limit is not None and limit > 1:
        raise InvalidOptionError("a semaphore (limit above 1) cannot be shared")
    if not -(2**31) <= priority < 2**31:
        raise InvalidOptionError(f"priority must be a signed 32-bit number, got {priority}")
    o = _to_bytes(owner, "owner") if owner is not None else b""
    if len(o) > MAX_OWNER_LEN:
        raise InvalidOptionError(f"owner must be at most {MAX_OWNER_LEN} bytes, got {len(o)}")
    n = b""
    if note is not None:
        n = note.encode("utf-8") if isinstance(note, str) else bytes(note)
        try:
            n.decode("utf-8")
        except UnicodeDecodeError as e:
            raise InvalidOptionError(f"note must be UTF-8: {e}") from None
        if len(n) > MAX_NOTE_LEN:
            raise InvalidOptionError(f"note must be at most {MAX_NOTE_LEN} bytes, got {len(n)}")
    return AcquireOptions(k, wait, lease, lock_delay, bool(shared), limit, priority, bool(reentrant), o, n)


# --- what DESCRIBE answers ---


@dataclasses.dataclass(frozen=True)
class HolderInfo:
    """One holder of a key, as DESCRIBE shows it."""

    token: int
    name: bytes  # its session's name (its source); a v1 holder's source
    session: int  # 0 for a v1 holder
    held: float  # seconds it has held the key
    shared: bool
    count: int  # reentrancy count
    lease_left: float | None  # seconds left of its lease; None without one
    note: str  # the holder's note; "" for none


@dataclasses.dataclass(frozen=True)
class KeyInfo:
    """A key as DESCRIBE shows it: its holders, how many requests wait for
    it, and what is left of a lock-delay."""

    key: bytes
    holders: tuple[HolderInfo, ...]
    queue: int
    delay_left: float | None


def _ms(v: int | None) -> float | None:
    return None if v is None else v / 1000


def parse_info(f: Frame) -> KeyInfo:
    holders = tuple(
        HolderInfo(
            token=it.uint(Tag.TOKEN) or 0,
            name=it.get(Tag.NAME) or b"",
            session=it.uint(Tag.SESSION) or 0,
            held=(it.uint(Tag.HELD_MS) or 0) / 1000,
            shared=it.uint(Tag.MODE) == 1,
            count=it.uint(Tag.COUNT) or 1,
            lease_left=_ms(it.uint(Tag.LEFT_MS)),
            note=it.text(Tag.NOTE),
        )
        for it in f.items(Tag.HOLDER)
    )
    return KeyInfo(f.get(Tag.KEY) or b"", holders, f.uint(Tag.QUEUE) or 0, _ms(f.uint(Tag.LEFT_MS)))


# --- errors from codes ---


_REFUSALS: dict[int, type[LockingCenterError]] = {
    Code.TIMEOUT: LockTimeoutError,
    Code.CANCELLED: CancelledError,
    Code.RESET: WithdrawnError,
    Code.STALE_TOKEN: StaleTokenError,
    Code.SESSION_ENDED: SessionClosedError,
    Code.SESSION_EXPIRED: SessionExpiredError,
    Code.UNKNOWN_SESSION: SessionExpiredError,
    Code.DEADLOCK: DeadlockError,
    Code.LIMIT_MISMATCH: LimitMismatchError,
    Code.UPGRADE: UpgradeError,
    Code.FORBIDDEN: ForbiddenError,
    Code.RATE_LIMITED: RateLimitedError,
    Code.OVER_LIMIT: OverLimitError,
    Code.UNAUTHENTICATED: UnauthenticatedError,
    Code.PROTOCOL_ERROR: ProtocolError,
    Code.NOT_LEADER: NotLeaderError,
    Code.SHUTTING_DOWN: CommunicationError,
}

_LOST_REASONS = {
    Code.LEASE_EXPIRED: LostReason.LEASE_EXPIRED,
    Code.SESSION_EXPIRED: LostReason.SESSION_EXPIRED,
    Code.RESET: LostReason.RESET,
    Code.SESSION_ENDED: LostReason.SESSION_CLOSED,
}


def server_error(what: str, code: int, message: str, key: bytes = b"") -> LockingCenterError:
    """The error of a refusal or goodbye with ``code`` and the server's
    ``message``, about ``what`` (e.g. "acquire b'k'")."""
    cls = _REFUSALS.get(code, RefusedError)
    text = f"{what}: {code_name(code)}" + (f": {message}" if message else "")
    err: LockingCenterError
    if cls is StaleTokenError:
        err = StaleTokenError(text, LostReason.STALE_TOKEN, key)
    else:
        err = cls(text)
    err.code, err.server_message = code, message
    if isinstance(err, LimitMismatchError):
        numbers = re.findall(r"\d+", message)
        err.limit = int(numbers[-1]) if numbers else None
    return err


def goodbye_error(f: Frame, what: str) -> LockingCenterError:
    """The error of a GOODBYE (or a refusal of the HELLO or RESUME); a
    not_leader one has ``leader``, the address it names ("" for none)."""
    code = f.uint(Tag.CODE) or 0
    if f.type == FrameType.REFUSED:
        what += " (the server refused the first frame)"
    err = server_error(what, code, f.text(Tag.MESSAGE))
    err.leader = f.text(Tag.LEADER)  # type: ignore[attr-defined]
    return err


# A goodbye after which another attempt, at this node or another, may do
# better: the node stops, is full, leads no more, or the session moved.
_RETRY_GOODBYES = frozenset((Code.SHUTTING_DOWN, Code.SESSION_ENDED, Code.RATE_LIMITED, Code.OVER_LIMIT, Code.NOT_LEADER))


def is_final(err: BaseException) -> bool:
    """Whether no other attempt can help after err: a refusal any node
    would give (a bad credential, an unknown session, a protocol error)."""
    code = getattr(err, "code", None)
    return code is not None and code not in _RETRY_GOODBYES


def copy_error(err: LockingCenterError) -> LockingCenterError:
    """A fresh instance of err, for one more caller to raise."""
    try:
        e = type(err)(*err.args)
    except TypeError:
        return err
    e.__dict__.update(err.__dict__)
    return e


# --- locks ---

HELD, RELEASED, LOST, ORPHANED = "held", "released", "lost", "orphaned"
END, WAIT, RESUME = "end", "wait", "resume"  # Core.next_step


class HandleBase:
    """A lock as its holder sees it; Lock and AsyncLock add the waiting and
    the kind of event ``lost`` is (made when first asked for)."""

    __slots__ = ("key", "fencing_token", "_state", "_cause", "_hold", "_lost", "__weakref__")

    def __init__(self, key: bytes, token: int) -> None:
        self.key = key
        self.fencing_token = token
        self._state = HELD
        self._cause: LockLostError | None = None
        self._hold: Hold | None = None
        self._lost: Any = None

    def _lost_event(self, make: Callable[[], Any]) -> Any:
        """The event set at the loss, made with make on first use (called
        under the session's lock)."""
        if self._lost is None:
            self._lost = make()
            if self._state == LOST:
                self._lost.set()
        return self._lost

    @property
    def cause(self) -> LockLostError | None:
        """Why the lock was lost (a LockLostError with its ``reason``), or
        None while held and after a release or orphan."""
        return self._cause

    @property
    def held(self) -> bool:
        """Whether the lock is held: not released, orphaned or lost."""
        return self._state == HELD

    @property
    def lease_deadline(self) -> float | None:
        """The ``time.monotonic()`` at which the client counts the lease
        over (and the lock lost), or None for a lock without a lease or one
        no longer held. The server cannot end the lock before it: it is
        counted from the grant's arrival less DELIVERY_BOUND (or from the
        acquire's sending when that is later), less a margin of a tenth of
        the lease, at least 50 ms."""
        h = self._hold
        return None if h is None else h.lease_end

    def _end(self, state: str, cause: LockLostError | None = None) -> None:
        if self._state != HELD:
            return
        self._state, self._cause, self._hold = state, cause, None
        if state == LOST and self._lost is not None:
            self._lost.set()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.key!r} token {self.fencing_token} {self._state}>"


class Hold:
    """A lock the server holds for the session (one token), with the
    handles that count in it: more than one after reentrant acquires."""

    __slots__ = ("key", "token", "handles", "lease_end", "gen")

    def __init__(self, key: bytes, token: int) -> None:
        self.key = key
        self.token = token
        self.handles: list[HandleBase] = []
        self.lease_end: float | None = None
        self.gen = 0


class Request:
    """A request from its sending until its answer."""

    __slots__ = ("type", "id", "frame", "sent_at", "sent", "resent", "waiter", "key", "opts", "abandoned",
                 "target", "token", "handle")  # fmt: skip

    def __init__(self, type: int, waiter: Waiter | None = None, key: bytes = b"") -> None:
        self.type = type
        self.id = 0
        self.frame = b""
        self.sent_at = 0.0
        self.sent = False  # put on a connection: it may have arrived
        self.resent = False  # sent again after a resume
        self.waiter = waiter
        self.key = key
        self.opts: AcquireOptions | None = None
        self.abandoned = False  # an acquire whose caller has gone
        self.target = 0  # cancel
        self.token = 0  # release, renew
        self.handle: HandleBase | None = None  # renew


class _Replay:
    """What a resume's WELCOME listed, kept until the answer to the PING
    sent with the RESUME: every frame the server owed the session comes
    before it."""

    def __init__(self, sent_at: float, sync_id: int, welcome: Frame) -> None:
        self.sent_at = sent_at
        self.sync_id = sync_id
        self.applied = welcome.uint(Tag.APPLIED) or 0
        self.held: dict[int, tuple[bytes, int, int | None]] = {}  # token: key, count, left_ms
        self.by_request: dict[int, int] = {}  # acquire id: token
        for it in welcome.items(Tag.HELD):
            token = it.uint(Tag.TOKEN) or 0
            self.held[token] = (it.get(Tag.KEY) or b"", max(it.uint(Tag.COUNT) or 1, 1), it.uint(Tag.LEFT_MS))
            self.by_request[it.uint(Tag.REQUEST) or 0] = token
        self.parked = {it.uint(Tag.REQUEST) or 0 for it in welcome.items(Tag.PARKED)}
        self.fresh: set[int] = set()  # tokens granted after the resume


def _gone(r: Request) -> bool:
    """Whether nobody waits for the answer of r any more: abandoned, or its
    waiter (a cancelled future) done."""
    return r.abandoned or (r.waiter is not None and r.waiter.done())


def lost_error(key: bytes, token: int, reason: LostReason, why: str) -> LockLostError:
    return LockLostError(f"lock of {key!r} (token {token}) lost: {why}", reason, key, token)


class Core:
    """One session's state. ``make_handle(key, token)`` makes the caller's
    lock object; ``wake()`` tells the driver that ``next_wakeup`` moved or a
    connection went."""

    def __init__(
        self,
        addresses: list[str],
        name: bytes,
        ttl: float | None,
        credential: bytes,
        make_handle: Callable[[bytes, int], HandleBase],
        wake: Callable[[], None],
    ) -> None:
        self.addresses = addresses
        self.at = 0  # index in addresses of the next to try
        self.leader = ""  # the address a GOODBYE not_leader named
        self.silent = ""  # the address whose connection last went silent
        self.shun_until = 0.0
        self.name = name
        self.ttl_asked = ttl
        self.credential = credential
        self.make_handle = make_handle
        self.wake = wake

        self.session_id = 0
        self.secret = b""
        self.ttl = 0.0
        self.keepalive = 0.0
        self.server = ""
        self.next_id = 0
        self.inflight: dict[int, Request] = {}  # by id, in id order
        self.holds: dict[int, Hold] = {}  # by token
        self.letgo: set[int] = set()  # tokens orphaned: left to the server
        self.released: OrderedDict[int, None] = OrderedDict()  # tokens released here lately
        self.leases: list[tuple[float, int, int]] = []  # heap of (end, gen, token)
        self.out = bytearray()  # frames for the attached connection
        self.conn: Any = None  # the attached connection (the driver's object)
        self.conn_addr = ""
        self.heard = 0.0  # when the attached connection last brought a frame
        self.last_ack = 0.0  # when the latest request the server answered was sent
        self.ping: Request | None = None
        self.replay: _Replay | None = None
        self.error: LockingCenterError | None = None  # why the session ended
        self.farewell = False  # ended by the client's count: close it on the server
        self.parting: list[tuple[bytes, int]] = []  # farewell: (key, token) of each lock it may hold
        self._attempt = self._hops = 0  # reconnect attempts since the last success; leaders followed

    # --- addresses ---

    def target(self) -> str:
        """The address to try next: the leader a node named, or the next
        address, passing over one that went silent lately."""
        if self.leader:
            return self.leader
        if self._shunned(self.addresses[self.at]):
            self.at = (self.at + 1) % len(self.addresses)
        return self.addresses[self.at]

    def _shunned(self, addr: str) -> bool:
        return addr == self.silent and len(self.addresses) > 1 and now() < self.shun_until

    def follow(self, leader: str) -> None:
        if leader and not self._shunned(leader):
            self.leader = leader

    def demote(self, addr: str) -> None:
        """The node at addr went silent: it goes to the back of the
        addresses and is neither tried nor followed for as long again (a
        frozen node's kernel still accepts, and the others name it as the
        leader until they elect another)."""
        if self.leader == addr:
            self.leader = ""
        if addr in self.addresses:
            self.addresses.remove(addr)
            self.addresses.append(addr)
            self.at = 0
        self.silent, self.shun_until = addr, now() + self._silence()

    def failed_at(self, addr: str, err: BaseException) -> bool:
        """Note that an attempt at addr failed with err; the next goes to
        the leader it named or the next address. Returns whether another
        attempt may do better."""
        if self.leader == addr:
            self.leader = ""
        elif self.addresses[self.at] == addr:
            self.at = (self.at + 1) % len(self.addresses)
        if getattr(err, "code", None) == Code.NOT_LEADER and getattr(err, "leader", "") != addr:
            self.follow(getattr(err, "leader", ""))
        return not is_final(err)

    def went_round(self) -> bool:
        """Whether the attempts so far have tried every address once and no
        node names a leader to try."""
        return not self.leader and self.at == 0

    # --- handshakes ---

    def hello(self) -> bytes:
        """The preface and the HELLO, id 1."""
        fields: list[Field] = [(Tag.NAME, self.name)]
        if self.ttl_asked:
            fields.append(u32(Tag.TTL_MS, millis(self.ttl_asked)))
        if self.credential:
            fields.append((Tag.CREDENTIAL, self.credential))
        self.next_id = 1
        return PREFACE + encode_frame(FrameType.HELLO, 1, fields)

    def handshake_bound(self) -> float | None:
        """How long one attempt to open or resume may take, when known:
        the keepalive and its margin, and for a resume of a live session no
        longer than it may live by the client's count."""
        if self.keepalive:
            if self.error is not None:
                return self._silence()
            return max(min(self._silence(), self._lost_deadline() - now()), 0.01)
        if self.ttl_asked:
            return silence(self.ttl_asked / 3)
        return None

    def welcome(self, f: Frame, sent_at: float) -> None:
        """Take the WELCOME of the HELLO. Raises ProtocolError."""
        sid, secret, ttl = f.uint(Tag.SESSION), f.get(Tag.SECRET), f.uint(Tag.TTL_MS)
        if sid is None or secret is None or not ttl:
            raise ProtocolError("a WELCOME without a session, a secret or a TTL")
        self.session_id, self.secret, self.ttl = sid, secret, ttl / 1000
        keepalive = (f.uint(Tag.KEEPALIVE_MS) or 0) / 1000
        self.keepalive = keepalive if 0 < keepalive <= self.ttl else self.ttl / 3
        self.server = f.text(Tag.SERVER)
        self.last_ack = sent_at

    def resume_frames(self, then: int = FrameType.PING, lapse: Sequence[tuple[bytes, int]] = ()) -> tuple[bytes, int]:
        """The preface, a RESUME, a RELEASE with lapse of each (key, token)
        of ``lapse``, and a frame of type ``then`` without fields, with the
        next request ids in that order; returns them and the last frame's
        id."""
        rid = self.next_id + 1
        self.next_id += 2 + len(lapse)
        then_id = self.next_id
        fields: list[Field] = [u64(Tag.SESSION, self.session_id), (Tag.SECRET, self.secret)]
        if self.credential:
            fields.append((Tag.CREDENTIAL, self.credential))
        out = PREFACE + encode_frame(FrameType.RESUME, rid, fields)
        for i, (key, token) in enumerate(lapse, rid + 1):
            out += encode_frame(FrameType.RELEASE, i, [(Tag.KEY, key), u64(Tag.TOKEN, token), u8(Tag.LAPSE, 1)])
        return out + encode_frame(then, then_id), then_id

    def attach(self, conn: Any, addr: str) -> None:
        """Attach the connection that the HELLO opened."""
        self.conn, self.conn_addr, self.heard = conn, addr, now()

    def attach_resumed(self, conn: Any, addr: str, welcome: Frame, sent_at: float, sync_id: int) -> None:
        """Attach the connection of a resume whose WELCOME came, and queue
        again every request the server never got (above ``applied``), with
        its id. Raises ProtocolError for a WELCOME of another session."""
        if welcome.uint(Tag.SESSION) != self.session_id:
            raise ProtocolError(f"the WELCOME of a resume names session {welcome.uint(Tag.SESSION)}")
        rs = _Replay(sent_at, sync_id, welcome)
        self._ack(sent_at)
        out = bytearray()
        for rid, r in list(self.inflight.items()):
            if r.type == FrameType.DESCRIBE:
                pass  # it changes nothing: asked again, whatever became of it
            elif rid <= rs.applied:
                continue  # it arrived: the reconciliation settles it
            elif (r.type == FrameType.ACQUIRE and r.abandoned) or (
                r.type == FrameType.CANCEL and r.target not in self.inflight
            ):
                del self.inflight[rid]  # it never arrived and nobody wants it
                continue
            r.resent, r.sent = r.sent, True
            out += r.frame
        self.conn, self.conn_addr, self.heard = conn, addr, now()
        self.out, self.ping, self.replay = out, None, rs
        self.wake()

    def detach(self, conn: Any) -> bool:
        """The connection is gone (or given up). Returns whether it was the
        attached one."""
        if self.conn is not conn or conn is None:
            return False
        self.conn, self.ping, self.replay = None, None, None
        self.out = bytearray()
        self.wake()
        return True

    # --- requests ---

    def _enqueue(self, r: Request, body: bytes = b"") -> Request:
        """Give r the next id and queue its frame (type, id and the fields'
        bytes) for the attached connection; without one it waits in
        inflight for the next."""
        self.next_id += 1
        r.id = self.next_id
        r.sent_at = now()
        r.frame = frame_head(r.type, r.id, len(body)) + body
        if r.type != FrameType.PING:
            self.inflight[r.id] = r
        if self.conn is not None:
            self.out += r.frame
            r.sent = True
        return r

    def check_open(self) -> None:
        if self.error is not None:
            raise copy_error(self.error)

    def acquire(self, opts: AcquireOptions, waiter: Waiter) -> Request:
        self.check_open()
        r = Request(FrameType.ACQUIRE, waiter, opts.key)
        r.opts = opts
        return self._enqueue(r, opts.body)

    def abandon(self, r: Request) -> None:
        """The caller of the acquire r has gone (a timeout, a cancel): one
        never sent is forgotten, another cancelled on the server."""
        if self.inflight.get(r.id) is not r:
            return  # answered: a grant that crossed is the driver's to release
        if not r.sent:
            del self.inflight[r.id]
            return
        r.abandoned = True
        c = Request(FrameType.CANCEL)
        c.target = r.id
        self._enqueue(c, encode_fields([u64(Tag.TARGET, r.id)]))

    def _send_release(self, key: bytes, token: int, waiter: Waiter | None = None, lapse: bool = False) -> Request:
        r = Request(FrameType.RELEASE, waiter, key)
        r.token = token
        fields = [(Tag.KEY, key), u64(Tag.TOKEN, token)]
        if lapse:  # given up at the client's end of its lease: the server keeps the lock-delay
            fields.append(u8(Tag.LAPSE, 1))
        return self._enqueue(r, encode_fields(fields))

    def release(self, h: HandleBase, waiter: Waiter | None) -> Request | None:
        """Release the lock h: it ends here at once and RELEASE goes to the
        server; None when there is nothing to send (released or orphaned
        before). Raises the cause of a lost lock, or the session's end."""
        if h._state == LOST:
            assert h._cause is not None
            raise h._cause
        if h._state != HELD:
            return None
        self._drop(h, RELEASED)
        if self.error is not None:
            return None  # the session's end released it, or will end it on the server
        self._remember_released(h.fencing_token)
        return self._send_release(h.key, h.fencing_token, waiter)

    def release_token(self, key: bytes, token: int, waiter: Waiter) -> Request | None:
        """Release the session's lock of key by its token. None when there is
        nothing to send: a token released here lately."""
        check_token(token)
        self.check_open()
        hold = self.holds.get(token)
        if hold is not None and hold.key == key and hold.handles:
            return self.release(hold.handles[-1], waiter)
        if token in self.released and token not in self.letgo:
            return None
        self.letgo.discard(token)
        return self._send_release(key, token, waiter)  # remembered once the server has released it

    def _remember_released(self, token: int) -> None:
        self.released[token] = None  # in the order released: the oldest is forgotten first
        if len(self.released) > _RELEASED_MEMORY:
            self.released.popitem(last=False)

    def renew(self, h: HandleBase, lease: float | None, waiter: Waiter) -> Request:
        check_seconds("lease", lease)
        if h._state == LOST:
            assert h._cause is not None
            raise h._cause
        if h._state != HELD:
            raise LockingCenterError(f"renew {h.key!r} token {h.fencing_token}: the lock was {h._state}")
        self.check_open()
        r = Request(FrameType.RENEW, waiter, h.key)
        r.token, r.handle = h.fencing_token, h
        fields: list[Field] = [(Tag.KEY, h.key), u64(Tag.TOKEN, h.fencing_token)]
        if lease:
            fields.append(u32(Tag.LEASE_MS, millis(lease)))
        return self._enqueue(r, encode_fields(fields))

    def orphan(self, h: HandleBase) -> None:
        if h._state == HELD:
            self.letgo.add(h.fencing_token)
            self._drop(h, ORPHANED)

    def describe(self, key: bytes, waiter: Waiter) -> Request:
        self.check_open()
        return self._enqueue(Request(FrameType.DESCRIBE, waiter, key), encode_fields([(Tag.KEY, key)]))

    def close(self, waiter: Waiter) -> Request:
        return self._enqueue(Request(FrameType.CLOSE, waiter))

    # --- locks ---

    def _grant(self, r: Request, token: int, left_ms: int | None, start: float) -> HandleBase:
        hold = self.holds.get(token)
        if hold is None:
            hold = self.holds[token] = Hold(r.key, token)
        h = self.make_handle(r.key, token)
        h._hold = hold
        hold.handles.append(h)
        if left_ms is not None:
            self._set_lease(hold, start, left_ms)
        return h

    def _set_lease(self, hold: Hold, start: float, left_ms: int) -> None:
        left = left_ms / 1000
        hold.gen += 1
        hold.lease_end = start + left - margin(left)
        heapq.heappush(self.leases, (hold.lease_end, hold.gen, hold.token))
        self.wake()

    def _measured_at(self, sent_at: float) -> float:
        """The earliest time the server can have measured a left_ms that
        arrives now, in the answer to a request sent at sent_at."""
        return max(now() - DELIVERY_BOUND, sent_at)

    def _drop(self, h: HandleBase, state: str, cause: LockLostError | None = None) -> None:
        hold = h._hold
        if hold is not None:
            hold.handles.remove(h)
            if not hold.handles:
                self._forget(hold)
        h._end(state, cause)

    def _forget(self, hold: Hold) -> None:
        if self.holds.get(hold.token) is hold:
            del self.holds[hold.token]
        hold.gen += 1  # its lease entries are stale

    def _end_hold(self, hold: Hold, reason: LostReason, why: str, state: str = LOST) -> None:
        self._forget(hold)
        for h in hold.handles:
            h._end(state, lost_error(hold.key, hold.token, reason, why) if state == LOST else None)
        hold.handles = []

    # --- frames from the server ---

    def handle(self, f: Frame) -> bool:
        """Apply a frame of the attached connection. Returns whether to go
        on reading it (False after a GOODBYE)."""
        t = f.type
        if t in (FrameType.GRANTED, FrameType.OK, FrameType.REFUSED, FrameType.INFO):
            if self.ping is not None and f.id == self.ping.id:
                self._ack(self.ping.sent_at)
                self.ping = None
                return True
            if self.replay is not None and f.id == self.replay.sync_id:
                self._reconcile()
                return True
            r = self.inflight.get(f.id)
            if r is None:
                return True
            code = f.uint(Tag.CODE) or 0
            if t == FrameType.REFUSED and code == Code.DUPLICATE and r.resent:
                return True  # the first sending arrived after all; its own answer comes
            self._ack(r.sent_at)
            del self.inflight[f.id]
            self._answer(r, f, code)
        elif t == FrameType.LOST:
            self._lost(f)
        elif t == FrameType.GOODBYE:
            code = f.uint(Tag.CODE) or 0
            err = goodbye_error(f, f"session {self.session_id}")
            if code in (Code.SESSION_EXPIRED, Code.UNKNOWN_SESSION):
                self.end(err, LostReason.SESSION_EXPIRED, "its session expired")
            elif code == Code.PROTOCOL_ERROR:
                self.end(err, LostReason.OTHER, "the server ended the session's connection for a protocol error")
            elif code == Code.NOT_LEADER:
                self.follow(f.text(Tag.LEADER))
            return False
        return True

    def _ack(self, sent_at: float) -> None:
        if sent_at > self.last_ack:
            self.last_ack = sent_at

    def _answer(self, r: Request, f: Frame, code: int) -> None:
        w = r.waiter
        msg = f.text(Tag.MESSAGE) if f.type == FrameType.REFUSED else ""
        if r.type == FrameType.ACQUIRE:
            if f.type == FrameType.GRANTED:
                self._granted(r, f)
            elif f.type == FrameType.REFUSED and not _gone(r):
                if code == Code.BUSY:
                    _deliver(w, BUSY)
                else:
                    _deliver(w, exc=server_error(f"acquire {r.key!r}", code, msg, r.key))
        elif r.type in (FrameType.RELEASE, FrameType.RENEW):
            if f.type == FrameType.REFUSED:
                what = f"{'release' if r.type == FrameType.RELEASE else 'renew'} {r.key!r} token {r.token}"
                err = server_error(what, code, msg, r.key)
                if isinstance(err, StaleTokenError):
                    err.token = r.token
                    hold = self.holds.get(r.token)
                    if hold is not None:
                        self._end_hold(hold, LostReason.STALE_TOKEN, "the server no longer holds it")
                _deliver(w, exc=err)
            elif r.type == FrameType.RENEW:
                left = f.uint(Tag.LEFT_MS)
                h = r.handle
                if h is not None and h._hold is not None and left is not None:
                    self._set_lease(h._hold, self._measured_at(r.sent_at), left)
                _deliver(w, None if h is None else h.lease_deadline)
            else:
                self._remember_released(r.token)
                _deliver(w)
        elif r.type == FrameType.DESCRIBE:
            if f.type == FrameType.INFO:
                _deliver(w, parse_info(f))
            else:
                _deliver(w, exc=server_error(f"describe {r.key!r}", code, msg, r.key))
        elif r.type == FrameType.CLOSE:
            if f.type == FrameType.REFUSED:
                _deliver(w, exc=server_error("close", code, msg))
            else:
                _deliver(w)

    def _granted(self, r: Request, f: Frame) -> None:
        token = f.uint(Tag.TOKEN) or 0
        if _gone(r):
            self._send_release(r.key, token)  # its caller gave up: released, best effort
            return
        left, start = f.uint(Tag.LEFT_MS), self._measured_at(r.sent_at)
        rs = self.replay
        if rs is not None:
            if r.id > rs.applied or r.id in rs.parked:
                rs.fresh.add(token)
            else:  # a grant from before the resume
                listed = rs.held.get(token)
                if listed is None:
                    _deliver(r.waiter, exc=AnswerLostError(
                        f"acquire {r.key!r}: granted (token {token}), then lost while the connection was down"))
                    return
                left, start = listed[2], rs.sent_at
        _deliver(r.waiter, self._grant(r, token, left, start))

    def _lost(self, f: Frame) -> None:
        token, code = f.uint(Tag.TOKEN) or 0, f.uint(Tag.CODE) or 0
        self.letgo.discard(token)
        reason = _LOST_REASONS.get(code, LostReason.OTHER)
        hold = self.holds.get(token)
        if hold is not None:
            self._end_hold(hold, reason, f"the server ended it: {code_name(code)}")
            return
        r = self.inflight.get(f.id)
        if r is not None and r.type == FrameType.ACQUIRE and self.replay is not None and r.id <= self.replay.applied:
            del self.inflight[r.id]  # its GRANTED went with the dropped connection
            if not _gone(r):
                _deliver(r.waiter, exc=AnswerLostError(
                    f"acquire {r.key!r}: granted (token {token}), then lost: {code_name(code)}"))

    def _reconcile(self) -> None:
        """Settle the session after a resume, once every frame the server
        owed it has come: a lock not listed was lost while away; an acquire
        the server applied whose answer never came is granted if listed,
        else failed; what the server holds that nobody here holds (a grant
        whose answer went with the connection) is released, unless
        orphaned."""
        rs = self.replay
        assert rs is not None
        self.replay = None
        for token, hold in list(self.holds.items()):
            listed = rs.held.get(token)
            if listed is not None:
                if listed[2] is not None:
                    self._set_lease(hold, rs.sent_at, listed[2])
            elif token not in rs.fresh:
                self._end_hold(hold, LostReason.WHILE_AWAY, "lost while the connection was down")
        unanswered: list[Request] = []
        for rid, r in list(self.inflight.items()):
            if rid > rs.applied or r.type == FrameType.DESCRIBE or (r.type == FrameType.ACQUIRE and rid in rs.parked):
                continue  # sent again, or still waiting: answered later
            del self.inflight[rid]
            token = rs.by_request.get(rid)
            if r.type == FrameType.ACQUIRE and not _gone(r) and token is not None:
                self._grant_listed(r, token, rs)
            else:
                unanswered.append(r)
        # What the server holds beyond the locks here and the releases on
        # their way.
        extra = {t: count - len(self.holds[t].handles) if t in self.holds else count
                 for t, (_, count, _) in rs.held.items()}  # fmt: skip
        for r in self.inflight.values():
            if r.type == FrameType.RELEASE and r.token in extra:
                extra[r.token] -= 1
        for r in unanswered:
            if r.type == FrameType.ACQUIRE:
                if _gone(r):
                    continue
                token = self._reentered(rs, extra, r)
                if token is not None:
                    extra[token] -= 1
                    self._grant_listed(r, token, rs)
                else:
                    _deliver(r.waiter, exc=AnswerLostError(
                        f"acquire {r.key!r}: the answer was lost with the connection, and the resumed session "
                        "neither holds the key for it nor waits for it"))
            elif r.type == FrameType.RENEW:
                if r.token in rs.held:
                    _deliver(r.waiter, None if r.handle is None else r.handle.lease_deadline)
                else:
                    _deliver(r.waiter, exc=StaleTokenError(
                        f"renew {r.key!r} token {r.token}: lost while the connection was down",
                        LostReason.WHILE_AWAY, r.key, r.token))
            else:
                _deliver(r.waiter)  # a release, cancel or close the server applied
        for token, (key, _, _) in rs.held.items():
            if token not in self.letgo:
                for _ in range(max(extra.get(token, 0), 0)):
                    self._send_release(key, token)
        self.letgo &= set(rs.held)

    @staticmethod
    def _reentered(rs: _Replay, extra: dict[int, int], r: Request) -> int | None:
        if r.opts is None or not r.opts.reentrant:
            return None
        for token, (key, _, _) in rs.held.items():
            if key == r.key and extra.get(token, 0) > 0:
                return token
        return None

    def _grant_listed(self, r: Request, token: int, rs: _Replay) -> None:
        _deliver(r.waiter, self._grant(r, token, rs.held[token][2], rs.sent_at))

    # --- time ---

    def _silence(self) -> float:
        return silence(self.keepalive)

    def _lost_deadline(self) -> float:
        return self.last_ack + self.ttl - margin(self.ttl)

    def tick(self) -> Any:
        """Do what is due: end leases, end the session when no answer came
        for its TTL less the margin, ping an idle connection, and give up a
        silent one. Returns the connection to close, if any."""
        if self.error is not None:
            return None
        t = now()
        while self.leases and self.leases[0][0] <= t:
            _, gen, token = heapq.heappop(self.leases)
            hold = self.holds.get(token)
            if hold is not None and hold.gen == gen:
                self._end_hold(hold, LostReason.LEASE_EXPIRED, "its lease ran out")
                # Before anything sent later, best effort; with lapse the server ends it
                # as its lease would, whatever the count, and keeps the key's lock-delay
                # (stale_token when its lease ended first; unsupported from a server
                # older than lapse, whose lease then ends it).
                self._send_release(hold.key, token, lapse=True)
        if t >= self._lost_deadline():
            why = f"no answer from the server within the session's TTL ({self.ttl:g} s) less {margin(self.ttl):g} s"
            self.farewell = True
            # The locks held, and those whose RELEASE is still unanswered (a
            # lease given up here, a release under way): the server may hold any.
            parting = {token: h.key for token, h in self.holds.items() if token not in self.letgo}
            parting.update((r.token, r.key) for r in self.inflight.values() if r.type == FrameType.RELEASE)
            self.parting = [(parting[token], token) for token in sorted(parting)]
            self.end(SessionExpiredError(f"session {self.session_id}: {why}"), LostReason.SESSION_EXPIRED, why)
            return None
        conn = self.conn
        if conn is None:
            return None
        if t >= self.heard + self._silence():
            self.detach(conn)
            self.demote(self.conn_addr)
            return conn
        if self.ping is None and t >= self.last_ack + self.keepalive:
            self.ping = self._enqueue(Request(FrameType.PING))
        return None

    def next_wakeup(self) -> float:
        """When ``tick`` has something to do next, at the latest."""
        if self.error is not None:
            return now() + 3600
        nxt = self._lost_deadline()
        if self.leases:
            nxt = min(nxt, self.leases[0][0])
        if self.conn is not None:
            nxt = min(nxt, self.heard + self._silence())
            if self.ping is None:
                nxt = min(nxt, self.last_ack + self.keepalive)
        return nxt

    # --- the driver's loop ---

    def open_attempts(self) -> int:
        """How many attempts opening the session makes at most: each address,
        and the leaders they name."""
        return 2 * len(self.addresses) + 1

    def open_failed(self, addr: str, err: BaseException) -> bool:
        """An attempt to open the session at addr failed with err. Returns
        whether to try again (another address, or the leader it named)."""
        return self.failed_at(addr, err) and not self.went_round()

    def next_step(self, closing: bool) -> tuple[str, float]:
        """What the driver's loop does after tick: (END, 0) once the session
        has ended; (WAIT, s): nothing for s seconds, or until woken, while a
        connection is attached or the session is closing; (RESUME, s): an
        attempt to resume in s seconds (at once to a leader a node named,
        else after a backoff from the second attempt)."""
        if self.error is not None:
            return END, 0.0
        pause = max(self.next_wakeup() - now(), 0.0)
        if self.conn is not None or closing:
            self._attempt = self._hops = 0
            return WAIT, pause
        if self.leader and self._hops <= len(self.addresses):
            self._attempt, self._hops = 0, self._hops + 1
        else:
            self._hops = 0
        delay = min(self.backoff(self._attempt), pause) if self._attempt else 0.0
        self._attempt += 1
        return RESUME, delay

    def start_resume(self, then: int = FrameType.PING) -> tuple[bytes, int, str, float | None, float]:
        """What an attempt to resume sends and where: the bytes, the id of
        the frame after the RESUME, the address, the bound of the attempt
        and when it starts."""
        payload, then_id = self.resume_frames(then)
        return payload, then_id, self.target(), self.handshake_bound(), now()

    def start_farewell(self) -> tuple[bytes, int, str, float | None]:
        """What an attempt of the farewell sends and where: the bytes (a
        RESUME, a RELEASE with lapse of each lock the session held when the
        client counted it expired or whose RELEASE was still unanswered then,
        in the order of their tokens, and a CLOSE), the CLOSE's id, the
        address and the bound of the attempt. The RELEASEs end those locks
        as their leases running out would, so that each key keeps the
        lock-delay its acquire asked for; a CLOSE alone would free them at
        once, while this process may still be writing. A server older than
        lapse refuses them unsupported, and its CLOSE then frees the locks
        without the delay."""
        payload, close_id = self.resume_frames(FrameType.CLOSE, self.parting)
        return payload, close_id, self.target(), self.handshake_bound()

    def resume_failed(self, addr: str, err: LockingCenterError) -> None:
        """An attempt to resume at addr failed with err: the next goes
        elsewhere, and a refusal no node would take back ends the session."""
        self.failed_at(addr, err)
        if is_final(err):
            reason = LostReason.SESSION_EXPIRED if isinstance(err, SessionExpiredError) else LostReason.OTHER
            self.end(err, reason, "the session ended on the server while the client was away")

    def farewell_until(self) -> float:
        """Until when the client tries to close on the server a session it
        counted expired: three TTLs, at least 10 s."""
        return now() + max(3 * self.ttl, 10.0)

    def farewell_answer(self, frames: Sequence[Frame], close_id: int) -> bool | None:
        """What the frames on the connection of a farewell (RESUME,
        RELEASEs and CLOSE) say: True once the server is done with the
        session (the CLOSE answered, or a refusal for good), False when this
        attempt failed, None to read on. The RELEASEs' answers, OK or a
        refusal, are passed over."""
        for f in frames:
            if f.type == FrameType.OK and f.id == close_id:
                return True
            if f.type == FrameType.GOODBYE:
                if f.uint(Tag.CODE) == Code.NOT_LEADER:
                    self.follow(f.text(Tag.LEADER))
                return is_final(goodbye_error(f, ""))
        return None

    def backoff(self, attempt: int) -> float:
        """The wait before reconnect attempt n (from 1): 50 ms doubling, at
        most a quarter of the keepalive and 500 ms, jittered."""
        d = min(0.05 * 2 ** min(attempt - 1, 10), max(self.keepalive / 4, 0.05), 0.5)
        return d / 2 + random.random() * d / 2

    # --- the end ---

    def end(
        self, err: LockingCenterError, reason: LostReason | None, why: str = "", released: bool = False
    ) -> None:
        """End the session for err: every lock lost for reason (or released,
        with ``released``), every request failed with err."""
        if self.error is not None:
            return
        self.error = err
        for hold in list(self.holds.values()):
            self._end_hold(hold, reason or LostReason.OTHER, why, RELEASED if released else LOST)
        for r in self.inflight.values():
            if r.abandoned:
                continue
            if released and r.type in (FrameType.RELEASE, FrameType.CLOSE):
                _deliver(r.waiter)
            else:
                _deliver(r.waiter, exc=copy_error(err))
        self.inflight.clear()
        self.ping, self.replay = None, None
        self.wake()


def check_credential(credential: str | bytes | None) -> bytes:
    if credential is None:
        return b""
    c = credential.encode("utf-8") if isinstance(credential, str) else bytes(credential)
    if len(c) > MAX_CREDENTIAL_LEN:
        raise InvalidOptionError(f"credential must be at most {MAX_CREDENTIAL_LEN} bytes, got {len(c)}")
    return c

