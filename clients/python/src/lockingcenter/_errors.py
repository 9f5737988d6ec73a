"""Exceptions of the client. Every failure is a LockingCenterError; a lost
try_lock is not a failure and raises nothing.

The session classes (Session, AsyncSession) raise the same family. An
error that reports what the server said carries its ``code`` (the
protocol's number, see Code) and ``server_message`` (its words); both are
None and "" when the error did not come from the server."""

from __future__ import annotations

import enum


class LockingCenterError(Exception):
    """Base class of every failure the client raises."""

    #: The protocol's code of the server's refusal or goodbye, when the
    #: error reports one (see Code); None otherwise.
    code: int | None = None
    #: The server's words with that code; "" when none.
    server_message: str = ""


class InvalidKeyError(LockingCenterError, ValueError):
    """The key is empty or longer than 127 bytes. Nothing was sent."""


class InvalidSourceError(LockingCenterError, ValueError):
    """The source is longer than 127 bytes. Nothing was sent."""


class RefusedError(LockingCenterError):
    """The server answered '-': the request was malformed, could not be made
    durable, or was withdrawn by a reset of its source. In a session: the
    server refused the request (REFUSED, or a GOODBYE to the HELLO) for a
    reason that the subclasses below do not name; ``code`` says which."""


class ProtocolError(LockingCenterError):
    """The server answered a byte the protocol does not define for the
    request. In a session: a frame from the server that breaks the
    protocol, or a GOODBYE protocol_error for the client's."""


class CommunicationError(LockingCenterError):
    """The request could not be delivered or its answer not read: connection
    refused, reset or closed early. The OSError is the ``__cause__``."""


class LockTimeoutError(CommunicationError, TimeoutError):
    """The timeout of a lock or wait passed; the request was withdrawn. In a
    session also the server's wait bound (``wait``, code timeout)."""


class ReadTimeoutError(CommunicationError, TimeoutError):
    """A call that does not wait for a key got no answer within the client's
    ``read_timeout``. The connection is closed; whether the server applied
    the request is unknown."""


class CancelledError(CommunicationError):
    """The client was closed while the call was in flight, or before it; a
    parked lock request was withdrawn. In a session: the acquire's
    ``cancel`` event was set; the request left the server's queue."""


# --- the session protocol ---


class InvalidOptionError(LockingCenterError, ValueError):
    """An option of an acquire or a session is out of range (an owner over
    127 bytes, a note that is not UTF-8 or is over 1 KiB, a lock-delay over
    60 s, a semaphore in shared mode, ...). Nothing was sent."""


class LostReason(enum.Enum):
    """Why a lock was lost (LockLostError.reason, Lock.cause.reason)."""

    LEASE_EXPIRED = "lease expired"  # its lease ran out before a renew
    SESSION_EXPIRED = "session expired"  # the session's TTL passed (on the server, or by the client's count)
    RESET = "reset"  # a reset took the key
    SESSION_CLOSED = "session closed"  # the session ended (closed) before the server could be told otherwise
    STALE_TOKEN = "stale token"  # the server answered that the session no longer holds it
    WHILE_AWAY = "lost while disconnected"  # a resumed session no longer listed it
    OTHER = "other"  # a code this client does not know


class LockLostError(LockingCenterError):
    """A lock ended without being released: ``reason`` says why (a
    LostReason), ``key`` and ``token`` which lock. A lock's ``cause`` is one
    of these once it is lost, and releasing a lost lock raises it."""

    def __init__(self, message: str, reason: LostReason = LostReason.OTHER, key: bytes = b"", token: int = 0) -> None:
        super().__init__(message)
        self.reason = reason
        self.key = key
        self.token = token


class StaleTokenError(LockLostError, RefusedError):
    """The server refused a release or renew: the token is not a holder of
    that key in this session now (lost, released, or never this key's).
    Nothing changed."""


class SessionExpiredError(LockingCenterError):
    """The session is over: the server expired it (its TTL passed without a
    frame) or no longer knows it, or the client had no answer for the TTL
    less a margin and ended it. Its locks are lost; open a new session."""


class SessionClosedError(LockingCenterError):
    """The session was closed (close(), or the server ended it), or was
    never opened."""


class NotLeaderError(CommunicationError):
    """Every address was tried and none leads the cluster (GOODBYE
    not_leader); the last one's words are the message."""


class AnswerLostError(CommunicationError):
    """The connection dropped before the answer to an acquire arrived, and
    the resumed session neither holds the key for it nor waits for it: it
    was refused, or granted and lost since."""


class UnauthenticatedError(RefusedError):
    """The server has authentication on and did not take the session's
    credential (none, an unknown token, or another principal's on a
    resume)."""


class ForbiddenError(RefusedError):
    """The credential's principal may not use that key (its prefixes), or
    the request needs an admin."""


class RateLimitedError(RefusedError):
    """The source sent more requests than the server's per-source rate
    allows; nothing changed. Try again later."""


class OverLimitError(RefusedError):
    """The source holds or has waiting as many locks as the server allows
    one source, or the server has as many connections as it allows;
    nothing changed."""


class DeadlockError(RefusedError):
    """Waiting would close a cycle of waits (sessions and owners); the
    request did not wait. Also a second acquire of a key that the same
    owner holds, without ``reentrant``."""


class LimitMismatchError(RefusedError):
    """The key is a semaphore of another limit than the acquire's (a plain
    lock counts as 1). ``limit`` is the key's limit as the server's message
    names it, None when it names none."""

    limit: int | None = None


class UpgradeError(RefusedError):
    """A shared holder of the key asked for it exclusively."""


class WithdrawnError(RefusedError):
    """A reset withdrew the waiting acquire."""
