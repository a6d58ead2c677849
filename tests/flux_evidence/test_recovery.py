"""Torn-tail recovery on open-for-write; tampering is never repaired; readers and the
verifier never modify the file."""

from __future__ import annotations

import hashlib
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
