"""The client: one TCP connection per call."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from typing import Union

from ._errors import (
    CancelledError,
    CommunicationError,
    InvalidKeyError,
    InvalidSourceError,
    LockTimeoutError,
    ProtocolError,
    ReadTimeoutError,
    RefusedError,
)
from ._protocol import (
    ANSWER_FAILED,
    MAX_KEY_LEN,
    MAX_SOURCE_LEN,
    Action,
    Result,
    encode_request,
    interpret_answer,
)

#: A key or a source: bytes as they are, or text sent as UTF-8.
BytesLike = Union[str, bytes, bytearray, memoryview]

DEFAULT_CONNECT_TIMEOUT = 5.0
DEFAULT_READ_TIMEOUT = 10.0


def _to_bytes(value: BytesLike, what: str) -> bytes:
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"{what} must be str or bytes, not {type(value).__name__}")


def _check_key(key: BytesLike) -> bytes:
    b = _to_bytes(key, "key")
    if not 1 <= len(b) <= MAX_KEY_LEN:
        raise InvalidKeyError(f"key must be 1 to {MAX_KEY_LEN} bytes, got {len(b)}: {b!r}")
    return b


def _check_source(source: BytesLike) -> bytes:
    b = _to_bytes(source, "source")
    if len(b) > MAX_SOURCE_LEN:
        raise InvalidSourceError(f"source must be at most {MAX_SOURCE_LEN} bytes, got {len(b)}")
    return b


def _split_address(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"address must be host:port, got {address!r}")
    return host.strip("[]"), int(port)


class Client:
    """A client of the mutex port at ``address`` ("host:port").

    ``source`` names the owner of the locks this client takes (at most 127
    bytes, str as UTF-8); reset_by_source matches it. None or empty lets the
    server use the client's IP address. ``connect_timeout`` bounds each TCP
    connect in seconds; None waits as long as the system does.
    ``read_timeout`` bounds, in seconds from the connect to the answer, every
    call that does not wait for a key (try_lock, unlock, reset_by_key,
    reset_by_source, and the release of wait); one that runs out raises
    ReadTimeoutError. None leaves them unbounded. lock, and wait while it
    waits for the key, never have a read timeout.

    A Client holds no connection between calls and is safe to share between
    threads. ``close`` (or leaving a ``with Client(...)`` block) aborts the
    calls in flight: a parked lock is withdrawn and raises CancelledError.

    Raises ValueError for a malformed address, InvalidSourceError for a long
    source.
    """

    def __init__(
        self,
        address: str,
        source: BytesLike | None = None,
        *,
        connect_timeout: float | None = DEFAULT_CONNECT_TIMEOUT,
        read_timeout: float | None = DEFAULT_READ_TIMEOUT,
    ) -> None:
        self._host, self._port = _split_address(address)
        self.address = address
        self.source = _check_source(source or b"")
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self._mu = threading.Lock()
        self._inflight: set[socket.socket] = set()
        self._closed = False

    def __repr__(self) -> str:
        return f"Client({self.address!r}, source={self.source!r})"

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def lock(self, key: BytesLike, timeout: float | None = None) -> None:
        """Block until ``key`` is granted to this client.

        With ``timeout`` (seconds) the request is withdrawn when it has not
        been granted in time, and LockTimeoutError is raised; None waits
        however long it takes.

        Raises InvalidKeyError, RefusedError (e.g. withdrawn by a reset of
        the source), LockTimeoutError, CancelledError, CommunicationError.
        """
        self._call(Action.LOCK, _check_key(key), self.source, timeout)

    def try_lock(self, key: BytesLike) -> bool:
        """Take ``key`` only if it is free now. Returns True when this client
        now holds it, False when another holder has it. Raises as lock, and
        ReadTimeoutError when no answer comes within the read timeout."""
        return self._call(Action.TRY_LOCK, _check_key(key), self.source, None) is Result.OK

    def unlock(self, key: BytesLike) -> None:
        """Release ``key``, whoever holds it; releasing a free key succeeds."""
        self._call(Action.UNLOCK, _check_key(key), b"", None)

    def wait(self, key: BytesLike, timeout: float | None = None) -> None:
        """Block until ``key`` is free, and return holding nothing (the key is
        taken and released at once). ``timeout`` as for lock."""
        k = _check_key(key)
        self._call(Action.LOCK, k, self.source, timeout)
        self._call(Action.UNLOCK, k, b"", None)

    def reset_by_key(self, key: BytesLike) -> None:
        """Take ``key`` from its holder; the first parked request gets it."""
        self._call(Action.RESET_KEY, _check_key(key), b"", None)

    def reset_by_source(self, source: BytesLike) -> None:
        """Release every key ``source`` holds and withdraw its parked requests
        (their lock calls raise RefusedError)."""
        self._call(Action.RESET_SOURCE, b"", _check_source(source), None)

    @contextlib.contextmanager
    def locked(self, key: BytesLike, timeout: float | None = None) -> Iterator[None]:
        """Context manager: lock ``key`` on entry, unlock it on exit."""
        self.lock(key, timeout)
        try:
            yield
        finally:
            self.unlock(key)

    def close(self) -> None:
        """Abort the calls in flight and refuse later ones (CancelledError).
        Safe to call more than once."""
        with self._mu:
            self._closed = True
            socks = list(self._inflight)
        for s in socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def _call(self, action: Action, key: bytes, source: bytes, timeout: float | None) -> Result:
        deadline = None if timeout is None else time.monotonic() + timeout
        waits = action is Action.LOCK  # no read timeout: it waits for the key
        request = encode_request(action, key, source)
        name = f"{action.name.lower()} {key or source!r} at {self.address}"

        def time_left() -> float | None:
            if deadline is None:
                return None
            left = deadline - time.monotonic()
            if left <= 0:
                raise LockTimeoutError(f"{name}: not granted within {timeout} s")
            return left

        connect_timeout = self.connect_timeout
        left = time_left()
        if left is not None:
            connect_timeout = left if connect_timeout is None else min(connect_timeout, left)
        self._check_open(name)
        try:
            sock = socket.create_connection((self._host, self._port), timeout=connect_timeout)
        except TimeoutError as e:
            if left is not None and left == connect_timeout:
                raise LockTimeoutError(f"{name}: not granted within {timeout} s") from e
            raise CommunicationError(f"{name}: connect timed out") from e
        except OSError as e:
            raise CommunicationError(f"{name}: {e}") from e
        try:
            with self._mu:
                cancelled = self._closed
                self._inflight.add(sock)
            if cancelled:
                raise CancelledError(f"{name}: client closed")
            sock.settimeout(time_left() if waits else self.read_timeout)
            sock.sendall(request)
            answer = sock.recv(1)
        except LockTimeoutError:
            raise
        except TimeoutError as e:
            if not waits:
                raise ReadTimeoutError(f"{name}: no answer within {self.read_timeout} s") from e
            raise LockTimeoutError(f"{name}: not granted within {timeout} s") from e
        except OSError as e:
            self._check_open(name)
            raise CommunicationError(f"{name}: {e}") from e
        finally:
            with self._mu:
                self._inflight.discard(sock)
            sock.close()
        if not answer:
            self._check_open(name)
            raise CommunicationError(f"{name}: connection closed before the answer")
        result = interpret_answer(action, answer[0])
        if result is Result.FAILED:
            if answer[0] == ANSWER_FAILED:
                raise RefusedError(f"{name}: refused by the server")
            raise ProtocolError(f"{name}: unexpected answer {answer!r}")
        return result

    def _check_open(self, name: str) -> None:
        with self._mu:
            if self._closed:
                raise CancelledError(f"{name}: client closed")
