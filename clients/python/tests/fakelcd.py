"""A scripted stand-in of lcd's session port for tests: each connection is
handed to a script (a function of a FakeConn) that runs in a thread of its
own and says what the server says."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable, Sequence

from lockingcenter import PREFACE, Frame, FrameDecoder, FrameType, Tag, encode_frame
from lockingcenter._frames import Field, u32, u64

SECRET = bytes(range(16))


def until(cond: Callable[[], object], limit: float = 10.0) -> None:
    """Wait until cond() is true; AssertionError after limit seconds."""
    deadline = time.monotonic() + limit
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.005)


class FakeConn:
    def __init__(self, sock: socket.socket, index: int) -> None:
        self.sock = sock
        self.index = index  # 0 for the server's first connection
        self.dec = FrameDecoder()
        self.frames: list[Frame] = []
        self.preface_read = False

    def read(self, timeout: float = 5.0) -> Frame:
        """The next frame from the client (after the preface). Raises
        TimeoutError, EOFError."""
        self.sock.settimeout(timeout)
        if not self.preface_read:
            got = b""
            while len(got) < 4:
                d = self.sock.recv(4 - len(got))
                if not d:
                    raise EOFError("closed before the preface")
                got += d
            assert got == PREFACE, got
            self.preface_read = True
        while not self.frames:
            d = self.sock.recv(65536)
            if not d:
                raise EOFError("the client closed")
            self.frames += self.dec.feed(d)
        return self.frames.pop(0)

    def expect(self, typ: int, timeout: float = 5.0) -> Frame:
        f = self.read(timeout)
        assert f.type == typ, f"got {f}, want type 0x{typ:02x}"
        return f

    def read_until(self, typ: int, timeout: float = 5.0) -> tuple[Frame, list[Frame]]:
        """Frames up to one of typ; returns it and those before it."""
        before = []
        while (f := self.read(timeout)).type != typ:
            before.append(f)
        return f, before

    def send(self, typ: int, id: int, fields: Sequence[Field] = ()) -> None:
        self.sock.sendall(encode_frame(typ, id, fields))

    def welcome(self, to: Frame, ttl_ms: int = 10000, keepalive_ms: int = 3334, session: int = 42,
                extra: Sequence[Field] = ()) -> None:  # fmt: skip
        self.send(FrameType.WELCOME, to.id, [u64(Tag.SESSION, session), (Tag.SECRET, SECRET),
                                             u32(Tag.TTL_MS, ttl_ms), u32(Tag.KEEPALIVE_MS, keepalive_ms),
                                             (Tag.SERVER, b"fake"), *extra])  # fmt: skip

    def granted(self, to: Frame, token: int, left_ms: int | None = None) -> None:
        fields = [(Tag.KEY, to.get(Tag.KEY) or b""), u64(Tag.TOKEN, token), u32(Tag.COUNT, 1)]
        if left_ms is not None:
            fields.append(u32(Tag.LEFT_MS, left_ms))
        self.send(FrameType.GRANTED, to.id, fields)

    def ok(self, to: Frame | int) -> None:
        self.send(FrameType.OK, to if isinstance(to, int) else to.id)

    def reset(self) -> None:
        """Close with a reset."""
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.sock.close()

    def close(self) -> None:
        self.sock.close()


def held_item(key: bytes, token: int, request: int, count: int = 1, left_ms: int | None = None) -> Field:
    fs: list[Field] = [(Tag.KEY, key), u64(Tag.TOKEN, token), u64(Tag.REQUEST, request), (Tag.MODE, b"\x00"),
                       u32(Tag.COUNT, count)]  # fmt: skip
    if left_ms is not None:
        fs.append(u32(Tag.LEFT_MS, left_ms))
    return (Tag.HELD, b"".join(struct.pack(">BH", t, len(v)) + v for t, v in fs))


def parked_item(key: bytes, request: int) -> Field:
    fs = [(Tag.KEY, key), u64(Tag.REQUEST, request)]
    return (Tag.PARKED, b"".join(struct.pack(">BH", t, len(v)) + v for t, v in fs))


class FakeLcd:
    """Listens on 127.0.0.1; runs script(conn) for each connection. Errors
    of a script are kept in ``errors``."""

    def __init__(self, script: Callable[[FakeConn], None]) -> None:
        self.script = script
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = "127.0.0.1:%d" % self.listener.getsockname()[1]
        self.errors: list[BaseException] = []
        self.count = 0
        self._threads: list[threading.Thread] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            conn = FakeConn(sock, self.count)
            self.count += 1
            t = threading.Thread(target=self._run, args=(conn,), daemon=True)
            self._threads.append(t)
            t.start()

    def _run(self, conn: FakeConn) -> None:
        try:
            self.script(conn)
        except (EOFError, OSError):
            pass
        except BaseException as e:  # noqa: BLE001 - reported by check()
            self.errors.append(e)
        finally:
            conn.sock.close()

    def check(self) -> None:
        """Re-raise the first error of a script."""
        if self.errors:
            raise self.errors[0]

    def close(self) -> None:
        self.listener.close()

    def __enter__(self) -> FakeLcd:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
