"""Error hygiene at the evidence log's file boundary: bad path arguments are typed."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from flux_evidence import (
    EvidenceError,
    EvidenceLog,
    EvidenceReason,
    InvalidEvidenceError,
    LogLockedError,
    TamperReason,
    verify,
)


@pytest.mark.parametrize("readonly", [False, True])
def test_nul_in_log_path_is_a_typed_bad_argument(tmp_path: Path, readonly: bool) -> None:
    with pytest.raises(EvidenceError) as info:
        EvidenceLog.open(str(tmp_path / "log\x00.jsonl"), readonly=readonly)
    assert info.value.reason is EvidenceReason.BAD_ARGUMENT
    assert list(tmp_path.iterdir()) == []


def test_nul_in_verified_path_is_a_typed_bad_argument(tmp_path: Path) -> None:
    with pytest.raises(EvidenceError) as info:
        verify(str(tmp_path / "log\x00.jsonl"))
    assert info.value.reason is EvidenceReason.BAD_ARGUMENT


class _FlippingPath:
    """A PathLike naming a different place on each call (TOCTOU by object)."""

    def __init__(self, first: Path, then: str) -> None:
        self._answers = [str(first), then]

    def __fspath__(self) -> str:
        return self._answers.pop(0) if len(self._answers) > 1 else self._answers[0]


def test_open_reads_a_pathlike_once(tmp_path: Path) -> None:
    # The log is created at the first answer; its directory must be the one synced.
    # Asking again fsynced the directory of another answer: here a missing one, so a
    # log was created and left behind while open() failed.
    path = _FlippingPath(tmp_path / "log.jsonl", str(tmp_path / "missing" / "log.jsonl"))
    log = EvidenceLog.open(path)
    try:
        assert len(log) == 1  # genesis
    finally:
        log.close()
    assert [p.name for p in tmp_path.iterdir()] == ["log.jsonl"]


@pytest.mark.parametrize(
    "error",
    [
        EvidenceError("evidence log I/O failed: ENOSPC", op="append", reason=EvidenceReason.IO),
        InvalidEvidenceError(TamperReason.MODIFIED, seq=3),
        InvalidEvidenceError(TamperReason.BAD_PROOF, seq=None, op="verify_inclusion"),
        LogLockedError(),
    ],
    ids=lambda e: type(e).__name__,
)
def test_errors_cross_a_process_boundary_as_they_were(error: EvidenceError) -> None:
    """Pickled (as a process pool sends them) and back: same type, message and fields.
    The subclasses' constructors take other arguments than the root's; unpickling them
    used to fail with TypeError."""
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is type(error)
    assert str(again) == str(error)
    assert again.__dict__ == error.__dict__
