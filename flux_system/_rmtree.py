"""Recursive removal by directory fd that never follows a symlink.

Each directory is opened with ``O_DIRECTORY|O_NOFOLLOW`` relative to its parent's fd,
each entry is unlinked relative to the fd of the directory that holds it. A symlink —
even one swapped in for a directory between listing and descending (the
CVE-2022-21658 class, Rust's ``remove_dir_all``) — is unlinked itself, never entered.

Not guaranteed: that nothing new exists afterwards if another party keeps creating
entries (bounded re-listing, then ``NOT_EMPTY``); mount points inside the tree are
descended like directories.
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

_MAX_DEPTH = 512  # directory fds held at once (one per nesting level)
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
    __slots__ = ("fd", "name", "names", "relists")

    def __init__(self, fd: int, name: str | bytes) -> None:
        self.fd = fd
        self.name = name
        self.names: list[str] = os.listdir(fd)
        self.relists = 0


def remove_tree(parentfd: int, name: bytes, *, op: str, display: str) -> None:
    """Remove *name* in *parentfd* and everything beneath it, never following a symlink.

    Raises:
        WorkspaceError: ``TOO_DEEP``, ``NOT_EMPTY`` (entries kept appearing).
        PathEscapeError: ``RACE`` when entries keep changing type under the walk.
        OSError: for the caller to map.
    """
    top = _open_dir(parentfd, name)
    if top is None:
        os.unlink(name, dir_fd=parentfd)  # not a directory (any more): remove the entry
        return
    frames: list[_Frame] = []
    try:
        frames.append(_Frame(top, name))
    except BaseException:
        os.close(top)
        raise
    flips = 0
    try:
        while frames:
            frame = frames[-1]
            if frame.names:
                entry = frame.names.pop()
                try:
                    os.unlink(entry, dir_fd=frame.fd)
                    continue
                except FileNotFoundError:
                    continue
                except OSError as exc:
                    if exc.errno not in (errno.EISDIR, errno.EPERM):
                        raise
                    sub = _open_dir(frame.fd, entry)
                    if sub is None and exc.errno == errno.EPERM:
                        raise
                if sub is None:  # was a directory, is not any more: try again
                    flips += 1
                    if flips > _MAX_FLIPS:
                        raise PathEscapeError(
                            f"{op}: tree keeps changing",
                            op=op,
                            path=display,
                            reason=ConfinementReason.RACE,
                        )
                    frame.names.append(entry)
                    continue
                if len(frames) >= _MAX_DEPTH:
                    os.close(sub)
                    raise WorkspaceError(
                        f"{op}: tree deeper than {_MAX_DEPTH}",
                        op=op,
                        path=display,
                        reason=WorkspaceReason.TOO_DEEP,
                    )
                try:
                    frames.append(_Frame(sub, entry))
                except BaseException:
                    os.close(sub)
                    raise
                continue
            holder = frames[-2].fd if len(frames) > 1 else parentfd
            try:
                os.rmdir(frame.name, dir_fd=holder)
            except OSError as exc:
                if exc.errno != errno.ENOTEMPTY or frame.relists >= _MAX_RELIST:
                    raise
                frame.relists += 1
                frame.names = os.listdir(frame.fd)
                continue
            os.close(frame.fd)
            frames.pop()
    finally:
        for frame in frames:
            os.close(frame.fd)
