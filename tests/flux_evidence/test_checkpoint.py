"""Signed checkpoints: a log rewritten by someone without the key is caught; old heads
are proven consistent with new ones; every record is proven included."""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

import pytest

from flux_evidence import (
    Checkpoint,
    EvidenceError,
    EvidenceLog,
    EvidenceReason,
    InvalidEvidenceError,
    MemoryEvidenceLog,
    TamperReason,
    verify,
    verify_bytes,
    verify_checkpoint,
    verify_consistency,
    verify_inclusion,
)
from tests._capabilities import require

KEY = b"k" * 32


def _log(n: int, log_id: str = "cp") -> MemoryEvidenceLog:
    log = MemoryEvidenceLog(clock=lambda: 7, log_id=log_id)
    for i in range(n):
        log.append("tick", {"i": i})
    return log


def test_hmac_checkpoint_roundtrip_and_forgeries() -> None:
    cp = _log(10).checkpoint(hmac_key=KEY)
    assert (cp.size, cp.algorithm, cp.log_id) == (11, "hmac-sha256", "cp")
    verify_checkpoint(cp, hmac_key=KEY)
    forgeries = [
        dataclasses.replace(cp, size=10),
        dataclasses.replace(cp, root="0" * 64),
        dataclasses.replace(cp, log_id="other"),
        dataclasses.replace(cp, signature=None),
        dataclasses.replace(cp, signature="zz"),
        dataclasses.replace(cp, algorithm="ed25519"),
    ]
    for forged in forgeries:
        with pytest.raises(InvalidEvidenceError) as info:
            verify_checkpoint(forged, hmac_key=KEY)
        assert info.value.reason is TamperReason.BAD_SIGNATURE
    with pytest.raises(InvalidEvidenceError):
        verify_checkpoint(cp, hmac_key=b"x" * 32)
    with pytest.raises(InvalidEvidenceError):
        verify_checkpoint(_log(10).checkpoint(), hmac_key=KEY)  # unsigned


def test_bad_keys_are_refused() -> None:
    log = _log(1)
    with pytest.raises(EvidenceError) as info:
        log.checkpoint(hmac_key=b"short")
    assert info.value.reason is EvidenceReason.BAD_ARGUMENT
    with pytest.raises(EvidenceError) as info:
        log.checkpoint(ed25519_key="not a key")
    assert info.value.reason is EvidenceReason.BAD_ARGUMENT


def test_ed25519_checkpoint() -> None:
    require(importlib.util.find_spec("cryptography") is not None, "cryptography (Ed25519)")
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    cp = _log(5).checkpoint(ed25519_key=key)
    assert cp.algorithm == "ed25519"
    verify_checkpoint(cp, ed25519_public_key=key.public_key())
    other = Ed25519PrivateKey.generate().public_key()
    for forged, pub in [(cp, other), (dataclasses.replace(cp, size=4), key.public_key())]:
        with pytest.raises(InvalidEvidenceError) as info:
            verify_checkpoint(forged, ed25519_public_key=pub)
        assert info.value.reason is TamperReason.BAD_SIGNATURE
    with pytest.raises(InvalidEvidenceError):
        verify_checkpoint(cp, hmac_key=KEY)  # key for another algorithm


def test_rewritten_log_is_caught_by_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "ev.jsonl"
    with EvidenceLog.open(path, log_id="cp", clock=lambda: 7) as log:
        for i in range(10):
            log.append("tick", {"i": i})
        cp = log.checkpoint(hmac_key=KEY)
    verify(path, checkpoint=cp, hmac_key=KEY)
    # Someone without the key rebuilds a perfectly chained log with one record changed.
    rewritten = MemoryEvidenceLog(clock=lambda: 7, log_id="cp")
    for i in range(10):
        rewritten.append("tick", {"i": i if i != 4 else 40})
    path.write_bytes(rewritten.to_bytes())
    verify(path)  # the chain alone cannot tell
    with pytest.raises(InvalidEvidenceError) as info:
        verify(path, checkpoint=cp, hmac_key=KEY)
    assert info.value.reason is TamperReason.MODIFIED
    # ... nor can they sign a checkpoint of their own.
    forged = rewritten.checkpoint(hmac_key=b"attacker-key-0123456789")
    with pytest.raises(InvalidEvidenceError) as info:
        verify(path, checkpoint=forged, hmac_key=KEY)
    assert info.value.reason is TamperReason.BAD_SIGNATURE


def test_checkpoint_of_a_longer_log_is_truncation() -> None:
    cp = _log(10).checkpoint()
    with pytest.raises(InvalidEvidenceError) as info:
        verify_bytes(_log(8).to_bytes(), checkpoint=cp)
    assert (info.value.reason, info.value.seq) == (TamperReason.TRUNCATED, 9)


def test_old_checkpoint_still_verifies_after_growth_and_is_consistent() -> None:
    log = _log(6)
    old = log.checkpoint(hmac_key=KEY)
    for i in range(9):
        log.append("more", {"i": i})
    new = log.checkpoint(hmac_key=KEY)
    verify_bytes(log.to_bytes(), checkpoint=old, hmac_key=KEY)
    proof = log.prove_consistency(old.size, new.size)
    verify_consistency(old.size, new.size, bytes.fromhex(old.root), bytes.fromhex(new.root), proof)
    with pytest.raises(InvalidEvidenceError):
        verify_consistency(
            old.size, new.size, bytes.fromhex(new.root), bytes.fromhex(old.root), proof
        )
    for record in log:
        path = log.prove_inclusion(record.seq, new.size)
        verify_inclusion(
            bytes.fromhex(record.hash), record.seq, new.size, path, bytes.fromhex(new.root)
        )


def test_checkpoint_from_another_log_id() -> None:
    cp = _log(3, log_id="a").checkpoint()
    with pytest.raises(InvalidEvidenceError) as info:
        verify_bytes(_log(3, log_id="b").to_bytes(), checkpoint=cp)
    assert info.value.reason is TamperReason.BAD_CHAIN


def test_proof_arguments_out_of_range() -> None:
    log = _log(3)
    for seq, size in [(4, 4), (0, 5), (-1, 2), (2, 2)]:
        with pytest.raises(EvidenceError) as info:
            log.prove_inclusion(seq, size)
        assert info.value.reason is EvidenceReason.BAD_ARGUMENT
    with pytest.raises(EvidenceError) as info:
        log.prove_consistency(3, 2)
    assert info.value.reason is EvidenceReason.BAD_ARGUMENT


def test_checkpoint_value() -> None:
    cp = Checkpoint("id", 3, "a" * 64)
    assert cp.message() == b"flux-evidence/v1/checkpoint\nid\n3\n" + b"a" * 64 + b"\n"
