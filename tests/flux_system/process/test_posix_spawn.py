"""The default spawn through ``posix_spawn`` (decision 0138) makes the child that the
``Popen`` path makes: the same fds, cwd, session, signal state, environment and argv,
and the same typed errors. Every comparison checks that each path really ran.
"""

from __future__ import annotations

import json
import os
import signal
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from flux_system import ProcessReason, SpawnError, System
from flux_system.process import _posix_spawn as posix_spawn
from tests.flux_system.process._process_support import PYTHON, count_spawn_paths, make_ws

_PROBE = r"""
import json, os, sys
print(json.dumps({
    "argv": sys.argv[1:],
    "fds": sorted(int(fd) for fd in os.listdir("/proc/self/fd")),
    "cwd": os.getcwd(),
    "session_leader": os.getsid(0) == os.getpid(),
    "group_leader": os.getpgrp() == os.getpid(),
    "env": dict(os.environ),
    "stdin_is_null": os.path.samestat(os.fstat(0), os.stat("/dev/null")),
    "umask": os.umask(0o22),
}))
"""


@pytest.fixture
def system(tmp_path: Path) -> Iterator[System]:
    (tmp_path / "sub").mkdir()
    with System(make_ws(tmp_path)) as s:
        yield s


def _probe(system: System) -> dict[str, Any]:
    result = system.run(
        [PYTHON, "-c", _PROBE, "one", "two words", ""], cwd="sub", env={"FLUX_PROBE": "x=y"}
    )
    assert result.exit_code == 0, result.stderr
    probe: dict[str, Any] = json.loads(result.stdout)
    return probe


def _signals(system: System) -> dict[str, str]:
    """The signal state of a child that changes none (``cat``, unlike Python, which
    ignores SIGPIPE and SIGXFSZ at start-up)."""
    result = system.run(["cat", "/proc/self/status"])
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.decode().splitlines()
    return dict(line.split(":\t", 1) for line in lines if line.startswith("Sig"))


def test_the_default_spawn_makes_the_child_popen_makes(
    system: System, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert posix_spawn.available()  # glibc >= 2.34 on every host we support
    # A stray inheritable fd and an ignored signal in the parent: closefrom must drop
    # the one; an ignored signal other than SIGPIPE/SIGXFSZ stays ignored on both paths.
    stray = os.open(os.devnull, os.O_RDONLY)
    os.set_inheritable(stray, True)
    old_usr2 = signal.signal(signal.SIGUSR2, signal.SIG_IGN)
    try:
        calls = count_spawn_paths(monkeypatch)
        fast, fast_signals = _probe(system), _signals(system)
        assert calls == {"posix_spawn": 2, "popen": 0}
        monkeypatch.setattr(posix_spawn, "available", lambda: False)
        slow, slow_signals = _probe(system), _signals(system)
        assert calls == {"posix_spawn": 2, "popen": 2}
    finally:
        signal.signal(signal.SIGUSR2, old_usr2)
        os.close(stray)
    assert fast == slow
    assert fast_signals == slow_signals
    assert fast["argv"] == ["one", "two words", ""]
    assert fast["fds"] == [0, 1, 2, 3]  # 3: the probe's own listdir fd
    assert fast["cwd"] == str(tmp_path / "sub")
    assert fast["session_leader"] and fast["group_leader"] and fast["stdin_is_null"]
    assert fast["env"]["FLUX_PROBE"] == "x=y"
    ignored = int(fast_signals["SigIgn"], 16)
    assert not ignored & (1 << (signal.SIGPIPE - 1))  # the parent ignores SIGPIPE
    assert ignored & (1 << (signal.SIGUSR2 - 1))


def test_std_fds_below_3_take_the_popen_path(
    system: System, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A child end landing on fd 0-2 (this process started with them closed) could stay
    # close-on-exec after dup2 onto itself: such a spawn goes through Popen.
    calls = count_spawn_paths(monkeypatch)
    real_pipe2 = os.pipe2
    saved: dict[int, int] = {}

    def pipe2(flags: int) -> tuple[int, int]:
        if not saved:  # the stdout pipe (no stdin pipe): make it fds 1 and 2
            saved.update({fd: os.dup(fd) for fd in (1, 2)})  # both copies first
            for fd in saved:
                os.close(fd)
        return real_pipe2(flags)

    monkeypatch.setattr(os, "pipe2", pipe2)
    try:
        result = system.run(["sh", "-c", "echo out; echo err >&2"])
    finally:
        monkeypatch.setattr(os, "pipe2", real_pipe2)
        for fd, copy in saved.items():
            os.dup2(copy, fd)
            os.close(copy)
    assert (result.stdout, result.stderr) == (b"out\n", b"err\n")
    assert calls == {"posix_spawn": 0, "popen": 1}


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        ("missing", ProcessReason.NOT_FOUND),
        ("not_executable", ProcessReason.NOT_EXECUTABLE),
        ("no_shebang", ProcessReason.NOT_EXECUTABLE),
        ("directory", ProcessReason.NOT_EXECUTABLE),
    ],
)
def test_a_failed_posix_spawn_is_reported_as_popen_reports_it(
    system: System,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    make: str,
    reason: ProcessReason,
) -> None:
    target = tmp_path / "sub" / "prog"
    if make == "not_executable":
        target.write_text("#!/bin/sh\n")
    elif make == "no_shebang":
        target.write_bytes(b"\x00\x01 not a program\n")
        target.chmod(stat.S_IRWXU)
    elif make == "directory":
        target.mkdir()
    calls = count_spawn_paths(monkeypatch)
    with pytest.raises(SpawnError) as info:
        system.run(["./prog"], cwd="sub")
    assert info.value.reason == reason
    assert "./prog" in str(info.value)
    assert calls == {"posix_spawn": 1, "popen": 1}  # tried, then repeated to say why
    assert system.run(["true"]).exit_code == 0


def test_a_posix_spawn_leader_reaps_as_popen_does() -> None:
    assert posix_spawn.available()
    leader = posix_spawn.Leader()
    assert leader.pid is None
    r, w = os.pipe2(os.O_CLOEXEC)
    null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
    cwd = os.open("/", os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        err = posix_spawn.spawn(
            leader,
            b"/bin/sh",
            [b"sh", b"-c", b"exit 7"],
            [],
            fds=(null, w, w),
            cwd_fd=cwd,
            mask=frozenset(),
        )
    finally:
        for fd in (r, w, null, cwd):
            os.close(fd)
    assert err == 0 and leader.pid is not None
    assert leader.wait() == 7
    assert leader.wait() == 7 and leader.returncode == 7  # reaped once, remembered
