"""What an evidence record can hold: the checks the executor runs on an input before
anything runs, and the escaping of text it records.

Guarantee: :func:`unrecordable` returns ``None`` only for a value the evidence log's
canonical JSON encodes and reads back unchanged, within :data:`_MAX_INPUT_DEPTH`
levels (the log's own bound is 128, leaving room for the record around it).
:func:`text` returns valid Unicode for any ``str``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

__all__ = ["text", "unrecordable"]

_MAX_INPUT_DEPTH = 64  # an input nested deeper cannot be recorded whole (evidence: 128)
_MAX_INT_BITS = 13_000  # ~3,900 decimal digits: below the interpreter's str limit (4,300)


def _leaf(value: object) -> str | None:
    """Why the non-container *value* cannot be recorded, or ``None``."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, str):
        if str.isascii(value):  # O(1), and no subclass override consulted: no surrogate
            return None
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return "holds a string that is not valid Unicode text (a lone surrogate)"
        return None
    if isinstance(value, int):
        return None if value.bit_length() <= _MAX_INT_BITS else "holds an integer too large"
    if isinstance(value, float):
        return None if math.isfinite(value) else "holds a number that is not finite"
    return f"holds a {type(value).__name__}, which is not JSON"


def unrecordable(value: object, depth: int = 0) -> str | None:
    """Why *value* cannot be an evidence record's input, or ``None`` when it can.

    Refused up front (``INVALID_INPUT``) rather than failing the evidence append after
    the handler ran: anything but JSON (``None``, bool, int, float, str, list/tuple,
    a mapping with ``str`` keys), nesting deeper than :data:`_MAX_INPUT_DEPTH`, a
    string that is not valid Unicode text (a lone surrogate), NaN or an infinity, an
    integer past :data:`_MAX_INT_BITS` bits.
    """
    if depth > _MAX_INPUT_DEPTH:
        return f"nests deeper than {_MAX_INPUT_DEPTH}"
    if type(value) is str:  # the usual leaf, without the Mapping ABC's instance check
        return _leaf(value)
    # An ASCII str (its own flag, never an override) one level down is recordable as
    # it is, unless that level is itself too deep: checked here without a call.
    shallow = depth < _MAX_INPUT_DEPTH
    if type(value) is dict or isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"has a {type(key).__name__} key (object keys are strings)"
            if not (type(key) is str and str.isascii(key)):
                why = _leaf(key)
                if why is not None:
                    return why
            if shallow and type(item) is str and str.isascii(item):
                continue
            why = unrecordable(item, depth + 1)
            if why is not None:
                return why
        return None
    if isinstance(value, (list, tuple)):
        for item in value:
            if shallow and type(item) is str and str.isascii(item):
                continue
            why = unrecordable(item, depth + 1)
            if why is not None:
                return why
        return None
    return _leaf(value)


def text(text: str) -> str:
    """*text* as valid Unicode: a lone surrogate (a file name that is not UTF-8, kept
    by ``surrogateescape``) becomes a ``\\udcXX`` escape, so results, evidence and the
    session store can always hold it."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text
