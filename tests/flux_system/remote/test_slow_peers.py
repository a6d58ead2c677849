"""Peers that trickle or fall silent on the transports without a kernel timeout of
their own: stdio pipes, and TLS handshakes (each read was bounded, not the whole)."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import trustme

from flux_system import System, UnreachableError, Workspace
from flux_system.remote import PortServer, ServerConfig, ServerLimits, connect
from tests.flux_system.remote._harness import HELLO, frame, served


def _join(thread: threading.Thread, guard: float = 30.0) -> None:
    thread.join(guard)
    assert not thread.is_alive(), f"still running after {guard} s"


@contextlib.contextmanager
def _stdio_server(root: Path, limits: ServerLimits) -> Iterator[tuple[int, int, list[str]]]:
    """serve_stdio over two pipes on a thread; yields (to_server, from_server, log)."""
    to_r, to_w = os.pipe()
    from_r, from_w = os.pipe()
    log: list[str] = []
    ws = Workspace(root)
    system = System(ws)
    server = PortServer(ServerConfig(ws, system=system, limits=limits), log=log.append)
    thread = threading.Thread(target=server.serve_stdio, args=(to_r, from_w), daemon=True)
    thread.start()
    try:
        yield to_w, from_r, log
        _join(thread)  # old code: a silent peer held the server here for ever
    finally:
        for fd in (to_w, from_r):
            with contextlib.suppress(OSError):
                os.close(fd)
        thread.join(30)
        server.close()
        system.close()
        ws.close()
        for fd in (to_r, from_w):
            with contextlib.suppress(OSError):
                os.close(fd)


def _read_frame(fd: int) -> dict[str, object]:
    def exactly(n: int) -> bytes:
        out = b""
        while len(out) < n:
            more = os.read(fd, n - len(out))
            assert more, "the server closed its side"
            out += more
        return out

    (n,) = struct.unpack(">I", exactly(4))
    got: dict[str, object] = json.loads(exactly(n))
    return got


def test_a_stdio_peer_that_never_says_hello_is_dropped(tmp_path: Path) -> None:
    limits = ServerLimits(handshake_s=0.5)
    with _stdio_server(tmp_path, limits) as (_to, _from, log):
        pass  # says nothing, keeps its pipes open
    assert log and "no hello within 0.5 s" in log[-1], log


def test_a_stdio_peer_gone_silent_has_its_children_killed(tmp_path: Path) -> None:
    limits = ServerLimits(heartbeat_s=0.2)
    with _stdio_server(tmp_path, limits) as (to, fro, log):
        os.write(to, frame(HELLO))
        assert _read_frame(fro)["type"] == "welcome"  # positive control: it serves
        spawn = {"argv": ["/bin/sleep", "300"]}
        os.write(
            to,
            frame(json.dumps({"type": "request", "id": 1, "op": "spawn", "args": spawn}).encode()),
        )
        started = _read_frame(fro)
        assert started["event"] == "started", started
        pid = started["pid"]
        assert isinstance(pid, int) and psutil.pid_exists(pid)
        # ... and then no ping: the network under ssh went away, the pipes stay open
    assert "silent for three heartbeats" in log[-1], log
    with contextlib.suppress(psutil.NoSuchProcess):
        assert psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def _client_hello() -> bytes:
    ctx = ssl.create_default_context()
    tls = ctx.wrap_bio(ssl.MemoryBIO(), out := ssl.MemoryBIO(), server_hostname="127.0.0.1")
    with contextlib.suppress(ssl.SSLWantReadError):
        tls.do_handshake()
    data: bytes = out.read()
    assert data[:1] == b"\x16"  # a TLS handshake record
    return data


def _trickle(sock: socket.socket, data: bytes, *, every: float, until: float) -> bool:
    """Send *data* a byte at a time; True if the peer closed before *until* s passed."""
    end = time.monotonic() + until
    for i in range(len(data)):
        if time.monotonic() > end:
            return False
        try:
            sock.send(data[i : i + 1])
        except OSError:
            return True
        time.sleep(every)
        with contextlib.suppress(BlockingIOError):
            if sock.recv(1, socket.MSG_DONTWAIT | socket.MSG_PEEK) == b"":
                return True
    return False


def test_a_tls_handshake_trickled_a_byte_at_a_time_is_dropped(tmp_path: Path) -> None:
    ca = trustme.CA()
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("127.0.0.1").configure_cert(server_ctx)
    limits = ServerLimits(handshake_s=1.0)
    hello = _client_hello()
    with served(tmp_path, tcp=True, ssl_context=server_ctx, limits=limits) as srv:
        host, port = srv.target[len("tcp://") :].rsplit(":", 1)
        with socket.create_connection((host, int(port))) as sock:
            closed = _trickle(sock, hello, every=0.1, until=20.0)
        assert len(hello) > 200  # positive control: it would trickle for > 20 s
        assert closed, "the server kept a trickling TLS handshake for 20 s"
        assert any("TLS handshake failed: TimeoutError" in line for line in srv.log), srv.log


def _hostile_tls_server(behave: Callable[[socket.socket], None]) -> tuple[str, socket.socket]:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        with contextlib.suppress(OSError):
            conn, _ = listener.accept()
            with conn, contextlib.suppress(OSError):
                behave(conn)

    threading.Thread(target=serve, daemon=True).start()
    return f"tcp://127.0.0.1:{port}", listener


def test_a_server_trickling_its_tls_handshake_times_the_connect_out() -> None:
    sent = [0]

    def trickle(conn: socket.socket) -> None:
        conn.recv(65536)  # the ClientHello
        conn.sendall(b"\x16\x03\x03\x40\x00")  # a 16 KiB handshake record follows...
        for _ in range(400):  # ... at a byte per 50 ms
            conn.sendall(b"\x00")
            sent[0] += 1
            time.sleep(0.05)

    target, listener = _hostile_tls_server(trickle)
    got: list[BaseException] = []

    def attempt() -> None:
        try:
            connect(target, ssl_context=ssl.create_default_context(), timeout=1.0)
        except BaseException as exc:
            got.append(exc)

    with listener:
        thread = threading.Thread(target=attempt, daemon=True)
        thread.start()
        _join(thread, 15.0)  # old code: every byte reset the 1 s timeout, for 20 s
    assert sent[0] > 0  # positive control: the server was trickling
    assert len(got) == 1 and isinstance(got[0], UnreachableError), got
