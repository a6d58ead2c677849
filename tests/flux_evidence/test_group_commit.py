"""Group commit (``fsync="batch"``) under failure: a group's coalesced write cut short
by a real file-size limit, and a failed fsync with many appenders waiting. Every
appender gets an answer (no hang), nothing unacknowledged is claimed, nothing partial
is left in the file, and the log refuses further appends."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from flux_evidence import EvidenceError, EvidenceLog, EvidenceReason, verify
from tests.flux_evidence._gate import gate_fdatasync

JOIN_TIMEOUT_S = 20  # a thread still alive after this hangs (a lost wake-up)

# Four threads append in batch mode until the file-size limit cuts a group's write short
# (EFBIG, as a full disk would): the leader gets IO, its group's other appenders and all
# later appends FAILED. Prints the acknowledged seqs and the error reasons as JSON.
FULL_DISK_BATCH = """
import json, resource, signal, sys, threading
from flux_evidence import EvidenceError, EvidenceLog
log = EvidenceLog.open(sys.argv[1], fsync="batch")
log.append("small", {"i": 0})
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (log._size + 20_000, resource.RLIM_INFINITY))
acked, reasons, start = [], [], threading.Barrier(4)
def worker(t):
    start.wait()
    for i in range(400):
        try:
            acked.append(log.append("t", {"t": t, "i": i, "pad": "p" * 200}).seq)
        except EvidenceError as exc:
            reasons.append(exc.reason.value)
            try:
                log.append("after", {})
            except EvidenceError as again:
                reasons.append("then:" + again.reason.value)
            return
pool = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
for th in pool: th.start()
for th in pool: th.join()
log.close()
print(json.dumps({"acked": acked, "reasons": reasons}))
"""


def test_cut_short_group_write_fails_the_log_and_leaves_no_partial_line(
    tmp_path: Path,
) -> None:
    path = tmp_path / "ev.jsonl"
    out = subprocess.run(
        [sys.executable, "-c", FULL_DISK_BATCH, str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    report = json.loads(out.stdout)
    reasons = report["reasons"]
    assert len(reasons) == 8  # every thread stopped on an error, then was refused
    assert "io" in reasons  # the leader whose write failed
    assert set(reasons) <= {"io", "failed", "then:failed"}
    assert reasons.count("then:failed") == 4
    result = verify(path)
    assert result.torn_bytes == 0  # the group's partial lines were cut back
    with EvidenceLog.open(path, readonly=True) as log:
        stored = [r.seq for r in log if r.kind == "t"]
    assert set(report["acked"]) <= set(stored)  # every acknowledged record is there
    assert sorted(stored) == list(range(2, 2 + len(stored)))  # a chain, no gap


def test_failed_group_fsync_answers_every_waiter_and_fails_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "ev.jsonl"
    log = EvidenceLog.open(path, fsync="batch")
    real_fdatasync = os.fdatasync
    calls: list[int] = []
    # Records in the log (written or queued) as each successful fsync started: no
    # record beyond them can be covered by that fsync.
    synced_bounds: list[int] = []

    def failing_fdatasync(fd: int) -> None:
        calls.append(fd)
        if len(calls) == 6:
            raise OSError(errno.EIO, "injected")
        bound = len(log)
        real_fdatasync(fd)
        synced_bounds.append(bound)

    monkeypatch.setattr(os, "fdatasync", failing_fdatasync)
    acked: list[int] = []
    reasons: list[object] = []
    start = threading.Barrier(6)

    def worker(t: int) -> None:
        start.wait()
        for i in range(200):
            try:
                acked.append(log.append("t", {"t": t, "i": i}).seq)
            except EvidenceError as exc:
                reasons.append(exc.reason)
                return

    pool = [threading.Thread(target=worker, args=(t,), daemon=True) for t in range(6)]
    for th in pool:
        th.start()
    for th in pool:
        th.join(timeout=JOIN_TIMEOUT_S)
        assert not th.is_alive(), "a batch appender hangs after a failed group fsync"
    assert len(reasons) == 6 and EvidenceReason.IO in reasons
    assert set(reasons) <= {EvidenceReason.IO, EvidenceReason.FAILED}
    # Nothing was acknowledged that no successful fsync could cover.
    assert len(synced_bounds) == 5
    assert all(seq < max(synced_bounds) for seq in acked)
    with pytest.raises(EvidenceError) as info:
        log.append("more", {})
    assert info.value.reason is EvidenceReason.FAILED
    closer = threading.Thread(target=log.close, daemon=True)
    closer.start()
    closer.join(timeout=JOIN_TIMEOUT_S)
    assert not closer.is_alive(), "close hangs after a failed group fsync"
    monkeypatch.undo()
    with EvidenceLog.open(path) as again:  # the data reached the file: it verifies
        stored = {r.seq for r in again}
        again.append("after", {})
    assert set(acked) <= stored


def test_batch_coalesces_a_group_into_one_write_of_whole_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "ev.jsonl"
    writes: list[bytes] = []
    real_write = os.write

    def spy_write(fd: int, data: Any) -> int:
        writes.append(bytes(data))
        return real_write(fd, data)

    with EvidenceLog.open(path, fsync="batch") as log:
        monkeypatch.setattr(os, "write", spy_write)
        start = threading.Barrier(8)

        def worker() -> None:
            start.wait()
            for i in range(30):
                log.append("t", {"i": i})

        pool = [threading.Thread(target=worker) for _ in range(8)]
        for th in pool:
            th.start()
        for th in pool:
            th.join()
        monkeypatch.undo()
        head = log.head()
    assert all(w.endswith(b"\n") for w in writes)  # a write ends on a line boundary
    assert sum(w.count(b"\n") for w in writes) == 240
    assert len(writes) <= log._fsyncs  # one write per group (at most)
    assert verify(path, expect_head=head).head == head


def test_batch_head_names_only_durable_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While a group's fdatasync is under way its record is chained (``len`` counts it)
    but not durable: ``head()`` and ``checkpoint()`` must not cover it, or a crash now
    would make a later ``verify(expect_head=...)`` report a truncation that no returned
    append suffered. Once the append returns, both cover it."""
    path = tmp_path / "ev.jsonl"
    log = EvidenceLog.open(path, fsync="batch")
    before = log.head()
    checkpoint_before = log.checkpoint()
    in_fsync, release = gate_fdatasync(monkeypatch)
    returned: list[Any] = []
    appender = threading.Thread(target=lambda: returned.append(log.append("k", {"i": 1})))
    appender.start()
    try:
        assert in_fsync.wait(JOIN_TIMEOUT_S)
        assert len(log) == before.size + 1  # chained already
        assert log.head() == before  # not durable yet: not in the head
        assert log.checkpoint() == checkpoint_before  # nor in a checkpoint
        assert returned == []
    finally:
        release.set()
        appender.join(JOIN_TIMEOUT_S)
        monkeypatch.undo()
    assert not appender.is_alive()
    head = log.head()
    assert (head.size, head.hash) == (before.size + 1, returned[0].hash)
    assert log.checkpoint().size == head.size
    log.close()
    assert log.head() == head
    assert verify(path, expect_head=head).head == head
