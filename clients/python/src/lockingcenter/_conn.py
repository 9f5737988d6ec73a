"""Connections of a threaded session: plain TCP, or TLS over a memory BIO
so that one thread may read while others write (an SSLSocket must not be
used by two threads at once)."""

from __future__ import annotations

import socket
import ssl
import threading


class PlainConn:
    """A TCP connection: ``recv`` by the session's reader, ``sendall`` by
    one writer at a time."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def recv(self, n: int) -> bytes:
        return self.sock.recv(n)

    def sendall(self, data: bytes) -> None:
        self.sock.sendall(data)

    def abort(self) -> None:
        """Cut the connection, waking its reader; close follows."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def close(self) -> None:
        self.abort()
        self.sock.close()


class TLSConn(PlainConn):
    """TLS on ``sock`` through an SSLObject. Encryption and decryption take
    ``_ssl``; the records leave in the order they were made, under
    ``_write``. The handshake runs in the constructor, within the socket's
    timeout."""

    def __init__(self, sock: socket.socket, context: ssl.SSLContext, server_hostname: str | None) -> None:
        super().__init__(sock)
        self._in = ssl.MemoryBIO()
        self._out = ssl.MemoryBIO()
        self._obj = context.wrap_bio(self._in, self._out, server_side=False, server_hostname=server_hostname)
        self._ssl = threading.Lock()
        self._write = threading.Lock()
        while True:
            try:
                with self._ssl:
                    self._obj.do_handshake()
                self._flush()
                return
            except ssl.SSLWantReadError:
                self._flush()
                data = sock.recv(65536)
                if not data:
                    raise ConnectionResetError("the connection closed during the TLS handshake") from None
                with self._ssl:
                    self._in.write(data)

    def _flush(self) -> None:
        with self._write:
            with self._ssl:
                data = self._out.read()
            if data:
                self.sock.sendall(data)

    def sendall(self, data: bytes) -> None:
        with self._write:
            with self._ssl:
                self._obj.write(data)
                out = self._out.read()
            self.sock.sendall(out)

    def recv(self, n: int) -> bytes:
        while True:
            with self._ssl:
                try:
                    data: bytes | None = self._obj.read(n)
                except ssl.SSLWantReadError:
                    data = None
                except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                    data = b""
                pending = self._out.pending
            if pending:
                self._flush()
            if data is not None:
                return data
            raw = self.sock.recv(65536)
            with self._ssl:
                if raw:
                    self._in.write(raw)
                else:
                    self._in.write_eof()
