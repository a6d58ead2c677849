"""``flux exec`` output is live, back-pressured, capped on request, and ends with its reader."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.flux_runtime._flux import HANG_GUARD_S, alive, flux, popen


def _read_until(fd: int, marker: bytes) -> bytes:
    """Read *fd* until *marker* has arrived (hang guard: HANG_GUARD_S)."""
    got = b""
    deadline = time.monotonic() + HANG_GUARD_S
    while marker not in got:
        left = deadline - time.monotonic()
        assert left > 0, f"hang guard: {marker!r} never arrived (got {got!r})"
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            data = os.read(fd, 4096)
            assert data, f"EOF before {marker!r} (got {got!r})"
            got += data
    return got


def _wait_for_file(path: Path) -> str:
    deadline = time.monotonic() + HANG_GUARD_S
    while not path.exists():
        assert time.monotonic() < deadline, f"hang guard: {path} never appeared"
        time.sleep(0.01)
    return path.read_text()


_PIPES = {"stdin": subprocess.DEVNULL, "stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
# $$ is a host pid only outside the sandbox's pid namespace: these runs are --sandbox off
# (tests/flux_runtime/test_cli_exec_sandbox.py kills sandboxed trees by a marker).
_PIDFILE = "echo $$ > pid.tmp; mv pid.tmp pid; exec yes"


def _wait_until_write_blocked(pid: int) -> None:
    """Wait until a thread of *pid* sleeps in a pipe write (its wait channel says so).

    Where the kernel shows no wait channel names, a short delay stands in.
    """
    deadline = time.monotonic() + HANG_GUARD_S
    while True:
        channels = []
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError):
                channels.append((task / "wchan").read_text())
        if any("pipe_write" in c for c in channels):
            return
        if not any(c not in ("", "0") for c in channels):
            time.sleep(0.5)  # no wait channel names here: give the write time to block
            return
        assert time.monotonic() < deadline, f"hang guard: no blocked write in {channels}"
        time.sleep(0.01)


def test_first_line_of_a_slow_producer_arrives_before_it_exits(tmp_path: Path) -> None:
    # The producer cannot exit before the test creates `go`: whatever arrives first
    # was delivered live. A progress bar's "\r" (no newline) must arrive too.
    script = "echo first; printf 'progress\\r'; while [ ! -e go ]; do sleep 0.01; done; echo second"
    with popen("exec", "--workspace", str(tmp_path), "--", "sh", "-c", script, **_PIPES) as proc:
        assert proc.stdout is not None
        early = _read_until(proc.stdout.fileno(), b"progress\r")
        assert early == b"first\nprogress\r"
        assert proc.poll() is None  # still running: the producer waits for `go`
        (tmp_path / "go").touch()
        rest, err = proc.communicate(timeout=HANG_GUARD_S)
        assert rest == b"second\n"
        assert proc.returncode == 0, err


def test_reader_going_away_kills_the_tree_and_exits_141(tmp_path: Path) -> None:
    with popen(
        "exec",
        "--workspace",
        str(tmp_path),
        "--sandbox",
        "off",
        "--",
        "sh",
        "-c",
        _PIDFILE,
        **_PIPES,
    ) as proc:
        assert proc.stdout is not None
        assert len(_read_until(proc.stdout.fileno(), b"y\ny\ny\n")) >= 6  # `| head -c 6`
        pid = int(_wait_for_file(tmp_path / "pid"))
        assert alive(pid)  # positive control: the producer was running
        proc.stdout.close()
        _, err = proc.communicate(timeout=HANG_GUARD_S)  # hang guard, not a timing
        assert proc.returncode == 141
        assert b"Traceback" not in err
        assert not alive(pid)


def test_a_blocked_writer_is_still_killed_by_timeout(tmp_path: Path) -> None:
    # Nobody reads flux's stdout: flux's write blocks, the pipe from the command fills,
    # the command blocks writing. --timeout must still kill it, and flux must exit.
    # 3 s: ample time for both writes to block first, even on a loaded host.
    args = (
        "exec",
        "--workspace",
        str(tmp_path),
        "--timeout",
        "3",
        "--sandbox",
        "off",
        "--",
        "sh",
        "-c",
        _PIDFILE,
    )
    with popen(*args, **_PIPES) as proc:
        pid = int(_wait_for_file(tmp_path / "pid"))
        _wait_until_write_blocked(proc.pid)  # flux's own write to its stdout
        _wait_until_write_blocked(pid)  # and the command's, into its full pipe
        assert proc.wait(timeout=HANG_GUARD_S) == 124  # stdout never read
        assert not alive(pid)
        assert proc.stderr is not None
        assert b"timed out after 3.0 s; sh was killed" in proc.stderr.read()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_still_ends_flux_while_its_write_is_blocked(
    tmp_path: Path, sig: signal.Signals
) -> None:
    with popen(
        "exec",
        "--workspace",
        str(tmp_path),
        "--sandbox",
        "off",
        "--",
        "sh",
        "-c",
        _PIDFILE,
        **_PIPES,
    ) as proc:
        pid = int(_wait_for_file(tmp_path / "pid"))
        assert proc.stdout is not None
        _read_until(proc.stdout.fileno(), b"y\n")  # flowing; then nobody reads any more
        _wait_until_write_blocked(proc.pid)
        proc.send_signal(sig)
        assert proc.wait(timeout=HANG_GUARD_S) == 128 + sig
        assert not alive(pid)


def test_slow_reader_applies_back_pressure(tmp_path: Path) -> None:
    # The command writes 64 MiB and then creates `done`. While the test reads nothing,
    # it cannot get far: at most flux's queue and the pipes' buffers are in flight.
    script = "head -c 67108864 /dev/zero; touch done"
    with popen("exec", "--workspace", str(tmp_path), "--", "sh", "-c", script, **_PIPES) as proc:
        assert proc.stdout is not None
        first = _read_until(proc.stdout.fileno(), b"\0")
        time.sleep(1.0)  # time to run ahead, if it could (a delay, not a timing check)
        assert not (tmp_path / "done").exists()
        total = len(first)
        while chunk := proc.stdout.read(1 << 20):
            total += len(chunk)
        assert proc.wait(timeout=HANG_GUARD_S) == 0
        assert total == 64 << 20
        assert (tmp_path / "done").exists()


def test_output_cap_passes_that_many_bytes_and_says_so_once(tmp_path: Path) -> None:
    script = "head -c 3000000 /dev/zero | tr '\\0' a; echo tail >&2"
    run = flux("exec", "--workspace", str(tmp_path), "--output-cap", "10", "--", "sh", "-c", script)
    assert run.returncode == 0  # drained past the cap: the command never blocked
    assert run.stdout == b"a" * 10
    assert run.stderr.count(b"stdout reached --output-cap") == 1
    assert b"tail\n" in run.stderr


def test_no_cap_by_default(tmp_path: Path) -> None:
    run = flux("exec", "--workspace", str(tmp_path), "--", "head", "-c", "3000000", "/dev/zero")
    assert run.returncode == 0
    assert len(run.stdout) == 3000000
    assert b"output-cap" not in run.stderr
