"""System.run basics: argv, environment, fds, cwd, stdin, output caps (real processes)."""

from __future__ import annotations

import asyncio
import os
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from flux_system import (
    Limits,
    Privileges,
    ProcessError,
    ProcessReason,
    ProcessTimeoutError,
    SpawnError,
    System,
)
from tests.flux_system.process._process_support import PYTHON, make_ws


@pytest.fixture
def system(tmp_path: Path) -> Iterator[System]:
    (tmp_path / "sub").mkdir()
    with System(make_ws(tmp_path)) as s:
        yield s


def test_str_command_is_type_error(system: System) -> None:
    with pytest.raises(TypeError, match="argv"):
        system.run("echo hi")
    with pytest.raises(TypeError, match="argv"):
        system.run([b"echo"])  # type: ignore[list-item]


@pytest.mark.parametrize("timeout", [0, -1, float("nan"), float("inf"), 10**400])
def test_timeout_out_of_range_is_refused_before_spawning(system: System, timeout: float) -> None:
    for call in (
        lambda: system.run(["true"], timeout=timeout),
        lambda: asyncio.run(system.arun(["true"], timeout=timeout)),
        lambda: system.spawn(["true"], timeout=timeout),
    ):
        with pytest.raises(ValueError, match="timeout"):
            call()
    assert psutil.Process().children(recursive=True) == []


@pytest.mark.parametrize("timeout", [1e308, 1.7976931348623157e308])
def test_timeout_near_the_float_maximum_is_waited(system: System, timeout: float) -> None:
    """Finite timeouts are honoured however large: 1e308 s used to raise OverflowError
    in the driver after the spawn ((end - now) * 1000 is inf), found through
    ``flux exec --timeout 1e308``."""
    assert system.run(["true"], timeout=timeout).exit_code == 0
    assert asyncio.run(system.arun(["true"], timeout=timeout)).exit_code == 0
    child = system.spawn(["true"], timeout=timeout)
    assert child.join(30) and child.status().exit_code == 0


def test_empty_argv_is_error(system: System) -> None:
    with pytest.raises(SpawnError) as ei:
        system.run([])
    assert ei.value.reason is ProcessReason.INVALID_ARGV


def test_not_found(system: System) -> None:
    with pytest.raises(SpawnError) as ei:
        system.run(["flux-no-such-program-xyz"])
    assert ei.value.reason is ProcessReason.NOT_FOUND


def test_argv0_resolved_on_child_path(system: System, tmp_path: Path) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    tool = bindir / "flux-tool"
    tool.write_text("#!/bin/sh\necho from-tool\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    result = system.run(["flux-tool"], env={"PATH": f"{bindir}:/usr/bin:/bin"})
    assert result.stdout == b"from-tool\n"
    with pytest.raises(SpawnError) as ei:  # not on the child's (default) PATH
        system.run(["flux-tool"])
    assert ei.value.reason is ProcessReason.NOT_FOUND


def test_sandbox_that_is_not_one_is_refused(tmp_path: Path) -> None:
    with pytest.raises(TypeError):
        System(make_ws(tmp_path), sandbox=object())  # type: ignore[arg-type]


def test_exit_code_and_signal(system: System) -> None:
    assert system.run(["sh", "-c", "exit 7"]).exit_code == 7
    killed = system.run(["sh", "-c", "kill -9 $$"])
    assert (killed.exit_code, killed.signal) == (-9, 9)


def test_parent_secrets_never_reach_child(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLUX_TEST_SECRET", "s3cr3t-value")
    monkeypatch.setenv("LD_PRELOAD", "/nonexistent/evil.so")
    monkeypatch.setenv("PYTHONSTARTUP", "/nonexistent/evil.py")
    monkeypatch.setenv("HOME", "/home/flux-test")
    allow = {"PATH", "HOME", "LD_PRELOAD", "PYTHONSTARTUP"}  # hooks refused even if listed
    with System(make_ws(tmp_path), env_allowlist=frozenset(allow)) as s:
        listed = s.run(["env"], env={"EXTRA": "given"}).stdout_text
        environ = s.run(["cat", "/proc/self/environ"]).stdout
    names = {line.split("=", 1)[0] for line in listed.splitlines()}
    assert "FLUX_TEST_SECRET" not in names
    assert "LD_PRELOAD" not in names and "PYTHONSTARTUP" not in names
    assert "HOME=/home/flux-test" in listed.splitlines()
    assert "EXTRA=given" in listed.splitlines()
    assert b"s3cr3t-value" not in environ and b"LD_PRELOAD" not in environ


def test_caller_env_applied_last(system: System) -> None:
    out = system.run(["sh", "-c", 'echo "$HOME"'], env={"HOME": "/override"}).stdout
    assert out == b"/override\n"


def test_only_std_fds_reach_child(system: System) -> None:
    leaked = os.open(os.devnull, os.O_RDONLY)
    os.set_inheritable(leaked, True)
    try:
        code = (
            "import os\n"
            "def is_open(fd):\n"
            "    try: os.fstat(fd)\n"
            "    except OSError: return False\n"
            "    return True\n"
            "print([fd for fd in range(3, 1024) if is_open(fd)])"
        )
        out = system.run([PYTHON, "-S", "-c", code]).stdout
    finally:
        os.close(leaked)
    assert out == b"[]\n"


def test_cwd_is_pinned_beneath_root(system: System, tmp_path: Path) -> None:
    assert system.run(["pwd", "-P"], cwd="sub").stdout == f"{tmp_path}/sub\n".encode()


def test_cwd_symlink_swap_never_runs_outside(tmp_path: Path) -> None:
    root = tmp_path / "root"
    outside = tmp_path / "outside"
    (root / "d").mkdir(parents=True)
    outside.mkdir()
    stop = threading.Event()

    def swapper() -> None:
        real, swap = root / "d", root / "d-real"
        while not stop.is_set():
            try:
                os.replace(real, swap)
                real.symlink_to(outside)
                real.unlink()
                os.replace(swap, real)
            except OSError:
                pass

    t = threading.Thread(target=swapper)
    t.start()
    try:
        with System(make_ws(root)) as s:
            for _ in range(150):
                try:
                    s.run(["touch", "marker"], cwd="d")
                except Exception:
                    continue
    finally:
        stop.set()
        t.join()
    assert not (outside / "marker").exists()


def test_large_stdin_delivered(system: System) -> None:
    data = os.urandom(4 << 20)  # far beyond a pipe buffer
    assert system.run(["wc", "-c"], stdin=data).stdout.strip() == str(len(data)).encode()


def test_stdin_not_consumed_is_error(system: System) -> None:
    with pytest.raises(ProcessError) as ei:
        system.run(["true"], stdin=b"unread input")
    assert ei.value.reason is ProcessReason.STDIN_NOT_CONSUMED
    with pytest.raises(ProcessError) as ei:
        system.run(["head", "-c", "1"], stdin=os.urandom(4 << 20))
    assert ei.value.reason is ProcessReason.STDIN_NOT_CONSUMED
    # A failing child that left stdin unread is a result (its failure), not this error.
    assert system.run(["sh", "-c", "exit 3"], stdin=b"x").exit_code == 3


def test_both_streams_64mib_capped_no_deadlock_rss_bounded(system: System) -> None:
    me = psutil.Process()
    base = me.memory_info().rss
    peak = [base]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], me.memory_info().rss)
            stop.wait(0.005)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        script = "head -c 64M /dev/zero & head -c 64M /dev/zero >&2; wait"
        result = system.run(["sh", "-c", script], timeout=60)
    finally:
        stop.set()
        sampler.join()
    assert result.exit_code == 0
    assert len(result.stdout) == len(result.stderr) == 1 << 20
    assert result.stdout_truncated and result.stderr_truncated
    assert result.stdout_dropped == result.stderr_dropped == (64 << 20) - (1 << 20)
    assert peak[0] - base < 24 << 20  # 2 x 1 MiB kept + chunks in flight, never 128 MiB


def test_flood_past_the_cap_still_reads_the_other_stream_and_keeps_the_deadline(
    tmp_path: Path,
) -> None:
    """Past the cap stdout is spliced away in bursts; stderr and the timeout still work.

    ``yes`` floods stdout for the whole run; a line on stderr written in the middle is
    captured, and the timeout ends the run on time with both captures in the error.
    """
    script = "yes & sleep 0.3; echo marker >&2; exec sleep 30"
    with System(make_ws(tmp_path), output_cap=4096) as system:
        with pytest.raises(ProcessTimeoutError) as info:
            system.run(["sh", "-c", script], timeout=1.5)
    assert info.value.stderr == b"marker\n"
    assert info.value.stdout == b"y\n" * 2048  # the cap's worth, then spliced away


def test_utf8_cut_at_cap_gives_replacement_char(tmp_path: Path) -> None:
    with System(make_ws(tmp_path), output_cap=5) as s:
        result = s.run(["printf", "abcd\\303\\251fgh"])
    assert result.stdout == b"abcd\xc3"
    text = result.stdout_text
    assert text.startswith("abcd\ufffd")
    assert result.stdout_truncated and text.endswith("]\n") and "truncated" in text


def test_observer_sees_lines(system: System) -> None:
    seen: list[tuple[str, bytes]] = []
    system.run(
        ["sh", "-c", "echo one; echo two >&2; printf three"],
        observer=lambda stream, line: seen.append((stream, line)),
    )
    assert sorted(seen) == [("stderr", b"two\n"), ("stdout", b"one\n"), ("stdout", b"three")]


def test_privileges_umask_uid_and_no_new_privs(tmp_path: Path) -> None:
    priv = Privileges(no_new_privs=True, uid=65534, gid=65534, umask=0o077)
    with System(make_ws(tmp_path), privileges=priv) as s:
        out = s.run(["sh", "-c", "umask; id -u; id -g; id -G; grep NoNewPrivs /proc/self/status"])
    lines = out.stdout_text.split("\n")
    assert lines[0] == "0077"
    assert lines[1:4] == ["65534", "65534", "65534"]
    assert lines[4].split() == ["NoNewPrivs:", "1"]


def test_address_space_limit_enforced(system: System) -> None:
    alloc = "import sys; b = bytearray(int(sys.argv[1]) << 20); print(len(b))"
    limits = Limits(address_space=256 << 20)
    small = system.run([PYTHON, "-S", "-c", alloc, "16"], limits=limits)
    assert small.exit_code == 0, small.stderr_text  # the limit leaves room to start
    big = system.run([PYTHON, "-S", "-c", alloc, "512"], limits=limits)
    assert big.exit_code != 0
    assert b"MemoryError" in big.stderr
    unlimited = system.run([PYTHON, "-S", "-c", alloc, "512"])
    assert unlimited.exit_code == 0  # the same allocation without the limit succeeds


def test_observer_sees_lines_live_and_past_the_cap(tmp_path: Path) -> None:
    # The child waits for a file that only the observer creates, after seeing the
    # first line: if lines were delivered only at exit, the child would give up.
    script = (
        "echo first; i=0; "
        "while [ ! -e go ] && [ $i -lt 1000 ]; do sleep 0.01; i=$((i+1)); done; "
        "[ -e go ] || exit 9; "
        "i=0; while [ $i -lt 50 ]; do echo line$i; i=$((i+1)); done"
    )
    seen: list[bytes] = []

    def observe(stream: str, line: bytes) -> None:
        seen.append(line)
        if line == b"first\n":
            (tmp_path / "go").touch()

    with System(make_ws(tmp_path), output_cap=8) as s:
        result = s.run(["sh", "-c", script], observer=observe, timeout=30)
    assert result.exit_code == 0
    assert result.stdout == b"first\nli" and result.stdout_truncated
    assert seen == [b"first\n"] + [b"line%d\n" % i for i in range(50)]
