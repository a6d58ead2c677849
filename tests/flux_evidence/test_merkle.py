"""RFC 6962 tree heads and proofs: published vectors, exhaustive small trees, and
mutated proofs (including wrong-length proofs, the immudb GHSA-672p class)."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flux_evidence import (
    InvalidEvidenceError,
    TamperReason,
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    tree_hash,
    verify_consistency,
    verify_inclusion,
)
from tests._vectors import load_vector_file, load_vectors

CASES = load_vectors("flux_evidence", "rfc6962")


def _by_kind(kind: str) -> list[dict[str, Any]]:
    return [c for c in CASES if c["kind"] == kind]


def _h(values: list[str]) -> list[bytes]:
    return [bytes.fromhex(v) for v in values]


def _b(values: list[str]) -> list[bytes]:
    return [base64.b64decode(v) for v in values]


def test_vector_file_has_provenance() -> None:
    doc = load_vector_file("flux_evidence", "rfc6962")
    assert "transparency-dev/merkle" in doc["provenance"]["repository"]
    assert all(c["source"].startswith("https://github.com/transparency-dev/merkle") for c in CASES)


@pytest.mark.parametrize("case", _by_kind("tree_head"), ids=lambda c: c["id"])
def test_tree_head_vectors(case: dict[str, Any]) -> None:
    assert tree_hash(_h(case["leaves"])).hex() == case["root"]


@pytest.mark.parametrize("case", _by_kind("inclusion"), ids=lambda c: c["id"])
def test_inclusion_vectors(case: dict[str, Any]) -> None:
    leaf = bytes.fromhex(case["leaf"])
    proof, root = _h(case["proof"]), bytes.fromhex(case["root"])
    verify_inclusion(leaf, case["leaf_index"], case["tree_size"], proof, root)
    # Our own generator reproduces the published proof.
    leaves = _h(_by_kind("tree_head")[8]["leaves"])
    assert inclusion_proof(leaves, case["leaf_index"], case["tree_size"]) == proof


@pytest.mark.parametrize("case", _by_kind("consistency"), ids=lambda c: c["id"])
def test_consistency_vectors(case: dict[str, Any]) -> None:
    proof = _h(case["proof"])
    r1, r2 = bytes.fromhex(case["root1"]), bytes.fromhex(case["root2"])
    verify_consistency(case["size1"], case["size2"], r1, r2, proof)
    leaves = _h(_by_kind("tree_head")[8]["leaves"])
    assert consistency_proof(leaves, case["size1"], case["size2"]) == proof


@pytest.mark.parametrize(
    "case",
    [c for c in CASES if c["kind"].endswith("_b64")],
    ids=lambda c: c["id"],
)
def test_published_testdata_files(case: dict[str, Any]) -> None:
    proof = _b(case["proof"])
    if case["kind"] == "inclusion_b64":

        def check() -> None:
            verify_inclusion(
                base64.b64decode(case["leaf_hash"]),
                case["leaf_index"],
                case["tree_size"],
                proof,
                base64.b64decode(case["root"]),
                hashed=True,
            )
    else:

        def check() -> None:
            verify_consistency(
                case["size1"],
                case["size2"],
                base64.b64decode(case["root1"]),
                base64.b64decode(case["root2"]),
                proof,
            )

    if case["valid"]:
        check()
    else:
        with pytest.raises(InvalidEvidenceError) as info:
            check()
        assert info.value.reason is TamperReason.BAD_PROOF


N = 17
LEAVES = [bytes([i]) * (i % 5) for i in range(N)]


def _bad_proof(func: Any, *args: Any, **kwargs: Any) -> None:
    with pytest.raises(InvalidEvidenceError) as info:
        func(*args, **kwargs)
    assert info.value.reason is TamperReason.BAD_PROOF


def test_every_inclusion_proof_verifies_and_mutations_fail() -> None:
    junk = b"\x42" * 32
    for size in range(1, N + 1):
        root = tree_hash(LEAVES[:size])
        for index in range(size):
            proof = inclusion_proof(LEAVES, index, size)
            verify_inclusion(LEAVES[index], index, size, proof, root)
            verify_inclusion(leaf_hash(LEAVES[index]), index, size, proof, root, hashed=True)
            for other in range(size + 2):
                if other != index:
                    _bad_proof(verify_inclusion, LEAVES[index], other, size, proof, root)
            # A size whose audit path has another length cannot verify this proof (sizes
            # sharing the path shape are told apart by the root the caller trusts).
            for other_size in range(index + 1, N + 1):
                if len(inclusion_proof(LEAVES, index, other_size)) != len(proof):
                    _bad_proof(verify_inclusion, LEAVES[index], index, other_size, proof, root)
            _bad_proof(verify_inclusion, b"wrong", index, size, proof, root)
            _bad_proof(verify_inclusion, LEAVES[index], index, size, proof, junk)
            # Wrong length: one extra element at either end, one element dropped.
            _bad_proof(verify_inclusion, LEAVES[index], index, size, [*proof, junk], root)
            _bad_proof(verify_inclusion, LEAVES[index], index, size, [junk, *proof], root)
            _bad_proof(verify_inclusion, LEAVES[index], index, size, [*proof, root], root)
            if proof:
                _bad_proof(verify_inclusion, LEAVES[index], index, size, proof[:-1], root)
                _bad_proof(verify_inclusion, LEAVES[index], index, size, proof[1:], root)
            for i in range(len(proof)):
                bad = list(proof)
                bad[i] = bytes([bad[i][0] ^ 1]) + bad[i][1:]
                _bad_proof(verify_inclusion, LEAVES[index], index, size, bad, root)


def test_every_consistency_proof_verifies_and_mutations_fail() -> None:
    junk = b"\x42" * 32
    roots = [tree_hash(LEAVES[:n]) for n in range(N + 1)]
    for new in range(N + 1):
        for old in range(new + 1):
            proof = consistency_proof(LEAVES, old, new)
            verify_consistency(old, new, roots[old], roots[new], proof)
            if old in (0, new):
                assert proof == []
                _bad_proof(verify_consistency, old, new, roots[old], roots[new], [junk])
                continue
            _bad_proof(verify_consistency, old, new, roots[old], roots[new], [])
            _bad_proof(verify_consistency, old, new, roots[old], roots[new], [*proof, junk])
            _bad_proof(verify_consistency, old, new, roots[old], roots[new], [junk, *proof])
            _bad_proof(verify_consistency, old, new, roots[old], roots[new], proof[:-1])
            _bad_proof(verify_consistency, old, new, roots[new], roots[old], proof)
            _bad_proof(verify_consistency, old, new, junk, roots[new], proof)
            _bad_proof(verify_consistency, old, new, roots[old], junk, proof)
            for other in (old - 1, old + 1):
                if 0 < other < new and roots[other] != roots[old]:
                    _bad_proof(verify_consistency, other, new, roots[old], roots[new], proof)
            for i in range(len(proof)):
                bad = list(proof)
                bad[i] = bytes([bad[i][0] ^ 0x10]) + bad[i][1:]
                _bad_proof(verify_consistency, old, new, roots[old], roots[new], bad)


def test_time_travel_and_equal_sizes() -> None:
    r1, r2 = tree_hash(LEAVES[:3]), tree_hash(LEAVES[:2])
    _bad_proof(verify_consistency, 3, 2, r1, r2, [])
    _bad_proof(verify_consistency, 2, 2, r1, r2, [])
    verify_consistency(2, 2, r2, r2, [])


@given(
    leaves=st.lists(st.binary(max_size=8), min_size=1, max_size=40),
    data=st.data(),
)
def test_proofs_property(leaves: list[bytes], data: st.DataObject) -> None:
    size = data.draw(st.integers(1, len(leaves)))
    index = data.draw(st.integers(0, size - 1))
    root = tree_hash(leaves[:size])
    proof = inclusion_proof(leaves, index, size)
    verify_inclusion(leaves[index], index, size, proof, root)
    # Any altered proof element, any extra or missing element: rejected.
    extra = data.draw(st.binary(min_size=32, max_size=32))
    cut = data.draw(st.integers(0, len(proof)))
    _bad_proof(
        verify_inclusion, leaves[index], index, size, [*proof[:cut], extra, *proof[cut:]], root
    )
    if proof:
        i = data.draw(st.integers(0, len(proof) - 1))
        bit = data.draw(st.integers(0, 255))
        bad = list(proof)
        bad[i] = (
            bad[i][: bit // 8]
            + bytes([bad[i][bit // 8] ^ (1 << (bit % 8))])
            + bad[i][bit // 8 + 1 :]
        )
        _bad_proof(verify_inclusion, leaves[index], index, size, bad, root)
        _bad_proof(verify_inclusion, leaves[index], index, size, proof[:i] + proof[i + 1 :], root)
    old = data.draw(st.integers(0, size))
    cproof = consistency_proof(leaves, old, size)
    verify_consistency(old, size, tree_hash(leaves[:old]), root, cproof)
    if cproof:
        _bad_proof(verify_consistency, old, size, tree_hash(leaves[:old]), root, [*cproof, extra])
