"""A gate on ``os.fdatasync``: hold a group's flush in flight while a test looks."""

from __future__ import annotations

import os
import threading

import pytest

GATE_TIMEOUT_S = 20  # a gate never released within this fails the test, never hangs it


def gate_fdatasync(monkeypatch: pytest.MonkeyPatch) -> tuple[threading.Event, threading.Event]:
    """Patch ``os.fdatasync`` to signal the first event when a flush reaches it, then
    wait for the second before syncing for real. Returns (in_fsync, release)."""
    in_fsync, release = threading.Event(), threading.Event()
    real_fdatasync = os.fdatasync

    def gated_fdatasync(fd: int) -> None:
        in_fsync.set()
        release.wait(GATE_TIMEOUT_S)
        real_fdatasync(fd)

    monkeypatch.setattr(os, "fdatasync", gated_fdatasync)
    return in_fsync, release
