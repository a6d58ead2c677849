"""The verifier core: check a log's bytes line by line and say where it first breaks.

Shared by :func:`verify`, :func:`verify_bytes` and ``EvidenceLog.open`` so that the
writer never accepts a log the offline verifier would reject.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from ._canonical import _ENCODER, loads_strict
from ._exceptions import InvalidEvidenceError, TamperReason
from ._record import (
    EMPTY_HASH,
    FORMAT_VERSION,
    GENESIS_KIND,
    MAX_LINE_BYTES,
    Head,
    Record,
    genesis_hash,
    is_hex64,
)

__all__ = ["ScanResult", "scan"]

_KEYS = frozenset(
    ("actor", "data", "hash", "kind", "prev_hash", "seq", "session", "ts", "turn", "version")
)
_HASH_FIELD = b',"hash":"'
_HASH_FIELD_LEN = len(_HASH_FIELD) + 64 + 1  # ,"hash":"<64 hex>"


@dataclass(slots=True)
class ScanResult:
    """What a successful scan found."""

    hashes: list[str] = field(default_factory=list)
    records: list[Record] = field(default_factory=list)
    complete_len: int = 0  # bytes up to and including the last complete line's newline
    torn_bytes: int = 0  # bytes after it (a last line without its newline)
    log_id: str | None = None

    @property
    def head(self) -> Head:
        return Head(len(self.hashes), self.hashes[-1] if self.hashes else EMPTY_HASH)


def _parse(line: bytes) -> dict[str, Any] | None:
    """Return the record object of a canonical line, or None if it is not one."""
    if len(line) > MAX_LINE_BYTES:
        return None
    try:
        obj = loads_strict(line.decode("utf-8"))
    except (ValueError, RecursionError):
        return None
    if type(obj) is not dict or obj.keys() != _KEYS:
        return None
    if (
        type(obj["version"]) is not int
        or obj["version"] != FORMAT_VERSION
        or type(obj["seq"]) is not int
        or type(obj["ts"]) is not int
        or type(obj["kind"]) is not str
        or (obj["session"] is not None and type(obj["session"]) is not str)
        or (obj["turn"] is not None and type(obj["turn"]) is not int)
        or (obj["actor"] is not None and type(obj["actor"]) is not str)
        or not is_hex64(obj["prev_hash"])
        or not is_hex64(obj["hash"])
    ):
        return None
    try:
        if _ENCODER.encode(obj).encode("utf-8") != line:
            return None  # not canonical (whitespace, escapes, key order, duplicate keys)
    except (ValueError, RecursionError):
        return None
    return obj


def _self_hash(line: bytes, prev_hash: str) -> str:
    i = line.rfind(_HASH_FIELD)  # top-level "hash" is the last one: only scalars follow
    digest = hashlib.sha256(bytes.fromhex(prev_hash))
    digest.update(line[:i])
    digest.update(line[i + _HASH_FIELD_LEN :])
    return digest.hexdigest()


def _later_seqs(buf: bytes, pos: int) -> list[int]:
    """Seq fields of the complete lines from *pos* on (unparseable lines skipped)."""
    out: list[int] = []
    for line in buf[pos:].split(b"\n")[:-1]:
        obj = _parse(line)
        if obj is not None:
            out.append(obj["seq"])
    return out


def _classify(buf: bytes, next_pos: int, position: int, found_seq: int) -> TamperReason:
    """Name what happened at the first record whose seq or link is wrong."""
    later = _later_seqs(buf, next_pos)
    if found_seq < position:
        return TamperReason.INSERTED  # a seq we already passed: a copy or forged extra
    if found_seq == position:
        return TamperReason.INSERTED if position in later else TamperReason.BAD_CHAIN
    if position in later:
        return TamperReason.INSERTED if found_seq in later else TamperReason.REORDERED
    return TamperReason.DELETED


def scan(buf: bytes, *, keep_records: bool = False, expect_head: Head | None = None) -> ScanResult:
    """Verify *buf* (the bytes of a log) and return what it holds.

    Guarantee: every complete line is a canonical record whose hash matches its content,
    whose ``seq`` is its position, and which chains to the line before it (the first to
    the genesis value of its log id); with *expect_head*, the log holds at least that many
    records and the one at ``size - 1`` has that hash. A last line without its newline
    (a torn append) is not checked and is reported as ``torn_bytes``.
    Not guaranteed: without *expect_head* (or a signed checkpoint), a log truncated at a
    line boundary, or rewritten wholesale by someone able to write the file, verifies.

    Raises:
        InvalidEvidenceError: the first bad record and the reason.
    """
    result = ScanResult()
    hashes = result.hashes
    prev = ""
    pos = 0
    position = 0
    end = len(buf)
    while pos < end:
        nl = buf.find(b"\n", pos)
        if nl < 0:
            result.torn_bytes = end - pos
            break
        line = buf[pos:nl]
        obj = _parse(line)
        if obj is None:
            raise InvalidEvidenceError(TamperReason.BAD_JSON, seq=position)
        if _self_hash(line, obj["prev_hash"]) != obj["hash"]:
            raise InvalidEvidenceError(TamperReason.MODIFIED, seq=position)
        if position == 0:
            prev = _genesis_prev(obj)
        if obj["seq"] != position or obj["prev_hash"] != prev:
            reason = _classify(buf, nl + 1, position, obj["seq"])
            raise InvalidEvidenceError(reason, seq=position)
        if position > 0 and obj["kind"] == GENESIS_KIND:
            raise InvalidEvidenceError(TamperReason.INSERTED, seq=position)
        prev = obj["hash"]
        hashes.append(prev)
        if keep_records:
            result.records.append(Record(**obj))
        position += 1
        pos = nl + 1
        result.complete_len = pos
    if hashes:
        result.log_id = result.records[0].data["log_id"] if keep_records else None
    if expect_head is not None:
        if expect_head.size > len(hashes):
            raise InvalidEvidenceError(TamperReason.TRUNCATED, seq=len(hashes))
        if expect_head.size > 0 and hashes[expect_head.size - 1] != expect_head.hash:
            raise InvalidEvidenceError(TamperReason.MODIFIED, seq=expect_head.size - 1)
        if expect_head.size == 0 and expect_head.hash != EMPTY_HASH:
            raise InvalidEvidenceError(TamperReason.MODIFIED, seq=None)
    return result


def _genesis_prev(obj: dict[str, Any]) -> str:
    """The prev_hash record 0 must carry, or "" (never equal) if it is no genesis."""
    data = obj["data"]
    if (
        obj["kind"] != GENESIS_KIND
        or type(data) is not dict
        or data.keys() != {"log_id"}
        or type(data["log_id"]) is not str
    ):
        return ""
    return genesis_hash(data["log_id"])
