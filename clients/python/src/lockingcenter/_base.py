"""What Session and AsyncSession share: their options, their Core, what
they tell about the session, and the checking of an acquire's options."""

from __future__ import annotations

import ssl as _ssl
from collections.abc import Sequence
from typing import TypedDict

from ._client import DEFAULT_CONNECT_TIMEOUT, DEFAULT_READ_TIMEOUT, BytesLike, _check_source
from ._core import AcquireOptions, Core, HandleBase, acquire_options, check_credential, parse_addresses
from ._errors import InvalidOptionError, LockingCenterError, SessionClosedError

__all__ = ["LockOptions", "SessionBase"]


class LockOptions(TypedDict, total=False):
    """The options of acquire, try_lock and lock (see Session.acquire)."""

    lease: float | None
    lock_delay: float | None
    shared: bool
    limit: int | None
    priority: int
    reentrant: bool
    owner: BytesLike | None
    note: str | bytes | None


class SessionBase:
    """Session and AsyncSession without their I/O."""

    def __init__(
        self,
        address: str | Sequence[str],
        *,
        name: BytesLike | None = None,
        ttl: float | None = None,
        credential: str | bytes | None = None,
        ssl: _ssl.SSLContext | None = None,
        server_hostname: str | None = None,
        connect_timeout: float | None = DEFAULT_CONNECT_TIMEOUT,
        read_timeout: float | None = DEFAULT_READ_TIMEOUT,
    ) -> None:
        self._setup()
        self._addresses = parse_addresses(address)
        if ttl is not None and ttl <= 0:
            raise InvalidOptionError(f"ttl must be above 0 seconds, got {ttl}")
        self._ssl = ssl
        self._server_hostname = server_hostname
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self._core = Core(
            list(self._addresses), _check_source(name or b""), ttl, check_credential(credential),
            self._new_lock, self._wake,
        )  # fmt: skip
        self._state = "new"  # new, open, closed

    def _setup(self) -> None:
        """Make what the driver needs before the Core: its locks, events."""

    def _new_lock(self, key: bytes, token: int) -> HandleBase:
        raise NotImplementedError

    def _wake(self) -> None:
        raise NotImplementedError

    def _default_owner(self) -> str:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._core.session_id} at {','.join(self._addresses)} {self._state}>"

    @property
    def session_id(self) -> int:
        """The session's id on the server (0 before open)."""
        return self._core.session_id

    @property
    def ttl(self) -> float:
        """The TTL the server granted, seconds."""
        return self._core.ttl

    @property
    def keepalive(self) -> float:
        """How often the session pings an idle connection, seconds."""
        return self._core.keepalive

    @property
    def server(self) -> str:
        """The server's identity, as its WELCOME named it."""
        return self._core.server

    @property
    def address(self) -> str:
        """The address of the attached connection; "" while there is none."""
        core = self._core
        return core.conn_addr if core.conn is not None else ""

    @property
    def error(self) -> LockingCenterError | None:
        """None while the session lives, then why it ended."""
        return self._core.error

    def _to_open(self) -> bool:
        """Whether open() has a session to open: False when it is open
        already. Raises SessionClosedError after close()."""
        if self._state == "closed":
            raise SessionClosedError("the session is closed")
        return self._state == "new"

    def _check_open(self) -> None:
        if self._state != "open":
            raise SessionClosedError("the session is not open" if self._state == "new" else "the session is closed")

    def _options(self, key: BytesLike, wait: float | None, options: LockOptions) -> AcquireOptions:
        """The checked options of an acquire (``wait`` 0: a try). The owner
        defaults to the calling thread or task."""
        if options.get("owner") is None:
            options["owner"] = self._default_owner()
        return acquire_options(key, wait=wait, **options)
