"""flux_evidence — a tamper-evident, crash-safe evidence log with an offline verifier.

A pure package (stdlib only; ``cryptography`` is used for Ed25519 checkpoints when it is
importable, never required). It opens no file but its own log.

- :class:`EvidenceLog` (a file) and :class:`MemoryEvidenceLog` share one interface:
  ``append``, ``query``, iteration, ``len``, ``head``, ``checkpoint``,
  ``prove_inclusion``, ``prove_consistency``, ``close``.
- :func:`verify` / :func:`verify_bytes` check a log offline; a failure is one opaque
  :class:`InvalidEvidenceError` with the first bad seq and a :class:`TamperReason`.
- RFC 6962 Merkle helpers: :func:`tree_hash`, :func:`inclusion_proof`,
  :func:`consistency_proof`, :func:`verify_inclusion`, :func:`verify_consistency`.
"""

from __future__ import annotations

from ._canonical import canonical_json
from ._checkpoint import Checkpoint, sign_checkpoint, verify_checkpoint
from ._exceptions import (
    EvidenceError,
    EvidenceReason,
    InvalidEvidenceError,
    LogLockedError,
    TamperReason,
)
from ._log import EvidenceLog, FsyncMode
from ._memory import MemoryEvidenceLog
from ._merkle import (
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    node_hash,
    tree_hash,
    verify_consistency,
    verify_inclusion,
)
from ._record import Head, Record, genesis_hash
from ._verify import VerifyResult, verify, verify_bytes

__all__ = [
    "Checkpoint",
    "EvidenceError",
    "EvidenceLog",
    "EvidenceReason",
    "FsyncMode",
    "Head",
    "InvalidEvidenceError",
    "LogLockedError",
    "MemoryEvidenceLog",
    "Record",
    "TamperReason",
    "VerifyResult",
    "canonical_json",
    "consistency_proof",
    "genesis_hash",
    "inclusion_proof",
    "leaf_hash",
    "node_hash",
    "sign_checkpoint",
    "tree_hash",
    "verify",
    "verify_bytes",
    "verify_checkpoint",
    "verify_consistency",
    "verify_inclusion",
]
