"""Real port servers for the remote tests: in a thread of this process, or in a child.

Nothing is mocked: servers listen on real Unix sockets (or loopback TCP), speak the
real protocol and serve a real Workspace and System.
"""

from __future__ import annotations

import contextlib
import os
import socket
import ssl
import struct
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from flux_system import System, Workspace
from flux_system.remote import PortServer, ServerConfig, ServerLimits

REPO = str(Path(__file__).resolve().parents[3])


@dataclass
class Served:
    target: str
    workspace: Workspace
    system: System
    log: list[str] = field(default_factory=list)
    server: PortServer | None = None


@contextlib.contextmanager
def served(
    root: Path,
    *,
    token: bytes | None = None,
    limits: ServerLimits | None = None,
    tcp: bool = False,
    ssl_context: ssl.SSLContext | None = None,
    with_system: bool = True,
) -> Iterator[Served]:
    """A PortServer on a fresh Unix socket (or loopback TCP) in a background loop."""
    ws = Workspace(root)
    system = System(ws)
    log: list[str] = []
    config = ServerConfig(
        ws,
        system=system if with_system else None,
        token=token,
        limits=limits or ServerLimits(),
    )
    server = PortServer(config, log=log.append)
    sock_dir = tempfile.mkdtemp(prefix="flux-port-")
    path = os.path.join(sock_dir, "port.sock")
    if tcp:
        port = server.start_tcp("127.0.0.1", 0, ssl_context=ssl_context)
        target = f"tcp://127.0.0.1:{port}"
    else:
        server.start_unix(path)
        target = f"unix:{path}"
    try:
        yield Served(target, ws, system, log, server)
    finally:
        server.close()
        system.close()
        ws.close()
        with contextlib.suppress(OSError):
            os.unlink(path)
        with contextlib.suppress(OSError):
            os.rmdir(sock_dir)


def frame(obj: bytes) -> bytes:
    return struct.pack(">I", len(obj)) + obj


HELLO = b'{"type":"hello","protocol":"flux-port","versions":[1],"client":"raw"}'


def raw_connect(target: str) -> socket.socket:
    assert target.startswith("unix:")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(20)
    s.connect(target[len("unix:") :])
    return s


def read_frames(
    s: socket.socket, *, until_close: bool = True, count: int | None = None
) -> list[bytes]:
    """Frames the server sends until it closes (or *count* arrived)."""
    buf = b""
    out: list[bytes] = []
    while count is None or len(out) < count:
        data = s.recv(65536)
        if not data:
            break
        buf += data
        while len(buf) >= 4:
            (n,) = struct.unpack(">I", buf[:4])
            if len(buf) < 4 + n:
                break
            out.append(buf[4 : 4 + n])
            buf = buf[4 + n :]
    return out


CHILD_SERVER = """
import sys
sys.path.insert(0, {repo!r})
from flux_system import System, Workspace
from flux_system.remote import PortServer, ServerConfig
ws = Workspace({root!r}); system = System(ws)
server = PortServer(ServerConfig(ws, system=system))
server.start_unix({path!r})
print("ready", flush=True)
server.wait_closed()
"""


def child_server_code(root: Path, path: str) -> str:
    return CHILD_SERVER.format(repo=REPO, root=str(root), path=path)


PYTHON = sys.executable


def guarded(call: Callable[[], object], *, guard: float = 30.0) -> object:
    """*call* on a thread; its value, or its exception re-raised. A hang fails the test."""
    out: list[object] = []

    def go() -> None:
        try:
            out.append(call())
        except BaseException as exc:
            out.append(exc)

    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    thread.join(guard)
    assert not thread.is_alive(), f"the call hung for {guard} s"
    if isinstance(out[0], BaseException):
        raise out[0]
    return out[0]
