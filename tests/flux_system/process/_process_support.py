"""Shared helpers for the process tests: a workspace, survivor checks."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Any

import psutil

from flux_system import Workspace
from flux_system.process import _hierarchy

PYTHON = sys.executable
REPO = str(Path(__file__).resolve().parents[3])
# An interpreter every uid can run (the test interpreter may live under /root).
SYSTEM_PYTHON = "/usr/bin/python3"
# Set by tests/flux_system/process/test_hosts.py for the runs in a simulated host:
# "v2" (only cgroup2 mounted) or "none" (a tmpfs over /sys/fs/cgroup).
HOST_MODE = os.environ.get("FLUX_TEST_CGROUP_HOST", "")
# The one capability a simulated v2-only host here lacks: every controller is bound to
# v1 on this host, so cgroup2 offers no pids controller (test_hosts.py allows that skip).
PIDS_LIMIT = "a pids controller for tree cgroups (v1 pids, or v2 with pids delegated)"


def make_ws(root: Path) -> Workspace:
    return Workspace(root)


def procs(pids: list[int]) -> list[psutil.Process]:
    """psutil handles (identity pinned by start time) of the pids still present."""
    out = []
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            out.append(psutil.Process(pid))
    return out


def survivors(watched: list[psutil.Process]) -> list[psutil.Process]:
    """Processes of *watched* still present (zombies included: they were not reaped)."""
    alive = []
    for p in watched:
        with contextlib.suppress(psutil.NoSuchProcess):
            if p.is_running():
                alive.append(p)
    return alive


def cgroup_base() -> str | None:
    """This process's ``flux-<pid>`` cgroup in the hierarchy in use (may not exist)."""
    found = _hierarchy.detect()
    if found is None:
        return None
    return os.path.join(found.own, f"flux-{os.getpid()}")


def cgroup_dirs() -> frozenset[str]:
    """Every cgroup directory of this process: its base and everything below it."""
    base = cgroup_base()
    if base is None or not os.path.isdir(base):
        return frozenset()
    found = {base}
    for here, dirs, _ in os.walk(base):
        found.update(os.path.join(here, d) for d in dirs)
    return frozenset(found)


def descendants() -> frozenset[int]:
    """Pids of every descendant of this process (zombies included)."""
    return frozenset(p.pid for p in psutil.Process().children(recursive=True))


def count_spawn_paths(monkeypatch: Any) -> dict[str, int]:
    """Count the calls of each spawn path, ``posix_spawn`` and ``Popen``'s fork_exec
    (decision 0138): the positive control that the path under test really ran."""
    import subprocess

    from flux_system.process import _posix_spawn as posix_spawn

    calls = {"posix_spawn": 0, "popen": 0}
    real_spawn = posix_spawn.spawn
    real_fork_exec = subprocess._fork_exec  # type: ignore[attr-defined]

    def spawn(*args: Any, **kwargs: Any) -> int:
        calls["posix_spawn"] += 1
        return real_spawn(*args, **kwargs)

    def fork_exec(*args: Any, **kwargs: Any) -> int:
        calls["popen"] += 1
        pid: int = real_fork_exec(*args, **kwargs)
        return pid

    monkeypatch.setattr(posix_spawn, "spawn", spawn)
    monkeypatch.setattr(subprocess, "_fork_exec", fork_exec)
    return calls
