"""Validation of caller paths, before any syscall.

Every path a caller hands to a :class:`~flux_system.Workspace` passes through here
first: a type check (``TypeError`` naming the argument), then refusal of empty paths,
NUL/control characters, names the file system could never hold (over ``NAME_MAX``
per component, over ``PATH_MAX`` in total) and text that cannot be encoded to the
file-system encoding. Only what passes is turned into bytes for the kernel.

Nothing here touches the file system; confinement itself is :mod:`._resolve`'s job.
"""

from __future__ import annotations

import os
import re
import sys

from flux_system._exceptions import ConfinementReason, InvalidPathError

__all__ = [
    "NAME_MAX",
    "PATH_MAX",
    "as_text",
    "check_target",
    "encode_checked",
    "split_parent",
]

NAME_MAX = 255  # Linux NAME_MAX: bytes in one component
PATH_MAX = 4096  # Linux PATH_MAX: bytes in a path, terminating NUL included

# C0 controls, DEL and C1 controls. NUL would truncate the path at the C boundary;
# newline and the rest forge log lines and terminal output.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_FS_ENCODING = sys.getfilesystemencoding()
_FS_ERRORS = sys.getfilesystemencodeerrors()


def as_text(value: object, argname: str) -> str:
    """Return *value* as ``str`` (``str`` or an ``os.PathLike`` yielding ``str``).

    Raises:
        TypeError: naming *argname*, for bytes, ``None``, numbers and anything else.
    """
    if type(value) is str:
        return value
    if isinstance(value, str):  # str.__str__: the text itself, never an override's
        return str.__str__(value)
    if isinstance(value, os.PathLike):
        text = os.fspath(value)  # called once: the text checked is the text used
        if isinstance(text, str):
            return str.__str__(text)  # a str subclass could lie in encode() and the rest
    raise TypeError(f"{argname} must be str or os.PathLike[str], not {type(value).__name__}")


def encode_checked(text: str, *, op: str, display: str) -> bytes:
    """Validate *text* as a path and return its file-system bytes.

    Guarantee: the result is non-empty, holds no NUL or control byte, no component is
    longer than ``NAME_MAX`` bytes and the whole is shorter than ``PATH_MAX`` bytes.

    Raises:
        InvalidPathError: reason ``EMPTY``, ``CONTROL_BYTE``, ``UNENCODABLE`` or
            ``TOO_LONG``.
    """
    if not text:
        raise InvalidPathError(f"{op}: empty path", op=op, path=display, reason=_EMPTY)
    if not text.isprintable() and _CONTROL.search(text) is not None:
        raise InvalidPathError(
            f"{op}: control character in path", op=op, path=display, reason=_CONTROL_BYTE
        )
    try:
        raw = text.encode(_FS_ENCODING, _FS_ERRORS)
    except UnicodeEncodeError as exc:
        raise InvalidPathError(
            f"{op}: path cannot be encoded for the file system",
            op=op,
            path=display,
            reason=ConfinementReason.UNENCODABLE,
        ) from exc
    size = len(raw)
    if size >= PATH_MAX:
        raise InvalidPathError(
            f"{op}: path longer than PATH_MAX", op=op, path=display, reason=_TOO_LONG
        )
    if size > NAME_MAX and any(len(part) > NAME_MAX for part in raw.split(b"/")):
        raise InvalidPathError(
            f"{op}: component longer than NAME_MAX", op=op, path=display, reason=_TOO_LONG
        )
    return raw


def check_target(target: object, *, op: str) -> bytes:
    """Validate a symlink *target*: a path, and never absolute (beneath semantics)."""
    from flux_system._exceptions import PathEscapeError

    text = as_text(target, "target")
    raw = encode_checked(text, op=op, display=text)
    if raw.startswith(b"/"):
        raise PathEscapeError(
            f"{op}: absolute symlink target",
            op=op,
            path=text,
            reason=ConfinementReason.ABSOLUTE_SYMLINK,
        )
    return raw


def split_parent(rel: bytes) -> tuple[bytes, bytes, bool]:
    """Split a path into ``(parent, name, trailing_slash)``.

    ``parent`` is ``b"."`` when a relative *rel* has one component. An absolute *rel*
    (only the ``unconfined`` hatch passes one) keeps its meaning: ``b"/x"`` splits into
    ``(b"/", b"x")`` — never ``b"."``, which would name the root's own directory — and
    ``b"/"`` (or ``b"///"``) into ``(b"/", b".")``. ``name`` may be ``b"."`` or ``b".."``
    — callers that act on a final name refuse those.
    """
    stripped = rel.rstrip(b"/")
    trailing = len(stripped) != len(rel)
    top = b"/" if rel.startswith(b"/") else b"."
    if not stripped:
        return top, b".", trailing
    head, sep, name = stripped.rpartition(b"/")
    if not sep:
        return b".", name, trailing
    return (head or top), name, trailing


_EMPTY = ConfinementReason.EMPTY
_CONTROL_BYTE = ConfinementReason.CONTROL_BYTE
_TOO_LONG = ConfinementReason.TOO_LONG
