"""Error hygiene at the evidence log's file boundary: bad path arguments are typed."""

from __future__ import annotations

from pathlib import Path

import pytest

from flux_evidence import EvidenceError, EvidenceLog, EvidenceReason, verify


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
