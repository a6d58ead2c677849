"""The verifier core: check a log's bytes line by line and say where it first breaks.

Shared by :func:`verify`, :func:`verify_bytes` and ``EvidenceLog.open`` so that the
writer never accepts a log the offline verifier would reject.

A line is checked against the exact grammar of a canonical record — the envelope by one
anchored regular expression (canonical string escapes, canonical integers, the fixed
key order), the ``data`` value by parsing and re-encoding it — which accepts exactly the
bytes ``canonical_json`` produces for a record, and is faster than re-encoding the
whole object (a test holds the two to the same answers).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

from ._canonical import encode_str, loads_strict
from ._exceptions import InvalidEvidenceError, TamperReason
from ._record import (
    EMPTY_HASH,
    FORMAT_VERSION,
    GENESIS_KIND,
    MAX_LINE_BYTES,
    Head,
    Record,
    genesis_hash,
)

__all__ = ["Parsed", "ScanResult", "parse_line", "scan"]

# A JSON string exactly as the canonical encoder writes it (UTF-8 kept, only '"', '\',
# and control characters escaped; the short escapes where JSON has them; else \u00xx).
# Possessive quantifiers: no backtracking, linear time on any input.
_STR = r'"(?:[^"\\\x00-\x1f]++|\\["\\bfnrt]|\\u00(?:0[0-7bef]|1[0-9a-f]))*+"'
# A canonical integer, at most 4300 digits (CPython's int/str conversion limit).
_UINT = r"(?:0|[1-9][0-9]{0,4299})"
_INT = r"-?" + _UINT
# The envelope, in canonical key order, split at the top-level "hash" key: the part
# before "data" and the part from "hash" on (only scalars follow "data").
_PREFIX = re.compile(r'\{"actor":(?P<actor>null|' + _STR + r'),"data":')
_SUFFIX = re.compile(
    r',"hash":"(?P<hash>[0-9a-f]{64})"'
    r',"kind":(?P<kind>' + _STR + r")"
    r',"prev_hash":"(?P<prev>[0-9a-f]{64})"'
    r',"seq":(?P<seq>' + _UINT + r")"
    r',"session":(?P<session>null|' + _STR + r")"
    r',"ts":(?P<ts>' + _INT + r")"
    r',"turn":(?P<turn>null|' + _INT + r")"
    r',"version":' + str(FORMAT_VERSION) + r"\}"
)
_HASH_KEY = ',"hash":"'
_HASH_FIELD = b',"hash":"'
_HASH_FIELD_LEN = len(_HASH_FIELD) + 64 + 1  # ,"hash":"<64 hex>"


@dataclass(slots=True)
class ScanResult:
    """What a successful scan found."""

    hashes: list[str] = field(default_factory=list)
    records: list[Record] = field(default_factory=list)
    complete_len: int = 0  # bytes up to and including the last complete line's newline
    torn_bytes: int = 0  # bytes after it (a last line without its newline)
    log_id: str | None = None  # from the genesis record

    @property
    def head(self) -> Head:
        return Head(len(self.hashes), self.hashes[-1] if self.hashes else EMPTY_HASH)


# (prefix match, suffix match, data JSON text) of a canonical line.
Parsed = tuple["re.Match[str]", "re.Match[str]", str]


def parse_line(line: bytes) -> Parsed | None:
    """Return the fields of a canonical record line (without its newline), or None.

    Accepts exactly the bytes ``canonical_json`` writes for a record: the top-level
    ``"hash"`` key is the last ``,"hash":"`` in the line (a later one would have to sit
    inside a string, where quotes are escaped), the suffix from it is matched exactly,
    the prefix up to ``data`` too, and ``data`` is parsed and re-encoded.
    """
    if len(line) > MAX_LINE_BYTES:
        return None
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        return None
    cut = text.rfind(_HASH_KEY)
    if cut < 0:
        return None
    suffix = _SUFFIX.fullmatch(text, cut)
    prefix = _PREFIX.match(text)
    if suffix is None or prefix is None or prefix.end() > cut:
        return None
    data = text[prefix.end() : cut]
    try:
        if encode_str(loads_strict(data)) != data:
            return None  # data not canonical (whitespace, escapes, key order, dup keys)
    except (TypeError, ValueError, RecursionError):
        return None
    return prefix, suffix, data


def _label(text: str) -> str | None:
    if text == "null":
        return None
    value: str = loads_strict(text)
    return value


def _record(p: Parsed) -> Record:
    prefix, suffix, data = p
    g = suffix.group
    turn = g("turn")
    return Record(
        version=FORMAT_VERSION,
        seq=int(g("seq")),
        ts=int(g("ts")),
        kind=loads_strict(g("kind")),
        session=_label(g("session")),
        turn=None if turn == "null" else int(turn),
        actor=_label(prefix.group("actor")),
        data=loads_strict(data),
        prev_hash=g("prev"),
        hash=g("hash"),
    )


def _later_seqs(buf: bytes, pos: int) -> set[int]:
    """Seq fields of the complete lines from *pos* on (unparseable lines skipped)."""
    out: set[int] = set()
    for line in buf[pos:].split(b"\n")[:-1]:
        parsed = parse_line(line)
        if parsed is not None:
            out.add(int(parsed[1].group("seq")))
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


def _genesis_log_id(p: Parsed) -> str | None:
    """The log id of a well-formed genesis record, else None."""
    if loads_strict(p[1].group("kind")) != GENESIS_KIND:
        return None
    data = loads_strict(p[2])
    if type(data) is not dict or data.keys() != {"log_id"} or type(data["log_id"]) is not str:
        return None
    log_id: str = data["log_id"]
    return log_id


_GENESIS_KIND_JSON = '"' + GENESIS_KIND + '"'


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
    records = result.records
    sha256 = hashlib.sha256
    fromhex = bytes.fromhex
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
        p = parse_line(line)
        if p is None:
            raise InvalidEvidenceError(TamperReason.BAD_JSON, seq=position)
        record_hash, record_prev, record_seq, record_kind = p[1].group(
            "hash", "prev", "seq", "kind"
        )
        digest = sha256(fromhex(record_prev))
        cut = line.rfind(_HASH_FIELD)  # the same top-level field parse_line found
        digest.update(line[:cut])
        digest.update(line[cut + _HASH_FIELD_LEN :])
        if digest.hexdigest() != record_hash:
            raise InvalidEvidenceError(TamperReason.MODIFIED, seq=position)
        if position == 0:
            result.log_id = _genesis_log_id(p)
            # A first line that is no genesis record chains to nothing ("").
            prev = "" if result.log_id is None else genesis_hash(result.log_id)
        elif record_kind == _GENESIS_KIND_JSON:
            raise InvalidEvidenceError(TamperReason.INSERTED, seq=position)
        if record_prev != prev or record_seq != str(position):
            reason = _classify(buf, nl + 1, position, int(record_seq))
            raise InvalidEvidenceError(reason, seq=position)
        prev = record_hash
        hashes.append(prev)
        if keep_records:
            records.append(_record(p))
        position += 1
        pos = nl + 1
    result.complete_len = pos if result.torn_bytes == 0 else end - result.torn_bytes
    if expect_head is not None:
        if expect_head.size > len(hashes):
            raise InvalidEvidenceError(TamperReason.TRUNCATED, seq=len(hashes))
        if expect_head.size > 0 and hashes[expect_head.size - 1] != expect_head.hash:
            raise InvalidEvidenceError(TamperReason.MODIFIED, seq=expect_head.size - 1)
        if expect_head.size == 0 and expect_head.hash != EMPTY_HASH:
            raise InvalidEvidenceError(TamperReason.MODIFIED, seq=None)
    return result
