"""Every operation through a real server over a real Unix socket."""

from __future__ import annotations

import json
import os
import threading
import typing
from pathlib import Path

import psutil
import pytest

from flux_system import (
    PortError,
    PortReason,
    RefusedError,
    UnknownOutcomeError,
    UnservedError,
    Workspace,
)
from flux_system.remote import ServerLimits, connect
from tests.flux_system.remote._harness import guarded, served


@pytest.fixture
def remote(tmp_path: Path):  # type: ignore[no-untyped-def]
    with served(tmp_path) as srv, connect(srv.target) as sub:
        yield srv, sub


def test_file_operations_round_trip(remote) -> None:  # type: ignore[no-untyped-def]
    srv, sub = remote
    f = sub.files
    f.mkdir("d/e")
    f.write_bytes("d/e/a.txt", b"one\n")
    f.append_bytes("d/e/a.txt", b"two\n")
    assert f.read_bytes("d/e/a.txt") == b"one\ntwo\n"
    assert f.read_text("d/e/a.txt") == "one\ntwo\n"
    assert f.read_bytes("d/e/a.txt", limit=100) == b"one\ntwo\n"
    assert f.list_dir("d") == ["e"]
    assert f.walk(".") == ["d", "d/e", "d/e/a.txt"]
    info = f.stat("d/e/a.txt")
    assert info.is_file and info.size == 8
    assert f.exists("d/e/a.txt") is True
    assert f.exists("missing") is False
    assert f.is_dir("d") is True
    f.rename("d/e/a.txt", "d/b.txt")
    assert srv.workspace.read_bytes("d/b.txt") == b"one\ntwo\n"  # the far side's own view
    f.remove("d", recursive=True)
    assert not f.exists("d")
    f.write_bytes("empty", b"")
    assert f.read_bytes("empty") == b""


def test_contents_larger_than_a_frame_travel_chunked(tmp_path: Path) -> None:
    limits = ServerLimits(max_frame=64 * 1024, max_chunk=16 * 1024)
    with served(tmp_path, limits=limits) as srv, connect(srv.target) as sub:
        data = os.urandom(1024 * 1024 + 7)
        sub.files.write_bytes("big.bin", data)
        assert (tmp_path / "big.bin").read_bytes() == data
        assert sub.files.read_bytes("big.bin") == data
        result = sub.processes.run(["wc", "-c"], stdin=data)
        assert result.stdout.strip() == str(len(data)).encode()


def test_confinement_refusal_is_refused_with_the_far_sides_reason(remote) -> None:  # type: ignore[no-untyped-def]
    _, sub = remote
    with pytest.raises(RefusedError) as info:
        sub.files.read_bytes("../outside")
    assert info.value.remote_error == "PathEscapeError"
    assert info.value.remote_reason == "escape"
    with pytest.raises(RefusedError) as missing:
        sub.files.read_bytes("nope")
    assert missing.value.remote_error == "NotFoundError"


def test_run_with_stdin_and_exit_code(remote) -> None:  # type: ignore[no-untyped-def]
    _, sub = remote
    result = sub.processes.run(["sh", "-c", "cat; echo err >&2; exit 3"], stdin=b"in\n")
    assert (result.exit_code, result.stdout, result.stderr) == (3, b"in\n", b"err\n")


def test_spawn_streams_output_live_and_ends_once(remote) -> None:  # type: ignore[no-untyped-def]
    _, sub = remote
    first = threading.Event()
    seen: list[tuple[str, bytes]] = []

    def on_output(stream: str, data: bytes) -> None:
        seen.append((stream, data))
        first.set()

    gate = sub.files
    gate.write_bytes("go", b"")
    gate.remove("go")
    # The child prints, then waits until the test creates a file: the first line must
    # arrive while it is still running (live delivery, no timing involved).
    child = sub.processes.spawn(
        ["sh", "-c", "echo first; while [ ! -e go ]; do sleep 0.01; done; echo second"],
        on_output=on_output,
    )
    assert first.wait(30), "no live output"
    assert child.status().running
    gate.write_bytes("go", b"")
    assert child.join(30)
    status = child.status()
    assert (status.running, status.exit_code) == (False, 0)
    assert b"".join(d for s, d in seen if s == "stdout") == b"first\nsecond\n"


def test_kill_mid_stream_gives_one_terminal_event(remote) -> None:  # type: ignore[no-untyped-def]
    _, sub = remote
    child = sub.processes.spawn(["sh", "-c", "while :; do echo x; done"])
    pid = child.pid
    assert pid > 0 and psutil.pid_exists(pid)
    child.kill()
    assert child.join(30)
    status = child.status()
    assert status.signal == 9 and status.exit_code == -9
    with pytest.raises(psutil.NoSuchProcess):
        psutil.Process(pid).wait(10) if psutil.pid_exists(pid) else psutil.Process(pid)


def test_fast_failing_command_still_ends(remote) -> None:  # type: ignore[no-untyped-def]
    _, sub = remote
    with pytest.raises(RefusedError) as info:
        sub.processes.spawn(["no-such-command-xyz"])
    assert info.value.remote_error == "SpawnError"
    child = sub.processes.spawn(["sh", "-c", "exit 7"])
    assert child.join(30)
    assert child.status().exit_code == 7


def test_identity_is_remotely_reported(remote) -> None:  # type: ignore[no-untyped-def]
    _, sub = remote
    me = sub.identity.identity()
    assert me.remotely_reported is True
    assert me.pid == os.getpid()  # the in-thread server is this process


def test_metrics_are_measured_or_unavailable(remote) -> None:  # type: ignore[no-untyped-def]
    _, sub = remote
    m = sub.metrics.metrics()
    assert m.memory_total.value is not None and m.memory_total.value > 0
    for name in ("cpu_percent", "load_1m", "swap_used", "disk_used", "uptime"):
        metric = getattr(m, name)
        assert (metric.value is None) != (metric.unavailable is None)


def test_families_not_served_are_unserved(tmp_path: Path) -> None:
    with served(tmp_path, with_system=False) as srv, connect(srv.target) as sub:
        assert sub.files.exists(".") is True
        with pytest.raises(UnservedError):
            sub.processes.run(["true"])
        with pytest.raises(UnservedError):
            sub.http.http_request("GET", "https://example.com/")


def test_invalid_arguments_are_refused_by_structure(remote) -> None:  # type: ignore[no-untyped-def]
    _, sub = remote
    client = sub.closer.__self__
    with pytest.raises(PortError) as info:
        client.call("stat", {"path": "a", "extra": 1})
    assert info.value.reason is PortReason.PROTOCOL
    assert info.value.remote_error == "ValidationError"
    with pytest.raises(TypeError):
        sub.processes.run("echo hi")


def test_many_concurrent_requests_respect_the_in_flight_cap(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"x" * 4096)
    with served(tmp_path, limits=ServerLimits(max_in_flight=4)) as srv:
        with connect(srv.target) as sub:
            client = sub.closer.__self__  # type: ignore[union-attr]
            calls = [client.start("read_bytes", {"path": "f"}) for _ in range(1000)]
            values = [client.wait(c, 60) for c in calls]
            assert all(isinstance(v, dict) and v["size"] == 4096 for v in values)
    srv_log = "\n".join(srv.log)  # written when the server closed the connection
    assert "1000 requests" in srv_log


def _running_gates(gate: str) -> int:
    """Direct children of this process (the in-thread server's runs) running *gate*.

    Each run is a direct child (``System`` forks it); the forks a running shell makes
    for ``sleep`` are grandchildren and are not counted, whatever state they are in.
    """
    count = 0
    for proc in psutil.Process().children(recursive=False):
        try:
            if proc.cmdline() == ["sh", "-c", gate]:
                count += 1
        except psutil.Error:
            continue
    return count


def _peak(log: list[str]) -> int:
    line = "\n".join(log)
    return int(line.split("peak ")[1].split(" ")[0])


def test_in_flight_cap_is_reached_and_never_exceeded(tmp_path: Path) -> None:
    # Twelve runs that cannot finish until the test says so, on a connection capped at
    # four: exactly four start; the rest wait in the socket (back-pressure, not
    # refusal) and all twelve complete once released.
    import time

    gate = "while [ ! -e go ]; do sleep 0.01; done; echo done"
    with served(tmp_path, limits=ServerLimits(max_in_flight=4)) as srv:
        with connect(srv.target) as sub:
            client = sub.closer.__self__  # type: ignore[union-attr]
            calls = [client.start("run", {"argv": ["sh", "-c", gate]}) for _ in range(12)]
            for _ in range(6000):  # hang guard: the four must start
                if _running_gates(gate) >= 4:
                    break
                time.sleep(0.01)
            assert _running_gates(gate) == 4  # the cap, reached
            assert not any(c.done.is_set() for c in calls)
            (tmp_path / "go").write_bytes(b"")  # beside the connection, which is full
            values = [client.wait(c, 120) for c in calls]
            assert all(isinstance(v, dict) and v["exit_code"] == 0 for v in values)
    assert "12 requests" in "\n".join(srv.log)
    assert _peak(srv.log) == 4


def test_client_gone_at_the_in_flight_cap_has_its_runs_killed(tmp_path: Path) -> None:
    # At the cap the server reads nothing more (back-pressure), so it cannot read the
    # EOF of a client that left either; it must still notice and kill what runs.
    import time

    gate = "while [ ! -e go ]; do sleep 0.01; done; echo never"
    with served(tmp_path, limits=ServerLimits(max_in_flight=2)) as srv:
        try:
            sub = connect(srv.target)
            client = sub.closer.__self__  # type: ignore[union-attr]
            for _ in range(5):  # no timeout: without the check they would run for ever
                client.start("run", {"argv": ["sh", "-c", gate], "timeout": None})
            for _ in range(6000):  # hang guard: the two must start
                if _running_gates(gate) >= 2:
                    break
                time.sleep(0.01)
            assert _running_gates(gate) == 2  # positive control: the cap is reached
            sub.close()
            deadline = time.monotonic() + 60  # hang guard
            while _running_gates(gate) and time.monotonic() < deadline:
                time.sleep(0.01)
            assert _running_gates(gate) == 0
        finally:
            (tmp_path / "go").write_bytes(b"")  # on failure, let the server close
    assert any("2 requests" in line and "connection lost" in line for line in srv.log), srv.log


def test_workspace_unchanged_after_refused_write(remote, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _, sub = remote
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(RefusedError):
        sub.files.write_bytes("../escape.txt", b"x")
    assert sorted(os.listdir(tmp_path)) == before
    assert not (tmp_path.parent / "escape.txt").exists()


def test_native_workspace_is_a_files_port(tmp_path: Path) -> None:
    from flux_system.port import FilesPort

    with Workspace(tmp_path) as ws:
        assert isinstance(ws, FilesPort)


def test_streamed_stdin_reaches_the_child_with_back_pressure(tmp_path: Path) -> None:

    from flux_system.remote._parts import RemoteProcesses

    # A 1 KiB window: 8 MiB must flow through it, acknowledged as the child reads.
    with served(tmp_path, limits=ServerLimits(max_buffered_output=1024)) as srv:
        with connect(srv.target) as sub:
            procs = typing.cast(RemoteProcesses, sub.processes)
            child = procs.spawn(["sh", "-c", "wc -c"], stream_stdin=True)
            block = os.urandom(64 * 1024)
            for _ in range(128):
                assert child.write_stdin(block)
            child.close_stdin()
            assert child.join(60)
            assert child.read_output().stdout.strip() == str(128 * len(block)).encode()
            # stdin given as bytes travels the same way
            echo = procs.spawn(["cat"], stdin=b"fed whole\n")
            assert echo.join(60)
            assert echo.read_output().stdout == b"fed whole\n"


def test_child_that_stops_reading_stdin_ends_the_writer(remote) -> None:  # type: ignore[no-untyped-def]
    _, sub = remote
    child = sub.processes.spawn(["head", "-c", "10"], stream_stdin=True)
    sent_all = True
    for _ in range(1000):
        if not child.write_stdin(b"x" * 65536):
            sent_all = False
            break
    assert sent_all is False  # the child exited after 10 bytes: the writer was told
    assert child.join(60)
    assert child.status().exit_code == 0


def test_canonical_and_general_read_requests_are_answered_alike(tmp_path: Path) -> None:
    # A real server answers each read vector (ports/vectors/v1/args.json and the
    # read-canonical frames) twice on one connection: in the spelling it recognises
    # without JSON, and with one space added (the general path). Both answers must be
    # the same bytes: same value, same refusal (invalid arguments, a missing file, a
    # path escaping the workspace).
    import json
    import struct

    from flux_system.remote._canonical import fast_read_request
    from flux_system.remote._frame import FrameDecoder
    from tests.flux_system.remote._harness import HELLO, frame, raw_connect

    ports = Path(__file__).resolve().parents[3] / "ports" / "vectors" / "v1"
    bodies = [
        bytes.fromhex(c["bytes"])[4:]
        for c in json.loads((ports / "args.json").read_text())["cases"]
    ]
    for case in json.loads((ports / "frames.json").read_text())["cases"]:
        if case["id"].startswith("read-canonical"):
            bodies.append(bytes.fromhex(case["bytes"])[4:])
    bodies += [
        b'{"type":"request","id":1,"op":"read_bytes","args":{"path":"../x","limit":null}}',
        b'{"type":"request","id":1,"op":"read_bytes","args":{"path":"big","limit":10}}',
        b'{"type":"request","id":1,"op":"read_bytes","args":{"path":"big","limit":null}}',
    ]
    (tmp_path / "a").write_bytes(b"contents of a\n")
    (tmp_path / "f4k").write_bytes(os.urandom(4096))
    (tmp_path / "big").write_bytes(os.urandom(200_000))  # past the inline read: chunked
    recognised = 0
    with served(tmp_path) as srv:
        s = raw_connect(srv.target)
        s.sendall(frame(HELLO))
        decoder = FrameDecoder()
        arrived: list[bytes] = []

        def next_frame() -> bytes:
            while not arrived:
                data = s.recv(65536)
                assert data, "the server closed the connection"
                arrived.extend(decoder.feed_bodies(data))
            return arrived.pop(0)

        assert json.loads(next_frame())["type"] == "welcome"
        for body in bodies:
            spaced = body.replace(b'"type":"request",', b'"type": "request",', 1)
            assert spaced != body and fast_read_request(spaced) is None
            recognised += fast_read_request(body) is not None
            answers = []
            for spelling in (body, spaced):
                s.sendall(struct.pack(">I", len(spelling)) + spelling)
                got = [next_frame()]
                while json.loads(got[-1])["type"] == "chunk":
                    got.append(next_frame())
                answers.append(got)
            assert answers[0] == answers[1], body[:120]
        s.close()
    assert recognised >= 6  # positive control: the recognised spelling was exercised


def test_unencodable_argument_is_a_typed_error(remote) -> None:  # type: ignore[no-untyped-def]
    # A lone surrogate cannot travel in UTF-8 JSON (the server's models refuse it too):
    # the client says so with a PortError instead of letting UnicodeEncodeError out.
    _, sub = remote
    with pytest.raises(PortError) as info:
        sub.files.read_bytes("\udcff")
    assert info.value.reason is PortReason.PROTOCOL and info.value.op == "read_bytes"
    with pytest.raises(PortError):
        sub.files.write_bytes("a\udcff", b"x")
    assert sub.files.exists(".")  # the connection is unharmed


def test_a_name_that_is_not_utf8_fails_its_call_not_the_connection(tmp_path: Path) -> None:
    """A file whose name is not UTF-8 (made by a served command, say) cannot travel in
    UTF-8 JSON: list_dir killed the connection's thread, walk left its caller waiting
    for ever. Now the call is refused and the connection goes on."""
    os.close(os.open(os.path.join(bytes(tmp_path), b"\xff-name"), os.O_CREAT | os.O_WRONLY))
    (tmp_path / "sub").mkdir()
    with served(tmp_path) as srv, connect(srv.target) as sub:
        assert "\udcff-name" in srv.workspace.list_dir(".")  # positive control: it is there
        for call in (lambda: sub.files.list_dir("."), lambda: sub.files.walk(".")):
            with pytest.raises(RefusedError, match="not valid UTF-8"):
                guarded(call)
        assert sub.files.list_dir("sub") == []  # the same connection still serves


def test_a_result_larger_than_a_frame_fails_its_call_not_the_connection(tmp_path: Path) -> None:
    for i in range(100):
        (tmp_path / f"a-rather-long-file-name-{i:04d}").touch()
    limits = ServerLimits(max_frame=2048, max_chunk=1024)
    with served(tmp_path, limits=limits) as srv, connect(srv.target) as sub:
        with pytest.raises(RefusedError, match="exceeds the 2048-byte ceiling"):
            guarded(lambda: sub.files.walk("."))
        with pytest.raises(RefusedError, match="exceeds the 2048-byte ceiling"):
            guarded(lambda: sub.files.list_dir("."))
        # A run whose result cannot travel did run: its outcome is unknown, not refused.
        with pytest.raises(UnknownOutcomeError, match="it ran"):
            guarded(lambda: sub.processes.run(["/bin/sh", "-c", "head -c 4000 /dev/zero"]))
        assert sub.files.exists("a-rather-long-file-name-0000") is True  # still up


def test_an_error_naming_a_path_that_is_not_utf8_still_travels(tmp_path: Path) -> None:
    """No client path can hold a lone surrogate (refused at validation), but a server's
    own error may name one from its file system: it is sent escaped, not lost."""
    import socket

    from flux_system import WorkspaceError, WorkspaceReason
    from flux_system.remote import ServerConfig
    from flux_system.remote._channel import SocketChannel
    from flux_system.remote._connection import Connection

    a, b = socket.socketpair()
    with Workspace(tmp_path) as ws, a, b:
        conn = Connection(ServerConfig(ws), SocketChannel(a), "test")
        bad = WorkspaceError(
            "read_bytes: gone", op="read_bytes", path="\udcff", reason=WorkspaceReason.NOT_FOUND
        )
        conn.fail(7, "read_bytes", bad)
        b.settimeout(10)
        head = b.recv(4, socket.MSG_WAITALL)
        body = b.recv(int.from_bytes(head, "big"), socket.MSG_WAITALL)
    sent = json.loads(body)
    assert sent["id"] == 7 and sent["error"]["target"] == "\\udcff", sent
