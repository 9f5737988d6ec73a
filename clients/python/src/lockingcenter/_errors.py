"""Exceptions of the client. Every failure is a LockingCenterError; a lost
try_lock is not a failure and raises nothing."""


class LockingCenterError(Exception):
    """Base class of every failure the client raises."""


class InvalidKeyError(LockingCenterError, ValueError):
    """The key is empty or longer than 127 bytes. Nothing was sent."""


class InvalidSourceError(LockingCenterError, ValueError):
    """The source is longer than 127 bytes. Nothing was sent."""


class RefusedError(LockingCenterError):
    """The server answered '-': the request was malformed, could not be made
    durable, or was withdrawn by a reset of its source."""


class ProtocolError(LockingCenterError):
    """The server answered a byte the protocol does not define for the
    request."""


class CommunicationError(LockingCenterError):
    """The request could not be delivered or its answer not read: connection
    refused, reset or closed early. The OSError is the ``__cause__``."""


class LockTimeoutError(CommunicationError, TimeoutError):
    """The timeout of a lock or wait passed; the request was withdrawn."""


class ReadTimeoutError(CommunicationError, TimeoutError):
    """A call that does not wait for a key got no answer within the client's
    ``read_timeout``. The connection is closed; whether the server applied
    the request is unknown."""


class CancelledError(CommunicationError):
    """The client was closed while the call was in flight, or before it; a
    parked lock request was withdrawn."""
