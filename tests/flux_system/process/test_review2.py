"""Regressions from the second adversarial review of System (docs/decisions/0022).

Real processes; faults (a signal arriving at one exact point) are injected by a
one-shot gate on the function running at that point. Each test failed before its fix.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from flux_system import Limits, ProcessReason, SpawnError, System
from flux_system.process import _posix_spawn as posix_spawn
from flux_system.process._cgroup import process_limit_available
from flux_system.process._drain import MAX_LINE, Capture, Ring, grow_pipe
from flux_system.process._reap import cgroup_available
from tests._capabilities import require
from tests.flux_system.process._process_support import PIDS_LIMIT, make_ws


@pytest.fixture
def system(tmp_path: Path) -> Iterator[System]:
    with System(make_ws(tmp_path), max_children=1) as s:
        s.run(["true"])  # warm the process-wide state (subreaper, libc lookups)
        yield s


def _gone(pid: int) -> bool:
    """Whether *pid* no longer exists (neither running nor an unreaped zombie)."""
    try:
        psutil.Process(pid).status()
    except psutil.NoSuchProcess:
        return True
    return False


def _one_shot(
    monkeypatch: pytest.MonkeyPatch,
    owner: Any,
    name: str,
    after: Callable[[Any], None],
    armed: Callable[[], bool] = lambda: True,
) -> list[Any]:
    """Wrap ``owner.name``: the first call once *armed* runs, then *after* gets its result."""
    real = getattr(owner, name)
    seen: list[Any] = []

    def gate(*args: Any, **kwargs: Any) -> Any:
        result = real(*args, **kwargs)
        if not seen and armed():
            seen.append(result)
            monkeypatch.setattr(owner, name, real)
            after(result)
        return result

    monkeypatch.setattr(owner, name, gate)
    return seen


def _on_fork(
    monkeypatch: pytest.MonkeyPatch,
    after: Callable[[int], None],
    armed: Callable[[], bool] = lambda: True,
) -> list[int]:
    """Gate both spawn paths (Popen's ``fork_exec`` and ``posix_spawn``, decision
    0138): the first child made once *armed* has its pid recorded, then *after* runs
    with it, still inside the spawn call."""
    seen: list[int] = []
    real_fork_exec = subprocess._fork_exec  # type: ignore[attr-defined]
    real_spawn = posix_spawn.spawn

    def note(pid: int | None) -> None:
        if pid and not seen and armed():
            seen.append(pid)
            after(pid)

    def fork_exec(*args: Any, **kwargs: Any) -> int:
        pid: int = real_fork_exec(*args, **kwargs)
        note(pid)
        return pid

    def spawn(leader: posix_spawn.Leader, *args: Any, **kwargs: Any) -> int:
        err = real_spawn(leader, *args, **kwargs)
        if not err:
            note(leader.pid)
        return err

    monkeypatch.setattr(subprocess, "_fork_exec", fork_exec)
    monkeypatch.setattr(posix_spawn, "spawn", spawn)
    return seen


def _interrupt(_: object) -> None:
    raise KeyboardInterrupt


# -- a signal delivered to the parent during the spawn --------------------------------


@pytest.mark.parametrize("limits", [None, Limits(open_files=64)], ids=["vfork", "preexec"])
def test_interrupt_right_after_the_fork_leaves_no_child(
    system: System, monkeypatch: pytest.MonkeyPatch, limits: Limits | None
) -> None:
    # A SIGINT pending when fork_exec returns raises before Popen stores the pid: the
    # child was left running, unreaped, in its cgroup (found there now).
    require(cgroup_available(), "a usable cgroup (v1 pids or v2) for tree containment")
    forked = _on_fork(monkeypatch, _interrupt)
    with pytest.raises(KeyboardInterrupt):
        system.run(["sleep", "30"], limits=limits)
    assert forked and _gone(forked[0])
    assert system.run(["true"]).exit_code == 0  # the slot (max_children=1) was given back


def test_interrupt_while_popen_waits_for_the_exec_leaves_no_child(
    system: System, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Raised out of Popen's errpipe read (its wait for the exec): pid stored, no reap.
    forked = _on_fork(monkeypatch, lambda pid: None)
    _one_shot(monkeypatch, os, "read", _interrupt, armed=lambda: bool(forked))
    with pytest.raises(KeyboardInterrupt):
        system.run(["sleep", "30"], limits=Limits(open_files=64))
    assert forked and _gone(forked[0])
    assert system.run(["true"]).exit_code == 0


def test_interrupt_after_popen_returned_leaves_no_child(
    system: System, monkeypatch: pytest.MonkeyPatch
) -> None:
    forked = _on_fork(monkeypatch, lambda pid: None)
    _one_shot(monkeypatch, os, "set_blocking", _interrupt, armed=lambda: bool(forked))
    with pytest.raises(KeyboardInterrupt):
        system.run(["sleep", "30"])
    assert forked and _gone(forked[0])
    assert system.run(["true"]).exit_code == 0


def _wait_gone(pid: int) -> bool:
    """Whether *pid* is gone within a generous bound (another thread reaps it)."""
    for _ in range(1000):
        if _gone(pid):
            return True
        time.sleep(0.01)
    return False


def _no_thread(*args: object) -> None:
    raise RuntimeError("can't start new thread")


@pytest.mark.parametrize("fault", ["thread refused", "interrupt in start"])
def test_spawn_whose_drain_thread_fails_leaves_no_child(
    system: System, monkeypatch: pytest.MonkeyPatch, fault: str
) -> None:
    # ManagedChild's drain thread could not start (thread limit), or a signal came
    # while Thread.start waited for it: the child was left running, its slot taken.
    forked = _on_fork(monkeypatch, lambda pid: None)
    if fault == "thread refused":
        monkeypatch.setattr(threading, "_start_new_thread", _no_thread)
        expected: type[BaseException] = RuntimeError
    else:
        _one_shot(monkeypatch, threading.Thread, "start", _interrupt)
        expected = KeyboardInterrupt
    with pytest.raises(expected):
        system.spawn(["sleep", "30"])
    monkeypatch.undo()
    assert forked and _wait_gone(forked[0])
    child = system.spawn(["true"])  # the slot (max_children=1) was given back
    assert child.join(30) and child.status().exit_code == 0


# -- the line observer ------------------------------------------------------------------


@pytest.mark.parametrize("buffer", [Capture, Ring])
def test_short_lines_after_a_long_one_reach_the_observer_one_by_one(
    buffer: type[Capture] | type[Ring],
) -> None:
    # One read holding a line longer than MAX_LINE and then short lines: everything
    # after the long line's first piece went out in MAX_LINE slices, many lines each.
    seen: list[bytes] = []
    stream = buffer("stdout", 1 << 20, lambda name, piece: seen.append(piece))
    data = b"A" * (MAX_LINE + 4464) + b"\n" + b"b\n" * 40_000
    r, w = os.pipe()
    try:
        grow_pipe(w)  # the whole payload in the pipe: one read takes it
        assert os.write(w, data) == len(data)
        os.close(w)
        w = -1
        while stream.read_from(r):
            pass
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)
    assert b"".join(seen) == data
    assert all(piece.count(b"\n") <= 1 for piece in seen)
    assert all(piece.endswith(b"\n") or len(piece) == MAX_LINE for piece in seen)
    assert seen.count(b"b\n") == 40_000


# -- the environment -------------------------------------------------------------------

# Startup hooks that run code, load libraries or grant ambient authority, for runtimes
# and tools the first review's list did not name (each one, e.g. LUA_INIT, runs the
# code in its value at interpreter start).
MORE_HOOKS = {
    "LUA_INIT": "os.execute('touch pwned')",
    "LUA_INIT_5_4": "os.execute('touch pwned')",
    "LUA_CPATH": "/nonexistent/?.so",
    "DOTNET_STARTUP_HOOKS": "/nonexistent/Hook.dll",
    "CORECLR_PROFILER_PATH": "/nonexistent/profiler.so",
    "COR_PROFILER_PATH": "/nonexistent/profiler.so",
    "COMPlus_EnableDiagnostics": "1",
    "ERL_AFLAGS": "-eval halt()",
    "PHPRC": "/nonexistent/php.ini",
    "PHP_INI_SCAN_DIR": "/nonexistent",
    "R_PROFILE_USER": "/nonexistent/Rprofile",
    "TCLLIBPATH": "/nonexistent",
    "VIMINIT": ":!touch pwned",
    "EXINIT": ":!touch pwned",
    "HGRCPATH": "/nonexistent/hgrc",
    "NPM_CONFIG_SCRIPT_SHELL": "/nonexistent/sh",
    "SUDO_ASKPASS": "/nonexistent/askpass",
    "MANPAGER": "sh -c 'touch pwned'",
    "BROWSER": "/nonexistent/browser",
    "PS1": "$(touch pwned)",
    "FPATH": "/nonexistent",
    "DBUS_SESSION_BUS_ADDRESS": "unix:path=/nonexistent/bus",
    "XAUTHORITY": "/nonexistent/.Xauthority",
    "KRB5CCNAME": "FILE:/nonexistent/krb5cc",
}


def test_more_startup_hooks_never_copied(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in MORE_HOOKS.items():
        monkeypatch.setenv(name, value)
    allow = frozenset({"PATH", *MORE_HOOKS})  # refused even when the allow-list names them
    with System(make_ws(tmp_path), env_allowlist=allow) as s:
        listed = s.run(["env"]).stdout_text
    names = {line.split("=", 1)[0] for line in listed.splitlines()}
    assert names.isdisjoint(MORE_HOOKS), sorted(names & set(MORE_HOOKS))


# -- limits ------------------------------------------------------------------------------


def test_process_limit_holds_while_the_spawning_thread_leaves_the_cgroup(
    system: System, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The spawning thread is a member while it forks (pids.max = nproc + 1); it moved
    # home before pids.max went back to nproc, so a child that forked in between (the
    # spawner descheduled: widened here by a pause) got nproc + 1 processes.
    require(process_limit_available(), PIDS_LIMIT)
    forked = _on_fork(monkeypatch, lambda pid: None)
    # The first os.write after the fork is the spawner's own (Popen writes nothing).
    _one_shot(monkeypatch, os, "write", lambda n: time.sleep(0.5), armed=lambda: bool(forked))
    result = system.run(["sh", "-c", "(echo forked) & wait"], limits=Limits(nproc=1), timeout=30)
    assert b"forked" not in result.stdout


# -- exit statuses -----------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["run", "arun", "spawn"])
def test_sigchld_ignored_is_refused_not_reported_as_success(system: System, mode: str) -> None:
    # SIGCHLD ignored (set here, or inherited through exec from a parent that ignores
    # it): the kernel discards every exit status, so `false` came back as exit 0 — or
    # pidfd_open lost the race to the auto-reap and the command ran but "failed".
    previous = signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    try:
        with pytest.raises(SpawnError) as ei:
            if mode == "run":
                system.run(["false"])
            elif mode == "arun":
                asyncio.run(system.arun(["false"]))
            else:
                system.spawn(["false"]).join(30)
    finally:
        signal.signal(signal.SIGCHLD, previous)
    assert ei.value.reason is ProcessReason.STATUS_UNAVAILABLE
    assert system.run(["false"]).exit_code == 1  # the slot was given back
