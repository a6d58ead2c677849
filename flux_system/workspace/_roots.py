"""The roots of a workspace and the attribution of a caller's path to one of them.

- the main root: relative paths (``"src/a.py"``), writable;
- named roots: ``"@name/rel"``; read-only unless declared ``NamedRoot(path, writable=True)``;
- read roots: addressed by absolute paths lexically inside them; read-only.

An absolute argument is accepted only when it lies *lexically* inside a root (either
the root as given or its ``realpath``); it is attributed to the most specific such root
and made relative to it. Nothing here follows a link: the remainder is then resolved
beneath that root's fd by :mod:`._resolve`, which refuses ``..`` above it.
"""

from __future__ import annotations

import os
import pathlib
import typing

from flux_system._exceptions import ConfinementReason, PathEscapeError, map_os_errors
from flux_system._values import record
from flux_system.workspace._pathname import as_text

__all__ = ["NamedRoot", "Root", "open_root", "remainder", "split_abs"]

_ROOT_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC


@typing.final
@record
class NamedRoot:
    """A named root of a :class:`~flux_system.Workspace`, addressed as ``"@name/rel"``.

    Attributes:
        path: the directory (trusted configuration: resolved with host semantics once,
            when the workspace is created).
        writable: whether writes through ``@name/...`` are allowed. Default ``False``:
            a named root given as a bare path is read-only. Must be a ``bool``
            (``TypeError`` otherwise: ``"false"`` must not grant writes).
    """

    path: str | os.PathLike[str]
    writable: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.writable, bool):  # a grant is never implied by a truthy value
            raise TypeError(f"writable must be bool, not {type(self.writable).__name__}")


class Root:
    """One open root: its fd (the authority), its identity and whether it is writable."""

    __slots__ = ("fd", "label", "parts", "path", "writable")

    def __init__(self, fd: int, label: str, path: pathlib.Path, writable: bool) -> None:
        self.fd = fd
        self.label = label
        self.path = path
        self.writable = writable
        real = os.path.realpath(path)
        self.parts: tuple[tuple[bytes, ...], ...] = tuple(
            {split_abs(os.fsencode(str(path))), split_abs(os.fsencode(real))}
        )


def split_abs(raw: bytes) -> tuple[bytes, ...]:
    """Lexical components of an absolute path; ``""`` and ``"."`` dropped, ``..`` kept."""
    return tuple(part for part in raw.split(b"/") if part not in (b"", b"."))


def remainder(raw: bytes, skip: int) -> bytes:
    """*raw* without its first *skip* components (counted as :func:`split_abs` does).

    The rest is kept as spelled, so ``ROOT/x/.`` stays ``x/.`` (and ``ROOT/x/`` stays
    ``x/``): a trailing ``.`` or ``/`` asks for a directory and names no final entry.
    Dropping it would act on ``x`` itself (a link to outside replaced instead of
    refused). ``b"."`` when nothing remains.
    """
    comps = raw.split(b"/")
    i = 0
    while skip:
        if comps[i] not in (b"", b"."):
            skip -= 1
        i += 1
    return b"/".join(comps[i:]).lstrip(b"/") or b"."


def open_root(value: object, *, argname: str, label: str, writable: bool) -> Root:
    """Open a root directory given by the caller (trusted) and return its handle."""
    text = as_text(value, argname)
    if not text or "\x00" in text:
        raise ValueError(f"{argname} must be a non-empty path without NUL")
    path = pathlib.Path(os.path.abspath(text))
    with map_os_errors("Workspace", str(path)):
        fd = os.open(path, _ROOT_FLAGS)
    return Root(fd, label, path, writable)


def unknown_root(op: str, display: str) -> PathEscapeError:
    return PathEscapeError(
        f"{op}: no such named root", op=op, path=display, reason=ConfinementReason.UNKNOWN_ROOT
    )


def outside_roots(op: str, display: str) -> PathEscapeError:
    return PathEscapeError(
        f"{op}: absolute path outside every root",
        op=op,
        path=display,
        reason=ConfinementReason.ABSOLUTE_PATH,
    )
