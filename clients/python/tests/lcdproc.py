"""Real lcd processes for the live tests: built once per run from the
repository (``go build ./cmd/lcd``), or the binary named by LC_LCD, started
on free 127.0.0.1 ports."""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time
import unittest

ROOT = pathlib.Path(__file__).resolve().parents[3]
_built: dict[str, str] = {}
_build_lock = threading.Lock()
WORK = tempfile.mkdtemp(prefix="lc-python-tests-")


def lcd_binary() -> str:
    """The lcd to test: LC_LCD, or one built from the repository. Skips the
    test when neither is possible."""
    if os.environ.get("LC_LCD"):
        return os.environ["LC_LCD"]
    with _build_lock:
        if "lcd" not in _built:
            if shutil.which("go") is None:
                raise unittest.SkipTest("no lcd: set LC_LCD or put go on PATH")
            out = os.path.join(WORK, "lcd")
            subprocess.run(["go", "build", "-o", out, "./cmd/lcd"], cwd=ROOT, check=True)
            _built["lcd"] = out
        return _built["lcd"]


def free_port_block(n: int) -> int:
    """A port p such that p to p+n-1 were free on 127.0.0.1 just now."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            p = s.getsockname()[1]
        if p + n > 65535:
            continue
        try:
            held = []
            for q in range(p, p + n):
                t = socket.socket()
                held.append(t)
                t.bind(("127.0.0.1", q))
            return p
        except OSError:
            continue
        finally:
            for t in held:
                t.close()


class Lcd:
    """One lcd process. ``address`` and ``manager`` once started."""

    def __init__(self, env: dict[str, str] | None = None, name: str = "lcd") -> None:
        self.env = {"BIND_ADDRESS": "127.0.0.1:0", "SHUTDOWN_TIMEOUT": "1s", "LOG_FORMAT": "text", **(env or {})}
        self.log_path = os.path.join(WORK, f"{name}-{time.monotonic_ns()}.log")
        self.proc: subprocess.Popen[bytes] | None = None
        self.address = self.manager = ""

    def spawn(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("LC_", "AUTH_", "TLS_", "DATA_", "RAFT_"))}
        env.update(self.env)
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen([lcd_binary()], env=env, stdout=log, stderr=log)

    def wait_started(self) -> Lcd:
        """Wait until it logs its addresses."""
        deadline = time.monotonic() + 30
        while True:
            text = pathlib.Path(self.log_path).read_text(errors="replace")
            m = re.search(r'msg="lcd started".* mutex=(\S+) manager=(\S+)', text)
            if m:
                self.address, self.manager = m.group(1), m.group(2)
                return self
            if self.proc is None or self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"lcd did not start:\n{text}")
            time.sleep(0.02)

    def start(self) -> Lcd:
        self.spawn()
        return self.wait_started()

    def signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self) -> Lcd:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def cluster(n: int = 3, env: dict[str, str] | None = None) -> list[Lcd]:
    """n nodes of a new cluster (docs/ha.md), started; each node's mutex
    port is p, its raft port p + 4."""
    bases: list[int] = []
    while len(bases) < n:
        b = free_port_block(5)
        if all(abs(b - x) > 5 for x in bases):
            bases.append(b)
    peers = ",".join(f"n{i + 1}=127.0.0.1:{b + 4}=127.0.0.1:{b}" for i, b in enumerate(bases))
    nodes = []
    for i, b in enumerate(bases):
        raft = tempfile.mkdtemp(prefix=f"raft-n{i + 1}-", dir=WORK)
        nodes.append(Lcd({"NODE_ID": f"n{i + 1}", "BIND_ADDRESS": f"127.0.0.1:{b}", "RAFT_DIR": raft,
                          "RAFT_PEERS": peers, **(env or {})}, name=f"n{i + 1}"))  # fmt: skip
    for node in nodes:
        node.spawn()
    for node in nodes:
        node.wait_started()
    return nodes


def management(manager: str, request: bytes) -> bytes:
    host, port = manager.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(request)
        out = b""
        while d := s.recv(65536):
            out += d
    return out


def holders(manager: str) -> list[dict[str, object]]:
    """Every holder, with its token, session and note (management command
    11, docs/protocol.md)."""
    b = management(manager, bytes([11]))
    if not b.startswith(b"+"):
        raise RuntimeError(f"management command 11 answered {b[:1]!r}")
    (n,) = struct.unpack_from(">I", b, 1)
    i, out = 5, []
    tail = struct.Struct(">qqIQQqqBII")
    for _ in range(n):
        strings = []
        for _ in range(3):
            strings.append(b[i + 1 : i + 1 + b[i]])
            i += 1 + b[i]
        _, _, waiters, token, session, _, _, mode, count, limit = tail.unpack_from(b, i)
        i += tail.size
        (k,) = struct.unpack_from(">H", b, i)
        note = b[i + 2 : i + 2 + k].decode()
        i += 2 + k
        out.append({"key": strings[0], "source": strings[1], "waiters": waiters, "token": token,
                    "session": session, "mode": mode, "count": count, "limit": limit, "note": note})  # fmt: skip
    return out


def sessions(manager: str) -> list[int]:
    """The ids of the sessions the server keeps (management command 6,
    docs/protocol.md)."""
    b = management(manager, bytes([6]))
    if not b.startswith(b"+"):
        raise RuntimeError(f"management command 6 answered {b[:1]!r}")
    (n,) = struct.unpack_from(">I", b, 1)
    i, out = 5, []
    for _ in range(n):
        (sid,) = struct.unpack_from(">Q", b, i)
        i += 8
        for _ in range(2):  # name, remote address
            i += 1 + b[i]
        i += 8 + 8 + 4 + 4  # ttl, idle, held, parked
        out.append(sid)
    return out


def is_leader(manager: str) -> bool:
    """A node of a cluster answers the listing of keys only while it leads."""
    try:
        return management(manager, bytes([1])).startswith(b"+")
    except OSError:
        return False


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for x in data:
        crc ^= x
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def wal_with_token(path: str, token: int) -> None:
    """A write-ahead log (store/doc.go) of one snapshot record whose token
    counter is ``token``: an lcd started on it hands out tokens above."""
    payload = json.dumps({"op": "state", "token": token}, separators=(",", ":")).encode()
    head = struct.pack("<I", len(payload))
    with open(path, "wb") as f:
        f.write(head + struct.pack("<I", crc32c(head)) + struct.pack("<I", crc32c(payload)) + payload)


class Proxy:
    """A TCP proxy to target whose ``cut()`` resets every connection through
    it at once; new connections go through again, unless ``blocked`` (then
    they are closed as they come)."""

    def __init__(self, target: str) -> None:
        host, port = target.rsplit(":", 1)
        self.target = (host, int(port))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = "127.0.0.1:%d" % self.listener.getsockname()[1]
        self.conns: list[socket.socket] = []
        self.mu = threading.Lock()
        self.blocked = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                c, _ = self.listener.accept()
                if self.blocked:
                    c.close()
                    continue
                u = socket.create_connection(self.target)
            except OSError:
                return
            with self.mu:
                self.conns += [c, u]
            for a, b in ((c, u), (u, c)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(a: socket.socket, b: socket.socket) -> None:
        try:
            while d := a.recv(65536):
                b.sendall(d)
        except OSError:
            pass
        for x in (a, b):
            try:
                x.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self) -> None:
        with self.mu:
            for s in self.conns:
                try:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    s.close()
                except OSError:
                    pass
            self.conns = []

    def close(self) -> None:
        self.listener.close()
        self.cut()
