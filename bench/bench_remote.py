"""Remote executor benchmarks (ratios against a fair floor, side by side in one run).

1. A 4 KiB file read through ``connect("unix:...")`` (``sub.files.read_bytes``, what a
   user calls) from a ``flux serve`` in another process vs a bare two-process
   Unix-socket request/response carrying the same 4 KiB (the floor any remote read
   pays: one round trip between two Python processes, sequential; the request and the
   answer each a 4-byte length prefix and a body, sent in one ``sendall``, received
   with one ``recv_into`` per arrival, the server answering the 4 KiB it read once at
   start) — target <= 3x. Beside it, as context: the same bare server reading the
   file through ``Workspace.read_bytes`` on every request (what is left above it is
   the protocol: JSON, ids, the in-flight cap, and on a version-1 connection base64;
   this client and server speak version 2, whose small read results carry the bytes
   raw, decision 0130), and a native ``Workspace.read_bytes``.
2. Streamed process output through the remote (``spawn`` of ``head -c 256M
   /dev/zero``, every byte delivered to ``on_output``): MB/s, target >= 100 MB/s, with
   the native figure (``System.spawn(stream_output=True)``) beside it.
3. N concurrent clients (threads, one connection each) x 1,000 small reads against one
   server: total ops/s for N = 1, 2, 4, 8, 16, 32.
"""

from __future__ import annotations

import os
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import typing
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import record, side_by_side
from flux_system import System, Workspace
from flux_system.port import Substrate
from flux_system.remote import connect
from flux_system.remote._parts import RemoteProcesses

REPO = str(Path(__file__).resolve().parent.parent)
PAYLOAD = 4096

SERVER = """
import sys
sys.path.insert(0, {repo!r})
from flux_system import System, Workspace
from flux_system.remote import PortServer, ServerConfig
ws = Workspace({root!r}); system = System(ws)
server = PortServer(ServerConfig(ws, system=system), log=lambda line: None)
server.start_unix({path!r})
print("ready", flush=True)
server.wait_closed()
"""

FLOOR = """
import socket, struct, sys, threading
sys.path.insert(0, {repo!r})
from flux_system import Workspace
payload = open({file!r}, 'rb').read()
ws = Workspace({root!r})
s = socket.socket(socket.AF_UNIX); s.bind({path!r}); s.listen(64)
print("ready", flush=True)
def serve(c, read_file):
    buf = memoryview(bytearray(65536))
    while True:
        got = c.recv_into(buf)
        if not got:
            return
        while got < 4 or got < 4 + struct.unpack_from('>I', buf)[0]:
            more = c.recv_into(buf[got:])
            if not more:
                return
            got += more
        data = ws.read_bytes('f4k') if read_file else payload
        c.sendall(struct.pack('>I', len(data)) + data)
while True:
    c, _ = s.accept()
    mode = c.recv(1)  # b"p": the payload read once at start; b"w": Workspace.read_bytes
    threading.Thread(target=serve, args=(c, mode == b"w"), daemon=True).start()
"""
REQUEST = b'{"op":"read_bytes","path":"f4k"}'


def _start(code: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == b"ready"
    return proc


def _bare_client(path: str, mode: bytes) -> typing.Callable[[], bytes]:
    """One sequential framed request/response to the floor server (*mode*: b"p"/b"w")."""
    sock = socket.socket(socket.AF_UNIX)
    sock.connect(path)
    sock.sendall(mode)
    frame = struct.pack(">I", len(REQUEST)) + REQUEST
    buf = memoryview(bytearray(65536))

    def call() -> bytes:
        sock.sendall(frame)
        got = sock.recv_into(buf)
        while got < 4 or got < 4 + struct.unpack_from(">I", buf)[0]:
            more = sock.recv_into(buf[got:])
            if not more:
                raise ConnectionError("closed")
            got += more
        return bytes(buf[4:got])

    return call


def main() -> None:
    figures: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as root:
        (Path(root) / "f4k").write_bytes(os.urandom(PAYLOAD))
        sockdir = tempfile.mkdtemp()
        port_path = os.path.join(sockdir, "port.sock")
        floor_path = os.path.join(sockdir, "floor.sock")
        server = _start(SERVER.format(repo=REPO, root=root, path=port_path))
        floor = _start(
            FLOOR.format(repo=REPO, root=root, file=str(Path(root) / "f4k"), path=floor_path)
        )
        try:
            sub = connect(f"unix:{port_path}")
            bare = _bare_client(floor_path, b"p")
            bare_ws = _bare_client(floor_path, b"w")
            expected = (Path(root) / "f4k").read_bytes()
            with Workspace(root) as ws:
                for _ in range(300):
                    assert sub.files.read_bytes("f4k") == bare() == bare_ws() == expected
                read = side_by_side(lambda: sub.files.read_bytes("f4k"), bare, number=300, rounds=9)
                read_ws = side_by_side(
                    lambda: sub.files.read_bytes("f4k"), bare_ws, number=300, rounds=5
                )
                native = side_by_side(
                    lambda: sub.files.read_bytes("f4k"),
                    lambda: ws.read_bytes("f4k"),
                    number=300,
                    rounds=5,
                )
            print(
                f"4 KiB read: remote {read['candidate_s'] * 1e6:.0f} us, bare unix round trip "
                f"{read['baseline_s'] * 1e6:.0f} us, ratio {read['ratio']:.2f}x (target <= 3x)"
            )
            print(
                f"  context: vs the bare round trip whose server reads through Workspace "
                f"{read_ws['ratio']:.2f}x ({read_ws['baseline_s'] * 1e6:.0f} us); "
                f"vs native read_bytes {native['ratio']:.0f}x ({native['baseline_s'] * 1e6:.1f} us)"
            )
            figures["read_4k_remote_s"] = read["candidate_s"]
            figures["read_4k_floor_s"] = read["baseline_s"]
            figures["read_4k_ratio"] = read["ratio"]
            figures["read_4k_floor_ws_s"] = read_ws["baseline_s"]
            figures["read_4k_vs_floor_ws"] = read_ws["ratio"]
            figures["read_4k_vs_native"] = native["ratio"]

            size = 256 * 1024 * 1024
            rates = []
            for _ in range(3):
                got = [0]

                def count(stream: str, data: bytes, got: list[int] = got) -> None:
                    got[0] += len(data)

                t0 = time.perf_counter()
                procs = typing.cast(RemoteProcesses, sub.processes)
                child = procs.spawn(["head", "-c", str(size), "/dev/zero"], on_output=count)
                child.join(600)
                rates.append(size / (time.perf_counter() - t0) / 1e6)
                assert got[0] == size, got
            with Workspace(root) as ws, System(ws) as system:
                native_rates = []
                for _ in range(3):
                    t0 = time.perf_counter()
                    child_n = system.spawn(
                        ["head", "-c", str(size), "/dev/zero"], stream_output=True
                    )
                    total = sum(len(chunk.data) for chunk in child_n.chunks())
                    child_n.join(600)
                    assert total == size
                    native_rates.append(size / (time.perf_counter() - t0) / 1e6)
            stream_rate = statistics.median(rates)
            native_rate = statistics.median(native_rates)
            print(
                f"streamed output: remote {stream_rate:.0f} MB/s (target >= 100 MB/s), "
                f"native {native_rate:.0f} MB/s"
            )
            figures["stream_mb_s"] = stream_rate
            figures["stream_native_mb_s"] = native_rate

            scaling: dict[str, float] = {}
            for n_clients in (1, 2, 4, 8, 16, 32):
                subs = [connect(f"unix:{port_path}") for _ in range(n_clients)]
                barrier = threading.Barrier(n_clients + 1)

                def work(s: Substrate, barrier: threading.Barrier = barrier) -> None:
                    barrier.wait()
                    for _ in range(1000):
                        s.files.read_bytes("f4k")

                threads = [threading.Thread(target=work, args=(s,)) for s in subs]
                for t in threads:
                    t.start()
                barrier.wait()
                t0 = time.perf_counter()
                for t in threads:
                    t.join()
                ops = n_clients * 1000 / (time.perf_counter() - t0)
                scaling[str(n_clients)] = ops
                for s in subs:
                    s.close()
                print(f"{n_clients:2d} clients x 1,000 reads: {ops:,.0f} ops/s")
            figures["concurrent_ops_s"] = scaling
            sub.close()
        finally:
            server.kill()
            floor.kill()
            server.wait()
            floor.wait()
    record("remote", figures)


if __name__ == "__main__":
    main()
