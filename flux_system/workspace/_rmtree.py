"""Recursive removal by directory fd that never follows a symlink.

Each directory is opened with ``O_DIRECTORY|O_NOFOLLOW`` relative to its parent's fd,
each entry is unlinked relative to the fd of the directory that holds it. A symlink —
even one swapped in for a directory between listing and descending (the
CVE-2022-21658 class, Rust's ``remove_dir_all``) — is unlinked itself, never entered.
The walk climbs back by ``..`` and checks the identity of what it reached (as fts and
GNU ``rm`` do), so it holds one directory fd whatever the depth.

Not guaranteed: that nothing new exists afterwards if another party keeps creating
entries (bounded re-listing, then ``NOT_EMPTY``); that a removal failing midway
(permission, ``RACE``) removed nothing — what it had removed stays removed; mount
points inside the tree are descended like directories.
"""

from __future__ import annotations

import errno
import os

from flux_system._exceptions import (
    ConfinementReason,
    PathEscapeError,
    WorkspaceError,
    WorkspaceReason,
)

__all__ = ["remove_tree"]

_MAX_DEPTH = 1 << 16  # nesting levels (memory only: one directory fd is held at a time)
_MAX_RELIST = 8  # re-listings of one directory that keeps gaining entries
_MAX_FLIPS = 256  # entries seen changing type (file <-> dir) under us, per call
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


def _open_dir(parent: int, name: str | bytes) -> int | None:
    """Open a real directory (not a symlink to one) or return ``None``."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent)
    except OSError as exc:
        if exc.errno in (errno.ENOTDIR, errno.ELOOP):
            return None
        raise


class _Frame:
    """One directory being emptied: its name in its parent, identity and pending names."""

    __slots__ = ("dev", "ino", "name", "names", "relists")

    def __init__(self, fd: int, name: str | bytes) -> None:
        st = os.fstat(fd)
        self.dev = st.st_dev
        self.ino = st.st_ino
        self.name = name
        self.names: list[str] = os.listdir(fd)
        self.relists = 0


def _race(op: str, display: str, what: str) -> PathEscapeError:
    return PathEscapeError(f"{op}: {what}", op=op, path=display, reason=ConfinementReason.RACE)


def _up(cur: int, parent: _Frame, op: str, display: str) -> int:
    """Open ``..`` of *cur* and check it is the directory *parent* descended from."""
    up = os.open("..", _DIR_FLAGS, dir_fd=cur)
    st = os.fstat(up)
    if (st.st_dev, st.st_ino) != (parent.dev, parent.ino):
        os.close(up)
        raise _race(op, display, "a directory was moved during removal")
    return up


def remove_tree(parentfd: int, name: bytes, *, op: str, display: str) -> None:
    """Remove *name* in *parentfd* and everything beneath it, never following a symlink.

    Only the directory being emptied is held open: the walk climbs back by ``..``
    and checks that it reached the very directory (device, inode) it came down from,
    so depth is not limited by ``RLIMIT_NOFILE`` and a directory moved elsewhere
    mid-walk stops the removal (``RACE``) instead of continuing somewhere else.

    Raises:
        WorkspaceError: ``TOO_DEEP``, ``NOT_EMPTY`` (entries kept appearing).
        PathEscapeError: ``RACE`` when entries keep changing type under the walk or
            a directory was moved away.
        OSError: for the caller to map.
    """
    cur = _open_dir(parentfd, name)
    if cur is None:
        os.unlink(name, dir_fd=parentfd)  # not a directory (any more): remove the entry
        return
    frames: list[_Frame] = []
    flips = 0
    try:
        frames.append(_Frame(cur, name))
        while frames:
            frame = frames[-1]
            if frame.names:
                entry = frame.names.pop()
                try:
                    os.unlink(entry, dir_fd=cur)
                    continue
                except FileNotFoundError:
                    continue
                except OSError as exc:
                    if exc.errno not in (errno.EISDIR, errno.EPERM):
                        raise
                    sub = _open_dir(cur, entry)
                    if sub is None and exc.errno == errno.EPERM:
                        raise
                if sub is None:  # was a directory, is not any more: try again
                    flips += 1
                    if flips > _MAX_FLIPS:
                        raise _race(op, display, "tree keeps changing")
                    frame.names.append(entry)
                    continue
                try:
                    if len(frames) >= _MAX_DEPTH:
                        raise WorkspaceError(
                            f"{op}: tree deeper than {_MAX_DEPTH}",
                            op=op,
                            path=display,
                            reason=WorkspaceReason.TOO_DEEP,
                        )
                    frames.append(_Frame(sub, entry))
                except BaseException:
                    os.close(sub)
                    raise
                os.close(cur)
                cur = sub
                continue
            up = _up(cur, frames[-2], op, display) if len(frames) > 1 else -1
            try:
                os.rmdir(frame.name, dir_fd=up if up >= 0 else parentfd)
            except OSError as exc:
                if up >= 0:
                    os.close(up)
                if exc.errno != errno.ENOTEMPTY or frame.relists >= _MAX_RELIST:
                    raise
                frame.relists += 1
                frame.names = os.listdir(cur)
                continue
            os.close(cur)
            cur = up
            frames.pop()
    finally:
        if cur >= 0:
            os.close(cur)
