"""``flux exec`` stdin: streamed when not a terminal (bounded memory, EOF passed on),
``/dev/null`` for a terminal unless ``-i``, and a child that stops reading is fine."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from pathlib import Path

import pytest

from tests._capabilities import require
from tests.flux_runtime._flux import HANG_GUARD_S, flux, flux_argv, flux_env

_MIB = 1 << 20


def _openpty() -> tuple[int, int]:
    try:
        return os.openpty()
    except OSError:
        require(False, "a pseudo-terminal (/dev/ptmx)")
        raise


def test_piped_stdin_reaches_the_command(tmp_path: Path) -> None:
    run = flux("exec", "--workspace", str(tmp_path), "--", "cat", input=b"typed input\n")
    assert run.returncode == 0
    assert run.stdout == b"typed input\n"


def test_stdin_is_closed_at_its_end(tmp_path: Path) -> None:
    # `cat` ends only at EOF: "done" is printed only if flux closed the pipe.
    run = flux(
        "exec", "--workspace", str(tmp_path), "--", "sh", "-c", "cat; echo done", input=b"abc"
    )
    assert run.returncode == 0
    assert run.stdout == b"abcdone\n"


def test_a_command_that_stops_reading_is_not_an_error(tmp_path: Path) -> None:
    # `seq 1000000000 | flux exec -- head -1`
    with subprocess.Popen(["seq", "1000000000"], stdout=subprocess.PIPE) as seq:
        assert seq.stdout is not None
        run = subprocess.run(
            [*flux_argv(), "exec", "--workspace", str(tmp_path), "--", "head", "-1"],
            stdin=seq.stdout,
            capture_output=True,
            env=flux_env(),
            timeout=HANG_GUARD_S,
            check=False,
        )
        seq.stdout.close()
        seq.kill()
    assert run.returncode == 0, run.stderr
    assert run.stdout == b"1\n"
    assert run.stderr == b""


@pytest.mark.parametrize(("interactive", "expected"), [(False, b"/dev/null\n"), (True, b"pipe")])
def test_a_terminal_stdin_is_forwarded_only_with_interactive(
    tmp_path: Path, interactive: bool, expected: bytes
) -> None:
    master, slave = _openpty()
    try:
        flags = ["-i"] if interactive else []
        command = ["readlink", "/proc/self/fd/0"]
        run = subprocess.run(
            [*flux_argv(), "exec", "--workspace", str(tmp_path), *flags, "--", *command],
            stdin=slave,
            capture_output=True,
            env=flux_env(),
            timeout=HANG_GUARD_S,
            check=False,
        )
    finally:
        os.close(slave)
        os.close(master)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith(expected)  # never the terminal itself


def test_interactive_forwards_what_is_typed_at_the_terminal(tmp_path: Path) -> None:
    master, slave = _openpty()
    try:
        args = [*flux_argv(), "exec", "--workspace", str(tmp_path), "-i", "--", "cat"]
        with subprocess.Popen(
            args, stdin=slave, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=flux_env()
        ) as proc:
            os.write(master, b"typed\n\x04")  # a line, then Ctrl-D at a line start: EOF
            out, err = proc.communicate(timeout=HANG_GUARD_S)
    finally:
        os.close(slave)
        os.close(master)
    assert proc.returncode == 0, err
    assert out == b"typed\n"


@pytest.mark.slow
def test_100_mib_stdin_streams_through_cat_in_bounded_memory(tmp_path: Path) -> None:
    def peak_rss_kib(size: int, report: Path) -> int:
        args = [*flux_argv(), "exec", "--workspace", str(tmp_path), "--report", str(report)]
        with open(os.devnull, "wb") as sink:
            proc = subprocess.Popen(
                [*args, "--", "cat"], stdin=subprocess.PIPE, stdout=sink, env=flux_env()
            )
            assert proc.stdin is not None
            block = b"x" * _MIB

            def feed() -> None:
                assert proc.stdin is not None
                left = size
                while left:
                    n = min(left, len(block))
                    proc.stdin.write(block[:n])
                    left -= n
                proc.stdin.close()

            feeder = threading.Thread(target=feed, daemon=True)
            feeder.start()
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
            feeder.join(HANG_GUARD_S)
        assert proc.returncode == 0
        summary = json.loads(report.read_text())
        assert summary["stdin"]["bytes"] == size
        assert summary["stdout"]["bytes"] == size
        return usage.ru_maxrss

    small = peak_rss_kib(1, tmp_path / "small.json")
    big = peak_rss_kib(100 * _MIB, tmp_path / "big.json")
    assert big - small <= 32 * 1024, f"peak RSS grew by {(big - small) // 1024} MiB"


# -- started with one of fds 0-2 closed ----------------------------------------------------


def _flux_with_closed(fd: int, tmp_path: Path, *command: str) -> subprocess.CompletedProcess[bytes]:
    report = tmp_path / "report.json"
    ws = tmp_path / "ws"
    ws.mkdir()
    return subprocess.run(
        [*flux_argv(), "exec", "--workspace", str(ws), "--report", str(report), "--", *command],
        capture_output=True,
        env=flux_env(),
        timeout=HANG_GUARD_S,
        check=False,
        preexec_fn=lambda: os.close(fd),  # flux starts with this fd closed
    )


def test_started_with_stdin_closed_the_command_reads_eof_and_nothing_else(
    tmp_path: Path,
) -> None:
    """Nothing flux opens (a cgroup directory, a pipe) may take fd 0's place and pass
    for its stdin: the command sees end of input at once and the report says ``null``."""
    run = _flux_with_closed(0, tmp_path, "sh", "-c", "wc -c; echo done")
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == [b"0", b"done"]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["stdin"] == {"mode": "null", "bytes": 0}


@pytest.mark.parametrize("fd", [1, 2])
def test_started_with_stdout_or_stderr_closed_flux_runs_without_a_traceback(
    tmp_path: Path, fd: int
) -> None:
    run = _flux_with_closed(fd, tmp_path, "sh", "-c", "echo out; echo err >&2; exit 3")
    assert run.returncode == 3
    other = run.stderr if fd == 1 else run.stdout
    assert other == (b"err\n" if fd == 1 else b"out\n")  # the open one still works
    assert b"Traceback" not in run.stderr + run.stdout
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["exit_code"] == 3
