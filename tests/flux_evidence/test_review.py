"""Regressions from an adversarial review of flux_evidence: every record that ``append``
acknowledges can be read back anywhere, and the verifiers' loops and checks are bounded
and fail closed on hostile input."""

from __future__ import annotations

import hashlib
import hmac
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from flux_evidence import (
    Checkpoint,
    EvidenceError,
    EvidenceLog,
    EvidenceReason,
    InvalidEvidenceError,
    MemoryEvidenceLog,
    TamperReason,
    leaf_hash,
    node_hash,
    sign_checkpoint,
    tree_hash,
    verify,
    verify_bytes,
    verify_checkpoint,
    verify_consistency,
    verify_inclusion,
)
from flux_evidence._canonical import MAX_DATA_DEPTH
from flux_evidence._checkpoint import MIN_HMAC_KEY_BYTES
from flux_evidence._scan import parse_line
from tests.flux_evidence._gate import gate_fdatasync

# How much deeper in its stack a reader may be than the appender was (a framework, a
# CLI, a test runner): the records an append acknowledged must still read back there.
READER_EXTRA_FRAMES = 200


def _nested(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


def _in_fresh_thread(body: Callable[[], Any]) -> Any:
    """Run *body* in a new thread (a shallow stack); return its result or exception."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(body())
        except Exception as exc:  # handed back to the test
            out.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return out[0]


def _deeper(frames: int, body: Callable[[], Any]) -> Any:
    return body() if frames == 0 else _deeper(frames - 1, body)


@pytest.mark.parametrize(
    "depth", [MAX_DATA_DEPTH, MAX_DATA_DEPTH + 1, sys.getrecursionlimit() - 60]
)
def test_acknowledged_nested_record_reads_back_from_a_deeper_stack(
    tmp_path: Path, depth: int
) -> None:
    """An appender with a shallow stack must not get a record acknowledged that a reader
    deeper in its stack cannot decode: that made verify report tampering (BAD_JSON) and
    the writer's own reopen fail on a log nobody touched."""
    path = tmp_path / "log.jsonl"
    value = _nested(depth)

    def append() -> Any:
        with EvidenceLog.open(path, fsync="never") as log:
            return log.append("deep", value)

    outcome = _in_fresh_thread(append)
    if depth <= MAX_DATA_DEPTH:
        assert not isinstance(outcome, BaseException), outcome
    if isinstance(outcome, EvidenceError):
        assert outcome.reason is EvidenceReason.UNENCODABLE
        assert depth > MAX_DATA_DEPTH
        return
    assert not isinstance(outcome, BaseException), outcome

    def read_back() -> list[Any]:
        verify(path)
        with EvidenceLog.open(path, fsync="never") as log:
            return [r.data for r in log.query(kind="deep")]

    assert _deeper(READER_EXTRA_FRAMES, read_back) == [value]


# -- Merkle proofs: sizes outside the model are refused before any loop runs -------------

BEYOND = 2**64  # the proof-length bound assumes trees of fewer than 2**64 leaves
HUGE = 2**100_000  # before the size bound, each proof step shifted this 100,000 times


def test_inclusion_proof_for_a_tree_beyond_two_to_the_64_is_refused() -> None:
    """A one-element proof 'proves' leaf 2**64 of a 2**64 + 1 tree; sizes that large
    are outside what MAX_PROOF_LEN assumes, and a huge size made the fold's shift loop
    run for minutes (quadratic in the size's bits)."""
    leaf, sibling = b"leaf", b"\x07" * 32
    root = node_hash(sibling, leaf_hash(leaf))
    for index, size in [(BEYOND, BEYOND + 1), (HUGE, HUGE + 1)]:
        with pytest.raises(InvalidEvidenceError) as info:
            verify_inclusion(leaf, index, size, [sibling], root)
        assert info.value.reason is TamperReason.BAD_PROOF
    verify_inclusion(leaf, 1, 2, [sibling], root)  # the same proof, inside the model


def test_consistency_proof_for_a_tree_beyond_two_to_the_64_is_refused() -> None:
    old_root, step = b"\x01" * 32, b"\x02" * 32
    new_root = node_hash(old_root, step)
    for old_size, new_size in [(BEYOND, BEYOND + 1), (HUGE, HUGE + 1)]:
        with pytest.raises(InvalidEvidenceError) as info:
            verify_consistency(old_size, new_size, old_root, new_root, [step])
        assert info.value.reason is TamperReason.BAD_PROOF
    verify_consistency(2**63, 2**64 - 1, old_root, new_root, [step])  # inside the model


def test_consistency_from_the_empty_tree_checks_the_old_root() -> None:
    """The tree of 0 leaves has one root, sha256(""): a consistency check from size 0
    with any other old root claims something false and must fail."""
    new_root = tree_hash([b"a", b"b"])
    verify_consistency(0, 2, hashlib.sha256(b"").digest(), new_root, [])
    with pytest.raises(InvalidEvidenceError) as info:
        verify_consistency(0, 2, b"\x00" * 32, new_root, [])
    assert info.value.reason is TamperReason.BAD_PROOF


@pytest.mark.parametrize("bad", ["a" * 64, None, 5, b"short"])
def test_proof_verifiers_refuse_malformed_roots_and_leaves_as_bad_proof(bad: Any) -> None:
    """Every error from a public call is an EvidenceError: a root or leaf that is no
    hash (a hex str, None, ...) fails closed as BAD_PROOF, never as a TypeError."""
    leaves = [b"a", b"b", b"c"]
    root = tree_hash(leaves)
    calls: list[Callable[[], None]] = [
        lambda: verify_inclusion(b"a", 0, 3, [leaf_hash(b"b"), leaf_hash(b"c")], bad),
        lambda: verify_inclusion(bad, 0, 3, [leaf_hash(b"b"), leaf_hash(b"c")], root),
        lambda: verify_inclusion(bad, 0, 1, [], leaf_hash(b"a"), hashed=True),
        lambda: verify_consistency(3, 3, bad, root, []),
        lambda: verify_consistency(0, 3, bad, root, []),
        lambda: verify_consistency(2, 3, bad, root, [leaf_hash(b"c")]),
        lambda: verify_consistency(2, 3, tree_hash(leaves[:2]), bad, [leaf_hash(b"c")]),
    ]
    for call in calls:
        with pytest.raises(InvalidEvidenceError) as info:
            call()
        assert info.value.reason is TamperReason.BAD_PROOF


# -- checkpoint signatures: the verifier fails closed on keys the signer would refuse ----

KEY = b"k" * MIN_HMAC_KEY_BYTES


@pytest.mark.parametrize("weak", [b"", b"short", b"x" * (MIN_HMAC_KEY_BYTES - 1)])
def test_verify_checkpoint_refuses_an_hmac_key_the_signer_would_refuse(weak: bytes) -> None:
    """A verifier handed an empty or short key (a missing secret read as b"") accepted
    any checkpoint an attacker signed with that same guessable key."""
    unsigned = Checkpoint("log", 3, "a" * 64)
    forged = Checkpoint(
        "log", 3, "a" * 64, "hmac-sha256", hmac.new(weak, unsigned.message(), "sha256").hexdigest()
    )
    with pytest.raises(EvidenceError) as info:
        verify_checkpoint(forged, hmac_key=weak)
    assert info.value.reason is EvidenceReason.BAD_ARGUMENT
    with pytest.raises(EvidenceError) as info:
        verify_bytes(MemoryEvidenceLog().to_bytes(), checkpoint=forged, hmac_key=weak)
    assert info.value.reason is EvidenceReason.BAD_ARGUMENT


def test_verify_checkpoint_malformed_fields_fail_closed() -> None:
    """Fields of the wrong type are typed errors, and a non-str log id (whose message
    would equal that of its str() spelling) does not verify."""
    good = sign_checkpoint(Checkpoint("123", 3, "a" * 64), hmac_key=KEY)
    verify_checkpoint(good, hmac_key=KEY)
    with pytest.raises(EvidenceError) as info:
        verify_checkpoint(good, hmac_key="k" * 32)  # type: ignore[arg-type]
    assert info.value.reason is EvidenceReason.BAD_ARGUMENT
    bad_fields: list[Checkpoint] = [
        Checkpoint(123, 3, "a" * 64, good.algorithm, good.signature),  # type: ignore[arg-type]
        Checkpoint("123", 3, "a" * 64, good.algorithm, 5),  # type: ignore[arg-type]
        Checkpoint("123", 3, "a" * 64, good.algorithm, "zz" * 32),
    ]
    for checkpoint in bad_fields:
        with pytest.raises(InvalidEvidenceError) as bad:
            verify_checkpoint(checkpoint, hmac_key=KEY)
        assert bad.value.reason is TamperReason.BAD_SIGNATURE


# -- the line grammar: exactly canonical, also for negative-zero integers ----------------


def _rehash(prev_hex: str, line: bytes) -> bytes:
    """*line* with its hash field recomputed, so only the grammar can reject it."""
    cut = line.rfind(b',"hash":"')
    body = line[:cut] + line[cut + len(b',"hash":"') + 65 :]
    digest = hashlib.sha256(bytes.fromhex(prev_hex) + body).hexdigest().encode()
    return line[: cut + 9] + digest + line[cut + 9 + 64 :]


@pytest.mark.parametrize("field", [b'"ts":', b'"turn":'])
def test_negative_zero_integer_in_the_envelope_is_not_canonical(field: bytes) -> None:
    """Canonical JSON writes 0, never -0: a line whose ts or turn reads -0 (hash
    recomputed) decodes to the same record as the 0 line but has another hash, so two
    byte strings would stand for one record. parse_line and verify must refuse it."""
    log = MemoryEvidenceLog(log_id="z", clock=lambda: 0)
    log.append("k", 1, turn=0)
    genesis, line = log.to_bytes().splitlines()
    forged = _rehash(parse_line(line)[1].group("prev"), line.replace(field + b"0", field + b"-0"))  # type: ignore[index]
    assert forged != line
    assert parse_line(forged) is None
    with pytest.raises(InvalidEvidenceError) as info:
        verify_bytes(genesis + b"\n" + forged + b"\n")
    assert info.value.reason is TamperReason.BAD_JSON
    assert info.value.seq == 1


# -- batch mode: a forked child's head is the parent's durable head ---------------------

JOIN_TIMEOUT_S = 10  # a hung thread or child fails the test instead of blocking it


def test_forked_child_head_names_no_record_still_in_flight(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Forked while a group's fdatasync is under way, the child's copy of a batch log
    must not give a head or checkpoint over the in-flight record: the parent's flush may
    still fail and a crash may still lose it."""
    path = tmp_path / "ev.jsonl"
    log = EvidenceLog.open(path, fsync="batch")
    durable = log.head()
    durable_checkpoint = log.checkpoint()
    in_fsync, release = gate_fdatasync(monkeypatch)
    appender = threading.Thread(target=lambda: log.append("k", {"i": 1}))
    appender.start()
    try:
        assert in_fsync.wait(JOIN_TIMEOUT_S)
        assert len(log) == durable.size + 1  # chained, not durable
        pid = os.fork()
        if pid == 0:  # pragma: no cover - runs in the child
            code = 3
            try:
                signal.alarm(JOIN_TIMEOUT_S)
                same = log.head() == durable and log.checkpoint() == durable_checkpoint
                code = 0 if same else 1
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
    finally:
        release.set()
        appender.join(JOIN_TIMEOUT_S)
        monkeypatch.undo()
    assert os.waitstatus_to_exitcode(status) == 0
    assert not appender.is_alive()
    log.close()


@pytest.mark.parametrize("mode", ["batch", "always"])
def test_reopening_makes_inherited_records_durable_before_head(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: Any
) -> None:
    """Records a ``never`` writer left in the page cache are not known durable: a batch
    writer that reopens the log must fdatasync them before its ``head()`` names them."""
    path = tmp_path / "ev.jsonl"
    with EvidenceLog.open(path, fsync="never") as log:
        log.append("k", {"i": 1})
    synced: list[int] = []
    real_fdatasync = os.fdatasync

    def spy(fd: int) -> None:
        real_fdatasync(fd)
        synced.append(os.fstat(fd).st_size)

    monkeypatch.setattr(os, "fdatasync", spy)
    with EvidenceLog.open(path, fsync=mode) as log:
        head = log.head()
        assert head.size == 2
        assert synced and synced[0] == path.stat().st_size  # the whole file, at open
