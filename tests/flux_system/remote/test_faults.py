"""Fault injection against a real server: bad frames, handshakes, peers that vanish."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time
import typing
from pathlib import Path

import psutil
import pytest

from flux_system import PortError, PortReason, UnknownOutcomeError, UnreachableError
from flux_system.remote import connect
from flux_system.remote._parts import RemoteProcesses
from flux_system.remote._wire import SUPPORTED_VERSIONS
from tests.flux_system.remote._harness import (
    HELLO,
    PYTHON,
    REPO,
    child_server_code,
    frame,
    raw_connect,
    read_frames,
    served,
)


def _goodbye(frames: list[bytes]) -> dict[str, object]:
    assert frames, "the server sent nothing"
    last: dict[str, object] = json.loads(frames[-1])
    assert last["type"] == "goodbye", last
    return last


def _handshaken(target: str) -> socket.socket:
    s = raw_connect(target)
    s.sendall(frame(HELLO))
    first = read_frames(s, count=1)
    assert json.loads(first[0])["type"] == "welcome"  # positive control: it speaks
    return s


def test_oversized_length_is_refused_from_the_header_alone(tmp_path: Path) -> None:
    with served(tmp_path) as srv:
        s = _handshaken(srv.target)
        # Only the 4 header bytes of a 4 GiB frame: the server must answer and close
        # without waiting for (or allocating) the body.
        s.sendall(struct.pack(">I", 0xFFFFFFFF))
        bye = _goodbye(read_frames(s))
        assert bye["reason"] == "protocol" and "ceiling" in str(bye["message"])
        s.close()
        with connect(srv.target) as sub:  # the server lives on
            assert sub.files.exists(".")


@pytest.mark.parametrize(
    ("payload", "why"),
    [
        (struct.pack(">I", 0), "length 0"),
        (frame(b"\xff\xfe not utf-8"), "UTF-8"),
        (frame(b"{not json"), "JSON"),
        (frame(b"[1,2]"), "not an object"),
        (frame(b'{"type":"ping","nonce":1,"nonce":2}'), "duplicate"),
        (frame(b'{"type":"nope"}'), "invalid"),
        (frame(b'{"type":"welcome"}'), "invalid"),
        (frame(b"[" * 100 + b"]" * 100), "deeper"),
    ],
)
def test_garbage_after_handshake_ends_the_connection(
    tmp_path: Path, payload: bytes, why: str
) -> None:
    with served(tmp_path) as srv:
        s = _handshaken(srv.target)
        s.sendall(payload)
        bye = _goodbye(read_frames(s))
        assert bye["reason"] == "protocol"
        assert why in str(bye["message"]), bye
        s.close()


def test_truncated_frame_then_eof_is_survived(tmp_path: Path) -> None:
    with served(tmp_path) as srv:
        s = _handshaken(srv.target)
        s.sendall(struct.pack(">I", 100) + b'{"type":')
        s.shutdown(socket.SHUT_WR)
        _goodbye(read_frames(s))
        s.close()
        with connect(srv.target) as sub:
            assert sub.files.list_dir() == []


def test_version_mismatch_fails_on_both_sides(tmp_path: Path) -> None:
    with served(tmp_path) as srv:
        s = raw_connect(srv.target)
        s.sendall(frame(b'{"type":"hello","protocol":"flux-port","versions":[7,8],"client":"new"}'))
        bye = _goodbye(read_frames(s))
        assert bye["reason"] == "version"
        spoken = str(list(SUPPORTED_VERSIONS))  # the server names both sides' lists
        assert spoken in str(bye["message"]) and "[7, 8]" in str(bye["message"])
        s.close()


def test_first_frame_must_be_hello(tmp_path: Path) -> None:
    with served(tmp_path) as srv:
        s = raw_connect(srv.target)
        s.sendall(frame(b'{"type":"ping","nonce":1}'))
        assert _goodbye(read_frames(s))["reason"] == "protocol"
        s.close()


def test_token_required_and_checked(tmp_path: Path) -> None:
    with served(tmp_path, token=b"s3cret-token-value") as srv:
        with pytest.raises(PortError) as missing:
            connect(srv.target)
        assert missing.value.reason is PortReason.AUTH
        with pytest.raises(PortError) as wrong:
            connect(srv.target, token="s3cret-token-valuX")
        assert wrong.value.reason is PortReason.AUTH
        assert "s3cret" not in str(wrong.value)
        with connect(srv.target, token="s3cret-token-value") as sub:  # positive control
            assert sub.files.exists(".")


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_client_killed_mid_stream_has_its_processes_killed(tmp_path: Path) -> None:
    with served(tmp_path) as srv:
        code = (
            "import sys, time\n"
            f"sys.path.insert(0, {REPO!r})\n"
            "from flux_system.remote import connect\n"
            f"sub = connect({srv.target!r})\n"
            "c = sub.processes.spawn(['sh', '-c', 'while :; do echo tick; sleep 0.05; done'])\n"
            "print(c.pid, flush=True)\n"
            "time.sleep(120)\n"
        )
        client = subprocess.Popen([PYTHON, "-c", code], stdout=subprocess.PIPE)
        try:
            assert client.stdout is not None
            pid = int(client.stdout.readline())
            assert _alive(pid)  # positive control: the child ran
            client.send_signal(signal.SIGKILL)
            client.wait(30)
            proc = psutil.Process(pid) if psutil.pid_exists(pid) else None
            if proc is not None:
                with pytest.raises(psutil.NoSuchProcess):
                    proc.wait(30)
                    proc.status()
            assert not _alive(pid)
        finally:
            if client.poll() is None:
                client.kill()
            client.wait(30)
            assert client.stdout is not None
            client.stdout.close()


def test_server_killed_mid_request(tmp_path: Path) -> None:
    sock = os.path.join(tempfile.mkdtemp(prefix="flux-port-"), "s.sock")
    server = subprocess.Popen(
        [PYTHON, "-c", child_server_code(tmp_path, sock)], stdout=subprocess.PIPE
    )
    orphans: list[psutil.Process] = []
    try:
        assert server.stdout is not None
        assert server.stdout.readline().strip() == b"ready"
        sub = connect(f"unix:{sock}")
        outcome: list[BaseException] = []

        def run() -> None:
            try:
                sub.processes.run(["sleep", "60"])
            except BaseException as exc:
                outcome.append(exc)

        t = threading.Thread(target=run)
        t.start()
        # Wait until the server really started the child (a sleep among its children).
        me = psutil.Process(server.pid)
        for _ in range(3000):
            orphans = [p for p in me.children(recursive=True) if p.name() == "sleep"]
            if orphans:
                break
            time.sleep(0.01)
        else:
            pytest.fail("the server never started the child")
        # A SIGKILLed server cannot end its unsandboxed children (no code of it runs):
        # they are this test's to remove, in the finally below.
        server.send_signal(signal.SIGKILL)
        t.join(60)
        assert len(outcome) == 1 and isinstance(outcome[0], UnknownOutcomeError), outcome
        with pytest.raises(UnreachableError):  # a read on the lost connection
            sub.files.read_bytes("x")
        sub.close()
    finally:
        if server.poll() is None:
            server.kill()
        server.wait(30)
        assert server.stdout is not None
        server.stdout.close()
        for orphan in orphans:
            with contextlib.suppress(psutil.NoSuchProcess):
                orphan.kill()
        psutil.wait_procs(orphans, timeout=10)


def test_lost_read_is_unreachable_and_lost_mutation_unknown(tmp_path: Path) -> None:
    # A real peer that completes the handshake, reads one request, then vanishes.
    path = os.path.join(tempfile.mkdtemp(prefix="flux-port-"), "peer.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(4)
    welcome = {
        "type": "welcome",
        "protocol": "flux-port",
        "version": 1,
        "server": {
            "hostname": "peer",
            "system": "Linux",
            "release": "x",
            "machine": "x",
            "uid": 0,
            "pid": 1,
            "flux_version": "0",
            "sandbox": [],
            "workspace": "/w",
        },
        "operations": ["read_bytes", "write_bytes", "metrics", "identity"],
        "limits": {
            "max_frame": 8388608,
            "max_chunk": 4194304,
            "max_in_flight": 8,
            "max_buffered_output": 1048576,
            "heartbeat_s": 30.0,
        },
    }

    def peer() -> None:
        for _ in range(2):
            conn, _ = listener.accept()
            read_frames(conn, count=1)  # hello
            conn.sendall(frame(json.dumps(welcome).encode()))
            read_frames(conn, count=1)  # the request
            conn.close()

    t = threading.Thread(target=peer, daemon=True)
    t.start()
    try:
        from flux_system.remote._channel import open_socket_channel
        from flux_system.remote._client import Client

        read = Client(
            open_socket_channel(f"unix:{path}", ssl_context=None, timeout=10),
            target="peer",
            token=None,
            timeout=10,
        )
        with pytest.raises(UnreachableError):
            read.call("read_bytes", {"path": "a"})
        write = Client(
            open_socket_channel(f"unix:{path}", ssl_context=None, timeout=10),
            target="peer",
            token=None,
            timeout=10,
        )
        with pytest.raises(UnknownOutcomeError):
            write.call("write_bytes", {"path": "a", "size": 1}, upload=("upload", b"x"))
    finally:
        listener.close()
        os.unlink(path)


def test_stuck_reader_on_one_child_does_not_stall_another(tmp_path: Path) -> None:
    with served(tmp_path) as srv, connect(srv.target) as sub:
        # Nobody ever reads the first child's output: its bounded buffer drops.
        procs = typing.cast(RemoteProcesses, sub.processes)
        flood = procs.spawn(["sh", "-c", "head -c 20000000 /dev/zero"], buffer_cap=4096)
        quick = sub.processes.spawn(["sh", "-c", "echo hi"])
        assert quick.join(60)
        assert quick.read_output().stdout == b"hi\n"
        assert flood.join(60)
        out = flood.read_output()
        assert len(out.stdout) <= 4096 and out.stdout_dropped >= 20000000 - 4096


def test_silent_connection_is_closed_after_three_heartbeats(tmp_path: Path) -> None:
    # The silence limit is kept by the kernel (SO_RCVTIMEO): a handshaken peer that
    # then says nothing is closed, and one that keeps talking is not.
    from flux_system.remote import ServerLimits

    with served(tmp_path, limits=ServerLimits(heartbeat_s=0.2)) as srv:
        talker = _handshaken(srv.target)
        silent = _handshaken(srv.target)
        for nonce in range(1, 9):  # 1.6 s of pings at half the interval: kept open
            talker.sendall(frame(b'{"type":"ping","nonce":%d}' % nonce))
            assert json.loads(read_frames(talker, count=1)[0])["type"] == "pong"
            time.sleep(0.2 / 2)
        assert read_frames(silent) == []  # closed without a word (hang guard: 20 s)
        talker.close()
        silent.close()
    assert any("silent for three heartbeats" in line for line in srv.log), srv.log


@pytest.mark.parametrize("trickle", [False, True])
def test_hello_must_arrive_within_handshake_s(tmp_path: Path, trickle: bool) -> None:
    # handshake_s (0.5 s here) bounds the hello, however slowly it trickles in; the
    # silence limit (three heartbeats, 90 s here) applies only after it.
    from flux_system.remote import ServerLimits

    with served(tmp_path, limits=ServerLimits(handshake_s=0.5, heartbeat_s=30.0)) as srv:
        s = raw_connect(srv.target)  # a 20 s socket timeout: the hang guard
        hello = frame(HELLO)
        if trickle:  # one byte every 0.1 s: each read is quick, the whole is not
            with contextlib.suppress(OSError):
                for byte in hello[:-1]:
                    s.sendall(bytes([byte]))
                    time.sleep(0.1)
        assert read_frames(s) == []  # closed without a welcome
        s.close()
        with connect(srv.target) as sub:  # positive control: a prompt hello is served
            assert sub.files.exists(".")
    assert any("no hello within 0.5 s" in line for line in srv.log), srv.log
