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
