"""Shared helpers for the process tests: a workspace, survivor checks."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import psutil

from flux_system import Workspace

PYTHON = sys.executable
REPO = str(Path(__file__).resolve().parents[3])


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
