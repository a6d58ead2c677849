"""The audit's plan (protected paths as a tree of names) and its capture before a run.

Each protected path's parents are captured by type and identity (plus a few of their
entries, :data:`MARKS`, to recognise a parent renamed away: inode numbers are reused),
the path itself with its whole subtree (``_audit_tree.capture``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Final, final

from flux_system.sandbox._audit_tree import (
    Budget,
    Node,
    TreeError,
    capture,
    lstat_or_none,
    open_dir,
)
from flux_system.workspace import FileKind

__all__ = ["MARKS", "Entry", "capture_plan", "make_plan", "normalised"]

MARKS: Final = 16  # entries of a parent recorded to recognise it (inode numbers are reused)


@final
class Entry:
    """The plan: one name to capture, with the deeper names of protected paths."""

    __slots__ = ("before", "children", "marks", "protected")

    def __init__(self) -> None:
        self.protected = False
        self.before: Node | None = None
        self.children: dict[str, Entry] = {}
        self.marks: frozenset[tuple[str, int]] = frozenset()  # a parent's (name, inode)s


def _components(path: object) -> tuple[str, ...]:
    if not isinstance(path, str):
        raise TypeError(f"protected paths must be str, not {type(path).__name__}")
    parts = tuple(p for p in path.strip("/").split("/") if p not in ("", "."))
    if not parts or path.startswith("/") or ".." in parts or "\x00" in path:
        raise ValueError(f"protected path must be relative, without '..': {path!r}")
    return parts


def normalised(paths: Iterable[str]) -> frozenset[str]:
    """The paths as the plan holds them (``a/b``: no ``.``, no empty component)."""
    return frozenset("/".join(_components(p)) for p in paths)


def make_plan(paths: Iterable[str]) -> dict[str, Entry]:
    if isinstance(paths, str):
        raise TypeError("paths must be an iterable of str, not str")
    top: dict[str, Entry] = {}
    for parts in sorted({_components(p) for p in paths}, key=len):
        level, entry = top, None
        for part in parts:
            if entry is not None and entry.protected:
                break  # inside a protected subtree already: covered
            entry = level.setdefault(part, Entry())
            level = entry.children
        else:
            if entry is not None and not entry.protected:
                entry.protected = True
                entry.children.clear()
    return top


def capture_plan(dirfd: int, level: dict[str, Entry], prefix: str, budget: Budget) -> None:
    for name, entry in level.items():
        path = f"{prefix}{name}"
        entry.before = capture(dirfd, name, path, budget, subtree=entry.protected)
        if entry.protected or entry.before is None or entry.before.kind is not FileKind.DIRECTORY:
            continue
        st = lstat_or_none(dirfd, name)
        if st is None:
            raise TreeError("vanished while captured", path)
        try:
            fd = open_dir(dirfd, name, st)
            entry.marks = marks(fd)
        except OSError as exc:
            raise TreeError(exc.strerror or "unreadable", path) from exc
        try:
            capture_plan(fd, entry.children, f"{path}/", budget)
        finally:
            os.close(fd)


def marks(fd: int) -> frozenset[tuple[str, int]]:
    """A few ``(name, inode)`` of a directory's entries: with its own inode, what makes
    a renamed-away parent recognisable (a new directory may get a freed inode number,
    not the same entries)."""
    marks = []
    for name in sorted(os.listdir(fd))[:MARKS]:
        st = lstat_or_none(fd, name)
        if st is not None:
            marks.append((name, st.st_ino))
    return frozenset(marks)
