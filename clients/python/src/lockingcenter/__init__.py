"""Python client of Locking-Center, a lock server that grants named keys to
one holder at a time, in order of arrival.

Sessions (the session protocol): one connection carries every lock of a
session; each lock has a fencing token, may have a lease, and ends with the
session when its process dies. Session is for threads, AsyncSession for
asyncio, with the same methods:

    from lockingcenter import Session

    with Session("localhost:22119", name="billing-worker", ttl=10) as session:
        with session.lock("orders/batch-7", lease=30) as lk:
            write(data, fencing_token=lk.fencing_token)

Client speaks v1, which any Locking-Center server takes: every call opens
one TCP connection, sends one request, reads the one-byte answer and
closes. Its lock is not tied to the connection: it stays held until
``unlock`` or a reset, even after the process exits.

    from lockingcenter import Client

    client = Client("localhost:22119", source="billing-worker")
    with client.locked("orders/batch-7"):
        ...  # only one holder at a time gets here

Standard library only.
"""

from ._aio import AsyncLock, AsyncSession
from ._client import Client
from ._core import DELIVERY_BOUND, HolderInfo, KeyInfo
from ._env import env_address, env_options, tls_context
from ._errors import (
    AnswerLostError,
    CancelledError,
    CommunicationError,
    DeadlockError,
    ForbiddenError,
    InvalidKeyError,
    InvalidOptionError,
    InvalidSourceError,
    LimitMismatchError,
    LockingCenterError,
    LockLostError,
    LockTimeoutError,
    LostReason,
    NotLeaderError,
    OverLimitError,
    ProtocolError,
    RateLimitedError,
    ReadTimeoutError,
    RefusedError,
    SessionClosedError,
    SessionExpiredError,
    StaleTokenError,
    UnauthenticatedError,
    UpgradeError,
    WithdrawnError,
)
from ._frames import (
    PREFACE,
    Code,
    Frame,
    FrameDecoder,
    FrameType,
    Tag,
    decode_frame,
    encode_frame,
)
from ._session import Lock, Session
from ._protocol import (
    MAX_KEY_LEN,
    MAX_SOURCE_LEN,
    Action,
    Result,
    encode_request,
    interpret_answer,
)

__all__ = [
    "DELIVERY_BOUND",
    "MAX_KEY_LEN",
    "MAX_SOURCE_LEN",
    "PREFACE",
    "Action",
    "AnswerLostError",
    "AsyncLock",
    "AsyncSession",
    "CancelledError",
    "Client",
    "Code",
    "CommunicationError",
    "DeadlockError",
    "ForbiddenError",
    "Frame",
    "FrameDecoder",
    "FrameType",
    "HolderInfo",
    "InvalidKeyError",
    "InvalidOptionError",
    "InvalidSourceError",
    "KeyInfo",
    "LimitMismatchError",
    "Lock",
    "LockLostError",
    "LockTimeoutError",
    "LockingCenterError",
    "LostReason",
    "NotLeaderError",
    "OverLimitError",
    "ProtocolError",
    "RateLimitedError",
    "ReadTimeoutError",
    "RefusedError",
    "Result",
    "Session",
    "SessionClosedError",
    "SessionExpiredError",
    "StaleTokenError",
    "Tag",
    "UnauthenticatedError",
    "UpgradeError",
    "WithdrawnError",
    "decode_frame",
    "encode_frame",
    "encode_request",
    "env_address",
    "env_options",
    "interpret_answer",
    "tls_context",
]
