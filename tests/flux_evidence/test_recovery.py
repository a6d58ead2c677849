"""Torn-tail recovery on open-for-write; tampering is never repaired; readers and the
verifier never modify the file."""

from __future__ import annotations

import hashlib
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from flux_evidence import (
    EvidenceLog,
    InvalidEvidenceError,
    TamperReason,
    verify,
)


def _make(path: Path, n: int = 5) -> bytes:
    with EvidenceLog.open(path, fsync="never") as log:
        for i in range(n):
            log.append("tick", {"i": i})
    return path.read_bytes()


@pytest.mark.parametrize("torn", [b"{", b'{"actor":null,"data":{"i":5},"ha', b"garbage \xff"])
def test_torn_tail_is_cut_and_recorded(tmp_path: Path, torn: bytes) -> None:
    path = tmp_path / "ev.jsonl"
    good = _make(path)
    path.write_bytes(good + torn)
    # Readers and the verifier see the complete records and leave the file alone.
    assert verify(path).torn_bytes == len(torn)
    with EvidenceLog.open(path, readonly=True) as reader:
        assert len(reader) == 6
    assert path.read_bytes() == good + torn
    # The writer cuts the torn bytes and says so in a recovery record.
    with EvidenceLog.open(path) as log:
        recovery = list(log)[-1]
        assert recovery.kind == "recovery"
        assert recovery.data == {
            "dropped_bytes": len(torn),
            "dropped_sha256": hashlib.sha256(torn).hexdigest(),
        }
        assert recovery.seq == 6
        head = log.head()
    data = path.read_bytes()
    assert data.startswith(good) and data.endswith(b"\n")
    assert verify(path, expect_head=head).torn_bytes == 0


def test_torn_genesis_gets_a_new_genesis_then_recovery(tmp_path: Path) -> None:
    path = tmp_path / "ev.jsonl"
    path.write_bytes(b'{"actor":null,"da')
    with EvidenceLog.open(path, log_id="fresh") as log:
        assert [r.kind for r in log] == ["genesis", "recovery"]
        assert log.log_id == "fresh"
    verify(path)


def test_empty_file_gets_a_genesis(tmp_path: Path) -> None:
    path = tmp_path / "ev.jsonl"
    path.write_bytes(b"")
    assert verify(path).head.size == 0
    with EvidenceLog.open(path, log_id="x") as log:
        assert [r.kind for r in log] == ["genesis"]
    assert verify(path).log_id == "x"


@pytest.mark.parametrize(
    ("where", "reason"),
    [(2, TamperReason.MODIFIED), (5, TamperReason.MODIFIED)],
)
def test_complete_bad_line_is_tampering_never_repaired(
    tmp_path: Path, where: int, reason: TamperReason
) -> None:
    path = tmp_path / "ev.jsonl"
    lines = _make(path).splitlines(keepends=True)
    lines[where] = lines[where].replace(b'"i":', b'"i":1', 1)
    tampered = b"".join(lines)
    path.write_bytes(tampered)
    with pytest.raises(InvalidEvidenceError) as info:
        EvidenceLog.open(path)
    assert (info.value.reason, info.value.seq) == (reason, where)
    assert path.read_bytes() == tampered  # nothing cut, nothing appended
    # The lock was released: the next open fails the same way, not with LogLockedError.
    with pytest.raises(InvalidEvidenceError):
        EvidenceLog.open(path)


def test_complete_garbage_last_line_is_not_a_torn_tail(tmp_path: Path) -> None:
    path = tmp_path / "ev.jsonl"
    tampered = _make(path) + b'{"actor":null}\n'
    path.write_bytes(tampered)
    with pytest.raises(InvalidEvidenceError) as info:
        EvidenceLog.open(path)
    assert (info.value.reason, info.value.seq) == (TamperReason.BAD_JSON, 6)
    assert path.read_bytes() == tampered


def test_readonly_open_of_tampered_log_fails(tmp_path: Path) -> None:
    path = tmp_path / "ev.jsonl"
    lines = _make(path).splitlines(keepends=True)
    path.write_bytes(b"".join([lines[0], lines[2], lines[1], *lines[3:]]))
    with pytest.raises(InvalidEvidenceError) as info:
        EvidenceLog.open(path, readonly=True)
    assert (info.value.reason, info.value.seq) == (TamperReason.REORDERED, 1)


FULL_DISK = """
import resource, signal, sys
from flux_evidence import EvidenceError, EvidenceLog
path = sys.argv[1]
log = EvidenceLog.open(path, fsync="always")
log.append("small", {"i": 0})
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
size = log._size
resource.setrlimit(resource.RLIMIT_FSIZE, (size + 100, resource.RLIM_INFINITY))
try:
    log.append("big", {"pad": "x" * 5000})
except EvidenceError as exc:
    print(exc.reason.value)
resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
log.append("after", {"i": 1})
log.close()
"""


def test_failed_write_leaves_no_partial_line(tmp_path: Path) -> None:
    """A write cut short by the file-size limit (EFBIG, as a full disk) is undone."""
    import subprocess
    import sys

    path = tmp_path / "ev.jsonl"
    out = subprocess.run(
        [sys.executable, "-c", FULL_DISK, str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert out.stdout.split() == ["io"]
    result = verify(path)
    assert result.torn_bytes == 0
    with EvidenceLog.open(path, readonly=True) as log:
        assert [r.kind for r in log] == ["genesis", "small", "after"]


# A writer opens a log with a torn tail and is SIGKILLed at one point of the recovery:
# just before its write over the tail ("pwrite"), after that write and before the cut of
# what is left of the tail ("ftruncate"), or after the cut, before the fdatasync.
# argv: path, the os function to die in.
KILLED_DURING_RECOVERY = """
import os, signal, sys
from flux_evidence import EvidenceLog
def die(*args):
    os.kill(os.getpid(), signal.SIGKILL)
setattr(os, sys.argv[2], die)
EvidenceLog.open(sys.argv[1], fsync="always")
"""


@pytest.mark.parametrize("die_in", ["pwrite", "ftruncate", "fdatasync"])
@pytest.mark.parametrize("torn_len", [7, 900])  # shorter and longer than a recovery line
def test_a_crash_during_recovery_leaves_no_dropped_byte_unrecorded(
    tmp_path: Path, die_in: str, torn_len: int
) -> None:
    """The torn bytes are never cut before the record naming them is in the file: after
    a kill at any step of the recovery, the next open finds every dropped byte in the
    recovery records (the original torn tail, or what is left of it after the record
    written over it), and the log verifies."""
    path = tmp_path / "ev.jsonl"
    good = _make(path)
    torn = (b'{"actor":null,"data":{"pad":"' + b"x" * torn_len)[:torn_len]
    path.write_bytes(good + torn)
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_DURING_RECOVERY, str(path), die_in],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    after_kill = path.read_bytes()
    assert after_kill.startswith(good)
    with EvidenceLog.open(path) as log:
        recoveries = [r.data for r in log if r.kind == "recovery"]
        head = log.head()
    assert verify(path, expect_head=head).torn_bytes == 0
    if die_in == "pwrite":  # killed before writing: the tail as it was, recovered once
        assert after_kill == good + torn
        assert recoveries == [
            {"dropped_bytes": torn_len, "dropped_sha256": hashlib.sha256(torn).hexdigest()}
        ]
        return
    # killed after the write over the tail: the first recovery record names the whole
    # original tail; what may be left of it beyond that record (killed before the cut,
    # with a tail longer than the record) is recovered, and named, by the next open
    assert recoveries[0] == {
        "dropped_bytes": torn_len,
        "dropped_sha256": hashlib.sha256(torn).hexdigest(),
    }
    first_line_end = after_kill.index(b"\n", len(good)) + 1
    leftover = after_kill[first_line_end:]
    written = first_line_end - len(good)  # the recovery line written over the tail
    assert bool(leftover) == (die_in == "ftruncate" and torn_len > written)
    if leftover:
        assert torn.endswith(leftover)
        assert recoveries[1:] == [
            {"dropped_bytes": len(leftover), "dropped_sha256": hashlib.sha256(leftover).hexdigest()}
        ]
    else:
        assert len(recoveries) == 1
