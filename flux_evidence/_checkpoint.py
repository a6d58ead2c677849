"""Checkpoints: a signed RFC 6962 tree head over a log's record hashes.

An auditor keeps a checkpoint; later, :func:`verify_checkpoint` (signature) and
``verify(path, checkpoint=...)`` (the log still has that tree as its prefix) catch a log
rewritten by someone without the key. Signatures: HMAC-SHA256 with a caller's key
(stdlib), or Ed25519 when the optional ``cryptography`` package is importable.
"""

from __future__ import annotations

import hashlib
import hmac
import typing
from dataclasses import dataclass
from typing import Any

from ._exceptions import EvidenceError, EvidenceReason, InvalidEvidenceError, TamperReason
from ._record import is_hex64

__all__ = ["Checkpoint", "sign_checkpoint", "verify_checkpoint"]

HMAC_SHA256 = "hmac-sha256"
ED25519 = "ed25519"
_DOMAIN = b"flux-evidence/v1/checkpoint\n"
# HMAC keys shorter than this are refused: a guessable key signs nothing.
MIN_HMAC_KEY_BYTES = 16


@typing.final
@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A tree head: *size* records of log *log_id* have Merkle root *root* (hex).

    ``algorithm``/``signature`` (hex) are ``None`` for an unsigned checkpoint.
    """

    log_id: str
    size: int
    root: str
    algorithm: str | None = None
    signature: str | None = None

    def message(self) -> bytes:
        """The exact bytes a signature covers."""
        return _DOMAIN + f"{self.log_id}\n{self.size}\n{self.root}\n".encode()


def _ed25519() -> Any:
    try:
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError:  # optional dependency
        return None
    return ed25519


def _bad_arg(message: str) -> EvidenceError:
    return EvidenceError(message, op="checkpoint", reason=EvidenceReason.BAD_ARGUMENT)


def sign_checkpoint(
    checkpoint: Checkpoint, *, hmac_key: bytes | None = None, ed25519_key: Any = None
) -> Checkpoint:
    """Return *checkpoint* signed with exactly one of *hmac_key* or *ed25519_key*
    (a ``cryptography`` ``Ed25519PrivateKey``).

    Raises:
        EvidenceError: reason BAD_ARGUMENT for no/both keys, a short HMAC key, or an
            Ed25519 key when ``cryptography`` is not importable.
    """
    if (hmac_key is None) == (ed25519_key is None):
        raise _bad_arg("give exactly one of hmac_key or ed25519_key")
    unsigned = Checkpoint(checkpoint.log_id, checkpoint.size, checkpoint.root)
    message = unsigned.message()
    if hmac_key is not None:
        if not isinstance(hmac_key, bytes) or len(hmac_key) < MIN_HMAC_KEY_BYTES:
            raise _bad_arg(f"hmac_key must be at least {MIN_HMAC_KEY_BYTES} bytes")
        sig = hmac.new(hmac_key, message, hashlib.sha256).hexdigest()
        return Checkpoint(unsigned.log_id, unsigned.size, unsigned.root, HMAC_SHA256, sig)
    ed = _ed25519()
    if ed is None or not isinstance(ed25519_key, ed.Ed25519PrivateKey):
        raise _bad_arg("ed25519_key must be a cryptography Ed25519PrivateKey")
    sig_bytes: bytes = ed25519_key.sign(message)
    return Checkpoint(unsigned.log_id, unsigned.size, unsigned.root, ED25519, sig_bytes.hex())


def verify_checkpoint(
    checkpoint: Checkpoint, *, hmac_key: bytes | None = None, ed25519_public_key: Any = None
) -> None:
    """Check *checkpoint*'s signature with the key for its algorithm.

    Guarantee: returns only if the signature is valid over (log id, size, root) for the
    given key. Not guaranteed: that any log matches it — see ``verify(checkpoint=...)``.

    Raises:
        InvalidEvidenceError: reason BAD_SIGNATURE when unsigned, signed with another
            algorithm than the key given, malformed, or not matching.
        EvidenceError: reason BAD_ARGUMENT for an HMAC key :func:`sign_checkpoint`
            would refuse (not bytes, shorter than MIN_HMAC_KEY_BYTES): a guessable key
            verifies what anyone signs.
    """

    def bad() -> InvalidEvidenceError:
        return InvalidEvidenceError(TamperReason.BAD_SIGNATURE, seq=None, op="verify_checkpoint")

    if hmac_key is not None and (
        not isinstance(hmac_key, bytes) or len(hmac_key) < MIN_HMAC_KEY_BYTES
    ):
        raise _bad_arg(f"hmac_key must be at least {MIN_HMAC_KEY_BYTES} bytes")
    if (
        type(checkpoint.log_id) is not str
        or not is_hex64(checkpoint.root)
        or type(checkpoint.size) is not int
        or checkpoint.size < 0
    ):
        raise bad()
    sig_hex = checkpoint.signature
    if type(sig_hex) is not str:
        raise bad()
    try:
        sig = bytes.fromhex(sig_hex)
    except ValueError as exc:
        raise bad() from exc
    message = checkpoint.message()
    if checkpoint.algorithm == HMAC_SHA256 and hmac_key is not None:
        expected = hmac.new(hmac_key, message, hashlib.sha256).digest()
        if not hmac.compare_digest(expected, sig):
            raise bad()
        return
    if checkpoint.algorithm == ED25519 and ed25519_public_key is not None:
        ed = _ed25519()
        if ed is None or not isinstance(ed25519_public_key, ed.Ed25519PublicKey):
            raise bad()
        from cryptography.exceptions import InvalidSignature

        try:
            ed25519_public_key.verify(sig, message)
        except InvalidSignature as exc:
            raise bad() from exc
        return
    raise bad()
