"""Protected paths inside writable roots: found by fd, never by following a link.

The built-in list (DESIGN §2.5) plus the profile's. For each writable root the existing
ones are opened ``O_PATH|O_NOFOLLOW`` one component at a time beneath the root's fd,
so a symlink planted by an earlier run (``.git -> /home/me/.ssh``) is never followed:
a component that is a symlink is skipped and reported, as is anything that is neither a
directory nor a regular file.

Guarantee: every fd returned refers to an object beneath the root, reached without
following any symlink; the caller owns the fds (``O_CLOEXEC``).
Not guaranteed: that the path is still there when bwrap binds it (bwrap compares the
fd's identity with the mount and aborts on a mismatch).
"""

from __future__ import annotations

import contextlib
import os
import stat
import typing
from dataclasses import dataclass

__all__ = ["BUILTIN_PROTECTED", "Found", "find_protected"]

BUILTIN_PROTECTED: tuple[str, ...] = (
    ".git/hooks",
    ".git/config",
    ".vscode",
    ".idea",
    ".envrc",
    ".mcp.json",
    ".claude",
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".bash_logout",
    ".profile",
    ".zshrc",
    ".zshenv",
    ".zprofile",
    ".zlogin",
    ".zlogout",
    ".cshrc",
    ".tcshrc",
    ".kshrc",
    ".inputrc",
)
_MAX_DEPTH = 16  # components of one protected path (profile entries are short)


@typing.final
@dataclass(frozen=True, slots=True)
class Found:
    """One protected path of a root: its relative name, fd (or why none), its parents."""

    rel: str
    fd: int | None
    parents: tuple[tuple[str, int], ...]  # (relative dir, O_PATH fd) below the root
    skipped: str = ""  # why it is not bound ("" when it is, "absent" when missing)


def _close(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def _open_one(root_fd: int, rel: str) -> Found:
    parts = [p for p in rel.split("/") if p and p != "."]
    if not parts or ".." in parts or len(parts) > _MAX_DEPTH:
        return Found(rel, None, (), "invalid")
    opened: list[int] = []
    parents: list[tuple[str, int]] = []
    at = root_fd
    try:
        for i, name in enumerate(parts):
            try:
                fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=at)
            except FileNotFoundError:
                _close(opened)
                return Found(rel, None, (), "absent")
            except NotADirectoryError:
                _close(opened)
                return Found(rel, None, (), "a parent is not a directory")
            opened.append(fd)
            mode = os.fstat(fd).st_mode
            if stat.S_ISLNK(mode):
                _close(opened)
                return Found(rel, None, (), "a symlink (not followed)")
            last = i == len(parts) - 1
            if not last:
                if not stat.S_ISDIR(mode):
                    _close(opened)
                    return Found(rel, None, (), "a parent is not a directory")
                parents.append(("/".join(parts[: i + 1]), fd))
            elif not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
                _close(opened)
                return Found(rel, None, (), "not a file or directory")
            at = fd
        return Found("/".join(parts), opened[-1], tuple(parents))
    except OSError as exc:
        _close(opened)
        return Found(rel, None, (), f"cannot be opened: {exc.strerror}")


def find_protected(root_fd: int, names: tuple[str, ...]) -> list[Found]:
    """Open each of *names* beneath *root_fd* (see the module docstring)."""
    return [_open_one(root_fd, rel) for rel in names]
