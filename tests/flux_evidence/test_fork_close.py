"""A fork while another thread closes an evidence log (decision 0061): real threads, real fork.

The fork hook lets go of the child's copy of every open writer's descriptor. If the
fork lands after a ``close()`` in another thread closed that descriptor but before the
log stopped being an open writer, and the number was meanwhile reused by an unrelated
open, the child would close the unrelated file. The exact point is reached by a
one-shot gate on ``os.close``; the threads, files and fork are real.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from flux_evidence import EvidenceLog

GATE_S = 2.0  # how long the closer waits for a fork there (it never comes with the fix)
JOIN_S = 20  # a hung thread or child fails the test instead of blocking it


def test_fork_during_close_never_closes_a_reused_fd_number(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = EvidenceLog.open(tmp_path / "ev.jsonl", fsync="never")
    number = log._fd
    other = tmp_path / "other"
    other.write_bytes(b"unrelated")
    closer_ids: list[int] = []
    reused: list[int] = []
    at_gate, forked = threading.Event(), threading.Event()
    real_close = os.close

    def gated_close(fd: int) -> None:
        real_close(fd)
        if fd == number and threading.get_ident() in closer_ids and not reused:
            # Another open takes the freed number (the lowest free one) at once.
            reused.append(os.open(other, os.O_RDONLY | os.O_CLOEXEC))
            at_gate.set()
            forked.wait(GATE_S)

    def close_log() -> None:
        closer_ids.append(threading.get_ident())
        log.close()

    monkeypatch.setattr(os, "close", gated_close)
    closer = threading.Thread(target=close_log)
    closer.start()
    status = -1
    try:
        assert at_gate.wait(JOIN_S)
        assert reused == [number]  # control: the number now names the unrelated file
        inode = os.fstat(number).st_ino
        pid = os.fork()
        if pid == 0:  # pragma: no cover - runs in the child
            code = 3
            try:
                code = 0 if os.fstat(number).st_ino == inode else 1
            except OSError:
                code = 2  # the child's fork hook closed the unrelated file
            finally:
                os._exit(code)
        forked.set()
        _, status = os.waitpid(pid, 0)
    finally:
        forked.set()
        closer.join(JOIN_S)
        monkeypatch.undo()
        for fd in reused:
            os.close(fd)
    assert not closer.is_alive()
    assert os.waitstatus_to_exitcode(status) == 0
