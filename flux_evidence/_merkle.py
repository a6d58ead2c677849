"""RFC 6962 (RFC 9162 §2.1) Merkle tree hashes, inclusion and consistency proofs.

Leaves are byte strings (for a log: each record's 32-byte hash). Leaf hash
``sha256(0x00 || d)``, node hash ``sha256(0x01 || left || right)``, the empty tree
``sha256("")``. Proof verification follows RFC 9162 §2.1.3.2 and §2.1.4.2, which consume
the proof exactly: a proof one element too short or too long fails (the immudb
GHSA-672p class of "accept a proof of the wrong length" bugs).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence

from ._exceptions import EvidenceError, EvidenceReason, InvalidEvidenceError, TamperReason

__all__ = [
    "consistency_proof",
    "inclusion_proof",
    "leaf_hash",
    "node_hash",
    "tree_hash",
    "verify_consistency",
    "verify_inclusion",
]

HASH_SIZE = 32
# A proof never has more than 2 * 64 elements for a tree of fewer than 2**64 leaves;
# anything longer is refused before any hashing.
MAX_PROOF_LEN = 128
# Trees this large or larger are refused by the verifiers before any hashing: the bound
# above assumes them away, and the fold's shift loops run once per bit of a size (an
# attacker's 2**100000 made each proof step shift a 100000-bit int 100000 times).
MAX_TREE_SIZE = 2**64 - 1


def leaf_hash(data: bytes) -> bytes:
    """RFC 6962 leaf hash: ``sha256(0x00 || data)``."""
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """RFC 6962 interior node hash: ``sha256(0x01 || left || right)``."""
    return hashlib.sha256(b"\x01" + left + right).digest()


def _largest_pow2_below(n: int) -> int:
    """The largest power of two strictly smaller than *n* (n >= 2)."""
    return 1 << ((n - 1).bit_length() - 1)


def _mth(hashes: Sequence[bytes]) -> bytes:
    """Merkle tree hash over already-leaf-hashed entries (iterative, O(n))."""
    n = len(hashes)
    if n == 0:
        return hashlib.sha256(b"").digest()
    # Fold complete subtrees left to right, like a binary counter (RFC 6962 shape).
    stack: list[tuple[int, bytes]] = []  # (subtree size, hash)
    for h in hashes:
        size, node = 1, h
        while stack and stack[-1][0] == size:
            left_size, left = stack.pop()
            node = node_hash(left, node)
            size += left_size
        stack.append((size, node))
    size, node = stack.pop()
    while stack:
        _, left = stack.pop()
        node = node_hash(left, node)
    return node


def tree_hash(leaves: Sequence[bytes]) -> bytes:
    """Return MTH(leaves): the RFC 6962 root over the leaf *data*."""
    return _mth([leaf_hash(d) for d in leaves])


def _check_sizes(index: int, size: int, total: int, op: str) -> None:
    if not (0 <= index < size <= total):
        raise EvidenceError(
            f"need 0 <= index < size <= {total}", op=op, reason=EvidenceReason.BAD_ARGUMENT
        )


def _path(m: int, hashes: Sequence[bytes]) -> list[bytes]:
    n = len(hashes)
    if n == 1:
        return []
    k = _largest_pow2_below(n)
    if m < k:
        return [*_path(m, hashes[:k]), _mth(hashes[k:])]
    return [*_path(m - k, hashes[k:]), _mth(hashes[:k])]


def inclusion_proof(leaves: Sequence[bytes], index: int, size: int) -> list[bytes]:
    """RFC 6962 PATH(index, D[size]): the audit path for leaf *index* in the first
    *size* leaves.

    Raises:
        EvidenceError: reason BAD_ARGUMENT unless ``0 <= index < size <= len(leaves)``.
    """
    _check_sizes(index, size, len(leaves), "prove_inclusion")
    return _path(index, [leaf_hash(d) for d in leaves[:size]])


def _subproof(m: int, hashes: Sequence[bytes], complete: bool) -> list[bytes]:
    n = len(hashes)
    if m == n:
        return [] if complete else [_mth(hashes)]
    k = _largest_pow2_below(n)
    if m <= k:
        return [*_subproof(m, hashes[:k], complete), _mth(hashes[k:])]
    return [*_subproof(m - k, hashes[k:], False), _mth(hashes[:k])]


def consistency_proof(leaves: Sequence[bytes], old_size: int, new_size: int) -> list[bytes]:
    """RFC 6962 PROOF(old_size, D[new_size]); empty when ``old_size`` is 0 or equal.

    Raises:
        EvidenceError: reason BAD_ARGUMENT unless ``0 <= old_size <= new_size <= len``.
    """
    if not (0 <= old_size <= new_size <= len(leaves)):
        raise EvidenceError(
            "need 0 <= old_size <= new_size <= log size",
            op="prove_consistency",
            reason=EvidenceReason.BAD_ARGUMENT,
        )
    if old_size in (0, new_size):
        return []
    return _subproof(old_size, [leaf_hash(d) for d in leaves[:new_size]], True)


def _fail(op: str) -> InvalidEvidenceError:
    return InvalidEvidenceError(TamperReason.BAD_PROOF, seq=None, op=op)


def _is_hash(value: object) -> bool:
    return isinstance(value, bytes) and len(value) == HASH_SIZE


def _check_proof_shape(proof: Sequence[bytes], op: str) -> None:
    if len(proof) > MAX_PROOF_LEN or any(
        not isinstance(p, bytes) or len(p) != HASH_SIZE for p in proof
    ):
        raise _fail(op)


def _fold(fn: int, sn: int, seed: bytes, path: Sequence[bytes], op: str) -> tuple[bytes, bytes]:
    """The proof fold shared by RFC 9162 §2.1.3.2 (inclusion: the second result is the
    root) and §2.1.4.2 (consistency: the old root and the new one). Consumes *path*
    exactly: a path longer or shorter than the one from ``fn`` up to ``sn`` fails."""
    fr = sr = seed
    for c in path:
        if sn == 0:
            raise _fail(op)  # proof longer than the path
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            if not fn & 1:
                while fn & 1 == 0 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise _fail(op)  # proof shorter than the path
    return fr, sr


def verify_inclusion(
    leaf: bytes, index: int, size: int, proof: Sequence[bytes], root: bytes, *, hashed: bool = False
) -> None:
    """Check that *leaf* is entry *index* of the tree of *size* leaves with *root*.

    Guarantee: returns only if the proof recomputes *root* using exactly every element
    (RFC 9162 §2.1.3.2). *leaf* is leaf data, or the leaf hash when ``hashed=True``.

    Raises:
        InvalidEvidenceError: reason BAD_PROOF on any mismatch (index, size, length),
            or a size over MAX_TREE_SIZE.
    """
    op = "verify_inclusion"
    _check_proof_shape(proof, op)
    if type(index) is not int or type(size) is not int or not (0 <= index < size <= MAX_TREE_SIZE):
        raise _fail(op)
    if not _is_hash(root) or not isinstance(leaf, bytes) or (hashed and len(leaf) != HASH_SIZE):
        raise _fail(op)
    _, r = _fold(index, size - 1, leaf if hashed else leaf_hash(leaf), proof, op)
    if not hmac.compare_digest(r, root):
        raise _fail(op)


def verify_consistency(
    old_size: int, new_size: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]
) -> None:
    """Check that the tree of *new_size* leaves with *new_root* extends the tree of
    *old_size* leaves with *old_root* (RFC 9162 §2.1.4.2).

    Guarantee: returns only if the proof consumes exactly and reproduces both roots.

    Raises:
        InvalidEvidenceError: reason BAD_PROOF on any mismatch, or a size over
            MAX_TREE_SIZE.
    """
    op = "verify_consistency"
    _check_proof_shape(proof, op)
    if (
        type(old_size) is not int
        or type(new_size) is not int
        or not 0 <= old_size <= new_size <= MAX_TREE_SIZE
    ):
        raise _fail(op)
    if not _is_hash(old_root) or not _is_hash(new_root):
        raise _fail(op)
    if old_size == new_size:
        if proof or not hmac.compare_digest(old_root, new_root):
            raise _fail(op)
        return
    if old_size == 0:  # the empty tree (its root is MTH of nothing) prefixes every tree
        if proof or not hmac.compare_digest(old_root, _mth([])):
            raise _fail(op)
        return
    if not proof:
        raise _fail(op)
    path = list(proof)
    if old_size & (old_size - 1) == 0:  # a power of two: the old root is the first node
        path.insert(0, old_root)
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr, sr = _fold(fn, sn, path[0], path[1:], op)
    if not hmac.compare_digest(fr, old_root) or not hmac.compare_digest(sr, new_root):
        raise _fail(op)
