"""One writer per log: a second writer gets LogLockedError, or waits when asked."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest

from flux_evidence import EvidenceLog, EvidenceReason, LogLockedError, verify

HOLDER = """
import sys
from flux_evidence import EvidenceLog
log = EvidenceLog.open(sys.argv[1], fsync="never")
log.append("child", {"step": 1})
print("locked", flush=True)
sys.stdin.readline()
log.append("child", {"step": 2})
log.close()
"""


def test_second_open_in_process_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "ev.jsonl"
    with EvidenceLog.open(path):
        with pytest.raises(LogLockedError) as info:
            EvidenceLog.open(path)
        assert info.value.reason is EvidenceReason.LOCKED
    EvidenceLog.open(path).close()  # released on close


def test_second_process_is_refused_then_waits(tmp_path: Path) -> None:
    path = tmp_path / "ev.jsonl"
    with subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as child:
        _drive(child, path)
    (log,) = opened
    with log:
        # The waiter saw the child's second append: nothing interleaved or lost.
        assert [r.data for r in log.query(kind="child")] == [{"step": 1}, {"step": 2}]
        log.append("parent", {})
    verify(path)


opened: list[EvidenceLog] = []


def _drive(child: subprocess.Popen[str], path: Path) -> None:
    try:
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline().strip() == "locked"
        with pytest.raises(LogLockedError):
            EvidenceLog.open(path)
        opened.clear()
        waiter = threading.Thread(
            target=lambda: opened.append(EvidenceLog.open(path, wait_for_lock=True))
        )
        waiter.start()
        child.stdin.write("go\n")
        child.stdin.flush()
        waiter.join(timeout=30)
        assert not waiter.is_alive()
        assert child.wait(timeout=30) == 0
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
