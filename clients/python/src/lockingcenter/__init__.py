"""Python client of Locking-Center, a lock server that grants named keys to
one holder at a time, in order of arrival.

Every call opens one TCP connection to the mutex port, sends one request,
reads the one-byte answer and closes. A lock is not tied to the connection:
it stays held until ``unlock`` or a reset, even after the process exits.

    from lockingcenter import Client

    client = Client("localhost:22119", source="billing-worker")
    with client.locked("orders/batch-7"):
        ...  # only one holder at a time gets here

Standard library only.
"""

from ._client import Client
from ._errors import (
    CancelledError,
    CommunicationError,
    InvalidKeyError,
    InvalidSourceError,
    LockingCenterError,
    LockTimeoutError,
    ProtocolError,
    ReadTimeoutError,
    RefusedError,
)
from ._protocol import (
    MAX_KEY_LEN,
    MAX_SOURCE_LEN,
    Action,
    Result,
    encode_request,
    interpret_answer,
)

__all__ = [
    "Action",
    "CancelledError",
    "Client",
    "CommunicationError",
    "InvalidKeyError",
    "InvalidSourceError",
    "LockTimeoutError",
    "LockingCenterError",
    "MAX_KEY_LEN",
    "MAX_SOURCE_LEN",
    "ProtocolError",
    "ReadTimeoutError",
    "RefusedError",
    "Result",
    "encode_request",
    "interpret_answer",
]
