"""A one-thread stand-in for the mutex port, for tests: it reads one whole
request per connection and answers with a fixed byte, or never answers."""

from __future__ import annotations

import socket
import threading


def request_length(buf: bytes) -> int | None:
    """Length of the request at the start of buf, or None if incomplete."""
    if not buf:
        return None
    n, fields = 1, {1: 2, 2: 1, 3: 1, 4: 1, 5: 2}.get(buf[0], 0)
    for _ in range(fields):
        if len(buf) <= n:
            return None
        n += 1 + buf[n]
    return n if len(buf) >= n else None


class FakeServer:
    """Answers ``answer`` to every request; with answer None it keeps the
    connection open without answering until the peer closes it. A dict
    gives the answer per action byte (missing: None). With ``hold``, each
    answer waits until that event is set."""

    def __init__(self, answer: bytes | dict[int, bytes] | None, hold: threading.Event | None = None) -> None:
        self.answer = answer
        self.hold = hold
        self.requests: list[bytes] = []
        self.received = threading.Event()  # a whole request arrived
        self.peer_closed = threading.Event()  # an unanswered peer went away
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.address = "127.0.0.1:%d" % self._sock.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            with conn:
                buf = b""
                while request_length(buf) is None:
                    chunk = conn.recv(512)
                    if not chunk:
                        break
                    buf += chunk
                self.requests.append(buf)
                self.received.set()
                answer = self.answer.get(buf[0]) if isinstance(self.answer, dict) and buf else self.answer
                if answer is not None:
                    if self.hold is not None:
                        self.hold.wait()
                    conn.sendall(answer)
                    continue
                while conn.recv(512):
                    pass
                self.peer_closed.set()

    def close(self) -> None:
        try:
            self._sock.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept
        except OSError:
            pass
        self._sock.close()
        self._thread.join(timeout=10)

    def __enter__(self) -> FakeServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def dead_address() -> str:
    """A 127.0.0.1 address where nothing listens."""
    with socket.create_server(("127.0.0.1", 0)) as s:
        return "127.0.0.1:%d" % s.getsockname()[1]
