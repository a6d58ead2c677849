"""The offline verifier: check a log file (or its bytes) without modifying it."""

from __future__ import annotations

import os
import typing
from dataclasses import dataclass
from typing import Any

from ._checkpoint import Checkpoint, verify_checkpoint
from ._exceptions import EvidenceError, EvidenceReason, InvalidEvidenceError, TamperReason
from ._fileio import read_log
from ._merkle import _mth, leaf_hash
from ._record import Head, is_hex64
from ._scan import scan

__all__ = ["VerifyResult", "verify", "verify_bytes"]


@typing.final
@dataclass(frozen=True, slots=True)
class VerifyResult:
    """What a valid log holds: its head (keep it for the next ``expect_head``), its log
    id, and the bytes of a torn last line that were not checked (a crash artefact a
    writer's next open will cut and record)."""

    head: Head
    log_id: str | None
    torn_bytes: int


def verify_bytes(
    data: bytes | bytearray | memoryview,
    *,
    expect_head: Head | None = None,
    checkpoint: Checkpoint | None = None,
    hmac_key: bytes | None = None,
    ed25519_public_key: Any = None,
) -> VerifyResult:
    """Verify the bytes of a log (``bytes``, ``bytearray`` or ``memoryview``; see
    :func:`verify`).

    Raises:
        TypeError: *data* is not bytes-like.
        InvalidEvidenceError, EvidenceError: as :func:`verify`.
    """
    if not isinstance(data, bytes):
        if not isinstance(data, bytearray | memoryview):
            raise TypeError(f"data must be bytes, not {type(data).__name__}")
        data = bytes(data)
    if checkpoint is not None and (
        type(checkpoint.size) is not int or checkpoint.size < 0 or not is_hex64(checkpoint.root)
    ):  # a checkpoint that cannot describe a tree must not pass as one
        raise EvidenceError(
            "checkpoint needs a size >= 0 and a 64-digit lowercase hex root",
            op="verify",
            reason=EvidenceReason.BAD_ARGUMENT,
        )
    if checkpoint is not None and (hmac_key is not None or ed25519_public_key is not None):
        verify_checkpoint(checkpoint, hmac_key=hmac_key, ed25519_public_key=ed25519_public_key)
    result = scan(data, expect_head=expect_head)
    log_id = result.log_id
    if checkpoint is not None:
        size = len(result.hashes)
        if checkpoint.size > size:
            raise InvalidEvidenceError(TamperReason.TRUNCATED, seq=size)
        leaves = [leaf_hash(h) for h in result.leaves[: checkpoint.size]]
        if checkpoint.log_id != (log_id or "") and checkpoint.size > 0:
            raise InvalidEvidenceError(TamperReason.BAD_CHAIN, seq=0)
        if _mth(leaves).hex() != checkpoint.root:
            raise InvalidEvidenceError(TamperReason.MODIFIED, seq=None)
    return VerifyResult(head=result.head, log_id=log_id, torn_bytes=result.torn_bytes)


def verify(
    path: str | os.PathLike[str],
    *,
    expect_head: Head | None = None,
    checkpoint: Checkpoint | None = None,
    hmac_key: bytes | None = None,
    ed25519_public_key: Any = None,
) -> VerifyResult:
    """Verify the evidence log at *path*; never modifies the file.

    Guarantee: every complete line is a canonical record, hashes to its ``hash``, has
    its position as ``seq`` and chains to its predecessor (the first to its log's
    genesis value). With *expect_head* (an earlier ``head()``), the log still holds at
    least that many records and the record at ``size - 1`` is unchanged, so truncation
    and rewrites are caught. With *checkpoint*, the Merkle root of the first
    ``checkpoint.size`` records matches, and, given the key, its signature verifies.
    Not guaranteed: without a head or checkpoint, a log cut at a line boundary or
    rewritten wholesale by someone able to write the file verifies. A torn last line
    (no newline) is reported in ``torn_bytes``, not checked.

    Raises:
        InvalidEvidenceError: the first bad seq and the reason.
        EvidenceError: NOT_FOUND, NOT_A_FILE or IO when the file cannot be read;
            BAD_ARGUMENT for a malformed checkpoint (negative size, non-hex root) or
            an HMAC key shorter than the signer accepts.
    """
    data = read_log(os.fspath(path), op="verify")
    return verify_bytes(
        data,
        expect_head=expect_head,
        checkpoint=checkpoint,
        hmac_key=hmac_key,
        ed25519_public_key=ed25519_public_key,
    )
