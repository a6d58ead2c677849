"""The server against hostile peers: unauthenticated floods, oversized and unfinished
uploads and reads, descriptors run out, ids out of bounds, cancels that go astray.

Real servers on real Unix sockets; the attacker speaks raw bytes. The socket's place
and other users: test_unix_socket.py.
"""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import subprocess
import threading
from pathlib import Path

import pytest

from flux_system.remote import ServerLimits, connect
from flux_system.remote._connection import HELLO_MAX
from tests.flux_system.remote._harness import HELLO, frame, raw_connect, read_frames, served


def _hello_of(size: int) -> bytes:
    """A valid hello of exactly *size* bytes (JSON whitespace pads it)."""
    assert size >= len(HELLO)
    return HELLO[:-1] + b" " * (size - len(HELLO)) + b"}"


def _first(s: socket.socket) -> dict[str, object]:
    frames = read_frames(s, count=1)
    assert frames, "the server sent nothing"
    out: dict[str, object] = json.loads(frames[0])
    return out


def test_a_hello_at_the_ceiling_is_welcomed(tmp_path: Path) -> None:
    with served(tmp_path) as srv, contextlib.closing(raw_connect(srv.target)) as s:
        s.sendall(frame(_hello_of(HELLO_MAX)))
        assert _first(s)["type"] == "welcome"


def test_a_hello_past_the_ceiling_is_refused_from_its_header(tmp_path: Path) -> None:
    """Before, an unauthenticated peer could make the server buffer 8 MiB per
    connection (the post-handshake frame ceiling) for handshake_s."""
    limits = ServerLimits(handshake_s=60.0)
    with served(tmp_path, limits=limits) as srv, contextlib.closing(raw_connect(srv.target)) as s:
        s.sendall(struct.pack(">I", HELLO_MAX + 1))  # and no body: refused at once
        got = _first(s)
    assert got["type"] == "goodbye" and got["reason"] == "protocol", got
    assert f"exceeds the {HELLO_MAX}-byte ceiling" in str(got["message"])


def test_connections_in_their_handshake_are_capped(tmp_path: Path) -> None:
    limits = ServerLimits(max_handshaking=2, handshake_s=60.0)
    with served(tmp_path, limits=limits) as srv:
        quiet = [raw_connect(srv.target) for _ in range(2)]  # hold both slots
        try:
            quiet[0].sendall(b"\0")  # positive control: they are connected, mid-hello
            third = raw_connect(srv.target)
            with contextlib.closing(third):
                got = _first(third)
            assert got["type"] == "goodbye" and got["reason"] == "limit", got
            assert any("in their handshake" in line for line in srv.log)
            quiet[1].sendall(frame(HELLO))  # one finishes its hello: its slot is free
            assert _first(quiet[1])["type"] == "welcome"
            with connect(srv.target) as sub:  # so a real client gets in
                assert sub.files.exists(".") is True
        finally:
            for s in quiet:
                s.close()


def test_limits_past_any_clock_are_refused() -> None:
    """heartbeat_s=1e308 passed, then killed each connection's thread (the kernel
    timeout overflowed) right after its handshake."""
    with pytest.raises(ValueError, match="<= 1e6"):
        ServerLimits(heartbeat_s=1e308)
    with pytest.raises(ValueError, match="<= 1e6"):
        ServerLimits(handshake_s=float("inf"))
    assert ServerLimits(heartbeat_s=1e6).heartbeat_s == 1e6  # positive control


def test_a_bad_token_is_in_no_answer_and_no_log_line(tmp_path: Path) -> None:
    real = b"the-real-token-0123456789"
    sent = "a-guessed-token-9876543210"
    with served(tmp_path, token=real) as srv, contextlib.closing(raw_connect(srv.target)) as s:
        hello = json.loads(HELLO)
        s.sendall(frame(json.dumps({**hello, "token": sent}).encode()))
        got = read_frames(s)
    assert json.loads(got[-1])["reason"] == "auth"  # positive control: it was checked
    said = b"".join(got).decode() + "\n".join(srv.log)
    assert srv.log and sent not in said and real.decode() not in said


_FD_STARVED_SERVER = r"""
import resource, sys, tempfile
sys.path.insert(0, {repo!r})
resource.setrlimit(resource.RLIMIT_NOFILE, (48, 48))
from flux_system import Workspace
from flux_system.remote import PortServer, ServerConfig, ServerLimits
ws = Workspace(tempfile.mkdtemp())
server = PortServer(ServerConfig(ws, limits=ServerLimits(handshake_s=300)))
server.start_unix(sys.argv[1])
print("ready", flush=True)
sys.stdin.read()
server.close()
"""


def test_a_server_out_of_descriptors_waits_instead_of_spinning(tmp_path: Path) -> None:
    """Connections past the server's fd limit stay queued and accept() fails at once
    with EMFILE: the accept loop retried at once, burning a whole core (measured: 1.99
    s of CPU in 2 s) for as long as they waited. This measures CPU used while the
    server has nothing it can do, not a speed: any figure near 0 passes."""
    import psutil

    from tests.flux_system.remote._harness import PYTHON, REPO

    path = str(tmp_path / "port.sock")
    proc = subprocess.Popen(
        [PYTHON, "-c", _FD_STARVED_SERVER.format(repo=REPO), path],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    socks: list[socket.socket] = []
    try:
        assert proc.stdout is not None and proc.stderr is not None
        assert proc.stdout.readline() == b"ready\n"
        server = psutil.Process(proc.pid)
        for _ in range(64):  # more than its 48 descriptors hold
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(path)
            socks.append(s)
        line = proc.stderr.readline()  # positive control: it ran out (logged once)
        assert b"cannot accept: Too many open files" in line, line
        assert server.num_fds() >= 40
        before = sum(server.cpu_times()[:2])
        threading.Event().wait(2.0)
        used = sum(server.cpu_times()[:2]) - before
        assert used < 0.5, f"{used:.2f} s of CPU in 2 s while starved of descriptors"
        for s in socks:  # once descriptors free up, it serves again
            s.close()
        socks.clear()
        with connect(f"unix:{path}", timeout=30) as sub:
            assert sub.files.exists(".") is True
    finally:
        for s in socks:
            s.close()
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(30)
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()


def _msg(obj: dict[str, object]) -> bytes:
    return frame(json.dumps(obj).encode())


def _upload(rid: int, data: bytes, last: bool) -> bytes:
    import base64

    chunk = {"type": "chunk", "id": rid, "stream": "upload", "last": last}
    return _msg({**chunk, "data": base64.b64encode(data).decode()})


def _write(rid: int, path: str, size: int) -> bytes:
    args = {"path": path, "size": size, "create_parents": True}
    return _msg({"type": "request", "id": rid, "op": "write_bytes", "args": args})


def test_uploads_in_flight_on_one_connection_share_the_upload_limit(tmp_path: Path) -> None:
    """Uploads are held in memory until their request ends, and each was only held to
    max_upload: 8 unfinished 1 GiB writes made the server hold 1.2 GiB (32 GiB at the
    default in-flight cap) on one connection."""
    limits = ServerLimits(max_upload=1000)
    with served(tmp_path, limits=limits) as srv, contextlib.closing(raw_connect(srv.target)) as s:
        s.sendall(frame(HELLO))
        assert _first(s)["type"] == "welcome"
        s.sendall(_write(1, "a", 800) + _upload(1, b"a" * 400, False))  # half sent
        s.sendall(_write(2, "b", 300) + _upload(2, b"b" * 300, True))
        refused = json.loads(read_frames(s, count=1)[0])
        assert refused["id"] == 2 and refused["type"] == "error", refused
        assert refused["error"]["kind"] == "refused"
        assert "uploads in flight" in refused["error"]["message"]
        s.sendall(_upload(1, b"a" * 400, True))  # the first one completes ...
        assert json.loads(read_frames(s, count=1)[0]) == {"type": "result", "id": 1, "value": None}
        s.sendall(_write(3, "c", 300) + _upload(3, b"c" * 300, True))  # ... and frees room
        assert json.loads(read_frames(s, count=1)[0]) == {"type": "result", "id": 3, "value": None}
    assert (tmp_path / "a").read_bytes() == b"a" * 800
    assert (tmp_path / "c").read_bytes() == b"c" * 300
    assert not (tmp_path / "b").exists()


_PLAIN_SERVER = r"""
import sys
sys.path.insert(0, {repo!r})
from flux_system import Workspace
from flux_system.remote import PortServer, ServerConfig
ws = Workspace(sys.argv[2])
server = PortServer(ServerConfig(ws))
server.start_unix(sys.argv[1])
print("ready", flush=True)
sys.stdin.read()
server.close()
"""


def test_a_large_read_the_client_does_not_take_holds_two_chunks_not_the_file(
    tmp_path: Path,
) -> None:
    """A read was held whole in the server's memory while it was sent: a client that
    asked for a large file and stopped reading held its size there (per read in
    flight). Now the server holds a chunk and the one read ahead."""
    import psutil

    from tests.flux_system.remote._harness import PYTHON, REPO

    ws = tmp_path / "ws"
    ws.mkdir()
    size = 256 * 1024 * 1024
    with open(ws / "big", "wb") as fh:
        fh.truncate(size)  # sparse: costs no disk
    path = str(tmp_path / "port.sock")
    proc = subprocess.Popen(
        [PYTHON, "-c", _PLAIN_SERVER.format(repo=REPO), path, str(ws)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"ready\n"
        server = psutil.Process(proc.pid)
        with contextlib.closing(raw_connect(f"unix:{path}")) as s:
            s.sendall(frame(HELLO))
            assert _first(s)["type"] == "welcome"
            base = server.memory_info().rss
            args = {"path": "big", "limit": None}
            s.sendall(_msg({"type": "request", "id": 1, "op": "read_bytes", "args": args}))
            first = s.recv(4, socket.MSG_WAITALL)  # positive control: it is sending
            assert len(first) == 4 and struct.unpack(">I", first)[0] > 4 * 1024 * 1024
            peak = 0
            for _ in range(20):  # then we read no more; the server's send blocks
                peak = max(peak, server.memory_info().rss - base)
                threading.Event().wait(0.1)
        assert peak < size // 4, f"the server held {peak >> 20} MiB for a {size >> 20} MiB read"
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(30)
        if proc.stdout is not None:
            proc.stdout.close()


def test_a_write_cancelled_mid_upload_is_answered_cancelled(tmp_path: Path) -> None:
    """Its request waited for the rest of the upload for ever: never answered, its
    in-flight slot held until the connection ended."""
    with served(tmp_path) as srv, contextlib.closing(raw_connect(srv.target)) as s:
        s.sendall(frame(HELLO))
        assert _first(s)["type"] == "welcome"
        s.sendall(_write(1, "x", 10) + _upload(1, b"12345", False))
        s.sendall(_msg({"type": "cancel", "id": 1}))
        got = json.loads(read_frames(s, count=1)[0])
        assert got["id"] == 1 and got["error"]["kind"] == "cancelled", got
        s.sendall(_upload(1, b"67890", True))  # the rest, sent anyway, is swallowed
        args = {"path": "x"}
        s.sendall(_msg({"type": "request", "id": 2, "op": "exists", "args": args}))
        assert json.loads(read_frames(s, count=1)[0]) == {"type": "result", "id": 2, "value": False}
    assert not (tmp_path / "x").exists()


def _spawn(rid: int, argv: list[str]) -> bytes:
    return _msg({"type": "request", "id": rid, "op": "spawn", "args": {"argv": argv}})


def _started(s: socket.socket) -> int:
    got = json.loads(read_frames(s, count=1)[0])
    assert got["type"] == "event" and got["event"] == "started", got
    pid = got["pid"]
    assert isinstance(pid, int)
    return pid


def _gone(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.parametrize(
    ("rid", "ok"), [(2**53 - 1, True), (2**53, False), (0, False), (-1, False)]
)
def test_request_ids_at_and_past_their_bounds(tmp_path: Path, rid: int, ok: bool) -> None:
    with served(tmp_path) as srv, contextlib.closing(raw_connect(srv.target)) as s:
        s.sendall(frame(HELLO))
        assert _first(s)["type"] == "welcome"
        request = {"type": "request", "id": rid, "op": "exists", "args": {"path": "."}}
        s.sendall(_msg(request))
        got = _first(s)
    if ok:
        assert got == {"type": "result", "id": rid, "value": True}
    else:
        assert got["type"] == "goodbye" and got["reason"] == "protocol", got


def test_an_id_reused_while_in_flight_ends_the_connection_and_its_children(
    tmp_path: Path,
) -> None:
    with served(tmp_path) as srv, contextlib.closing(raw_connect(srv.target)) as s:
        s.sendall(frame(HELLO))
        assert _first(s)["type"] == "welcome"
        s.sendall(_spawn(5, ["/bin/sleep", "300"]))
        pid = _started(s)
        assert not _gone(pid)  # positive control: the child runs
        s.sendall(_msg({"type": "request", "id": 5, "op": "exists", "args": {"path": "."}}))
        frames = read_frames(s)  # until the server closes
    last = json.loads(frames[-1])
    assert last["type"] == "goodbye" and "request id 5 is in use" in last["message"], last
    for _ in range(100):
        if _gone(pid):
            break
        threading.Event().wait(0.1)
    assert _gone(pid)


def test_a_cancel_reaches_only_its_own_connections_request(tmp_path: Path) -> None:
    with served(tmp_path) as srv:
        with contextlib.closing(raw_connect(srv.target)) as a:
            a.sendall(frame(HELLO))
            assert _first(a)["type"] == "welcome"
            a.sendall(_spawn(1, ["/bin/sleep", "300"]))
            pid = _started(a)
            with contextlib.closing(raw_connect(srv.target)) as b:
                b.sendall(frame(HELLO))
                assert _first(b)["type"] == "welcome"
                b.sendall(_msg({"type": "cancel", "id": 1}))  # A's id, from B
                b.sendall(_msg({"type": "request", "id": 2, "op": "exists", "args": {"path": "."}}))
                assert _first(b)["id"] == 2  # B's cancel was handled before this answer
                assert not _gone(pid)
            a.sendall(_msg({"type": "cancel", "id": 1}))  # positive control: A's own
            ended = json.loads(read_frames(a, count=1)[0])
            assert ended["type"] == "event" and ended["event"] == "exited", ended
        assert _gone(pid)
