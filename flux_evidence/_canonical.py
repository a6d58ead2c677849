"""Canonical JSON: the one byte encoding that records are hashed and stored in.

Sorted keys, no insignificant whitespace, UTF-8 (non-ASCII kept as UTF-8, not
``\\u`` escapes), integers of any size, finite floats in Python's shortest round-trip
form; ``NaN``/``Infinity`` are refused. This is the canonical form of *this* project
(close to, but not claimed to be, RFC 8785 JCS: floats are Python ``repr``).
"""

from __future__ import annotations

import json
from typing import Any

from ._exceptions import EvidenceError, EvidenceReason

__all__ = ["MAX_DEPTH", "canonical_json", "encode_data", "loads_strict"]

_ENCODER = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"non-finite number {name} is not canonical JSON")


_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)


def canonical_json(value: Any) -> bytes:
    """Return the canonical JSON encoding of *value* as UTF-8 bytes.

    Guarantee: equal JSON values (as :func:`loads_strict` returns them) encode to equal
    bytes; the output contains no newline byte (newlines in strings are escaped).
    Not guaranteed: that *value* round-trips — a tuple encodes as a list and a
    non-``str`` key is stringified; :func:`encode_data` is the checked entry.

    Raises:
        EvidenceError: reason UNENCODABLE for NaN/Infinity, unserialisable objects,
            circular or too deeply nested structures, lone surrogates, or integers
            beyond the interpreter's digit limit.
    """
    try:
        return _ENCODER.encode(value).encode("utf-8")
    except (TypeError, ValueError, RecursionError) as exc:
        raise EvidenceError(
            f"value is not encodable as canonical JSON ({type(exc).__name__})",
            op="encode",
            reason=EvidenceReason.UNENCODABLE,
        ) from exc


def loads_strict(text: str) -> Any:
    """Parse *text* as JSON, refusing ``NaN``/``Infinity``.

    Raises:
        ValueError, RecursionError: the caller maps these to its own error.
    """
    return _DECODER.decode(text)


def encode_data(data: Any) -> tuple[bytes, Any]:
    """Encode *data* canonically and return (bytes, an independent parsed copy).

    Guarantee: the copy is exactly what a reader of the log will see — *data* is
    refused unless it survives the round trip unchanged (so a tuple, a non-``str`` key
    or a ``bool`` key is refused rather than silently rewritten), and nesting deeper
    than ``MAX_DEPTH`` is refused.

    Raises:
        EvidenceError: reason UNENCODABLE.
    """
    raw = canonical_json(data)
    try:
        copy = loads_strict(raw.decode("utf-8"))
    except (ValueError, RecursionError) as exc:
        raise EvidenceError(
            "value does not round-trip through canonical JSON",
            op="encode",
            reason=EvidenceReason.UNENCODABLE,
        ) from exc
    try:
        same = _same(copy, data)
    except RecursionError:
        same = False
    if not same:
        raise EvidenceError(
            "value does not round-trip through canonical JSON (tuple, non-str key, ...)",
            op="encode",
            reason=EvidenceReason.UNENCODABLE,
        )
    return raw, copy


# Nesting bound for stored data: deeper values are refused so that every stored record
# can be parsed back by any verifier within the interpreter's recursion limit.
MAX_DEPTH = 200


def _same(copy: Any, original: Any, depth: int = 0) -> bool:
    """Structural equality that also distinguishes list from tuple and bool from int."""
    if depth > MAX_DEPTH:
        return False
    if isinstance(original, dict):
        if not isinstance(copy, dict) or len(copy) != len(original):
            return False
        for key, value in original.items():
            if type(key) is not str or key not in copy:
                return False
            if not _same(copy[key], value, depth + 1):
                return False
        return True
    if isinstance(original, list):
        if not isinstance(copy, list) or len(copy) != len(original):
            return False
        return all(_same(c, o, depth + 1) for c, o in zip(copy, original, strict=True))
    if isinstance(original, bool) or original is None:
        return copy is original
    if isinstance(original, int):
        return type(copy) is int and copy == original
    if isinstance(original, float):
        return type(copy) is float and copy == original
    if isinstance(original, str):
        return type(copy) is str and copy == original
    return False
