"""Opening a regular file for reading without opening anything else on the way.

A read must refuse a FIFO, socket or device *before* it is opened: opening a device
runs its driver's ``open`` (``/dev/watchdog`` arms, a tape rewinds, a serial line
toggles and resets the board behind it), which refusing afterwards cannot undo. Each
resolver gets a function that checks the file first and then opens that same inode:

- the careful path (any resolver): resolve with ``O_PATH`` — no driver ``open`` runs —
  check the type, then reopen the very inode through its ``/proc/self/fd`` entry (the
  ``O_PATH`` descriptor is ours, so this is not a lookup by name). ~4 µs slower than
  a plain open: a magic-link open through procfs is not cheap.
- ``openat2`` fast path: ``stat`` the path (a filter only: nothing is opened and what
  it finds is never reported), and if it is a regular file, open the same path with
  ``RESOLVE_NO_SYMLINKS`` added, so no symlink swapped in meanwhile can lead the open
  elsewhere; the opened inode must be the one the filter saw. Paths with a symlink,
  and anything the filter does not see as a regular file, take the careful path.
- ``walk`` fast path: the parent is resolved by the walk, the last component is
  checked with ``fstatat`` (no follow) and opened with ``O_NOFOLLOW`` from the same
  directory fd; it must be the same inode. A final symlink takes the careful path.
- ``unconfined``: ``stat`` then open by name, same inode (no confinement to keep).

Guarantee (``openat2``, ``walk``): the fd returned is of a regular file beneath the
root, and no device, FIFO or socket was opened to get it — unless one is swapped in
during the lookup (between the check and the open of the fast paths): a device that
way needs the right to create device nodes (none can be moved in from ``/dev``, another
filesystem), and its driver ``open`` may then run; a FIFO may be opened non-blocking
and closed at once. Either way the opened inode is not the one checked, so it is
closed and the lookup retried; a file replaced by another regular file (an editor's
atomic save) is retried the same way, at most ``_MAX_RACE_RETRIES`` times, then RACE.
"""

from __future__ import annotations

import errno
import os
import stat
import typing

from flux_system._exceptions import ConfinementReason, PathEscapeError
from flux_system.workspace._resolve import (
    _HOW_SIZE,
    _MAX_RACE_RETRIES,
    _OPENAT2_NR,
    _RESOLVE,
    RESOLVE_NO_SYMLINKS,
    Opener,
    _how,
    _openat2,
    _syscall,
    open_unconfined,
    walk_open,
)

__all__ = ["REGULAR_OPENERS", "RegularOpener"]

_NO_LINKS = _RESOLVE | RESOLVE_NO_SYMLINKS
_PARENT = os.O_PATH | os.O_DIRECTORY


class RegularOpener(typing.Protocol):
    """Open the regular file *path* beneath *rootfd* with *flags* (``O_CLOEXEC``
    added): (fd, its ``fstat``). See the module docstring for what is guaranteed.

    Raises:
        PathEscapeError: as the resolver's :class:`~flux_system.workspace._resolve.Opener`, and
            ``RACE`` when the file kept being replaced during the lookup.
        OSError: ``EISDIR`` (a directory), ``ENXIO`` (a FIFO, socket or device), and
            anything else the lookup or the open raise.
    """

    def __call__(
        self, rootfd: int, path: bytes, flags: int, *, op: str, display: str
    ) -> tuple[int, os.stat_result]: ...


def _check(st: os.stat_result) -> os.stat_result:
    if stat.S_ISREG(st.st_mode):
        return st
    code = errno.EISDIR if stat.S_ISDIR(st.st_mode) else errno.ENXIO
    raise OSError(code, os.strerror(code))


def _same(fd: int, expected: os.stat_result) -> os.stat_result | None:
    """*fd*'s stat if it is the inode *expected* was taken of; else None (fd closed)."""
    st = os.fstat(fd)
    if st.st_ino == expected.st_ino and st.st_dev == expected.st_dev:
        return st
    os.close(fd)
    return None


def _race(op: str, display: str) -> PathEscapeError:
    return PathEscapeError(
        f"{op}: file replaced during the lookup",
        op=op,
        path=display,
        reason=ConfinementReason.RACE,
    )


def _careful(
    opener: Opener, rootfd: int, path: bytes, flags: int, *, op: str, display: str
) -> tuple[int, os.stat_result]:
    path_fd = opener(rootfd, path, os.O_PATH, 0, follow=True, op=op, display=display)
    try:
        checked = _check(os.fstat(path_fd))
        fd = os.open(b"/proc/self/fd/%d" % path_fd, flags | os.O_CLOEXEC)
    finally:
        os.close(path_fd)
    st = _same(fd, checked)
    if st is None:  # cannot happen (the same open file description): fail closed
        raise _race(op, display)
    return fd, st


def _openat2_regular(
    rootfd: int, path: bytes, flags: int, *, op: str, display: str
) -> tuple[int, os.stat_result]:
    how = _how(flags | os.O_CLOEXEC, 0, _NO_LINKS)
    for _ in range(_MAX_RACE_RETRIES):
        try:  # a filter only: nothing is opened, and what it finds is never reported
            seen = os.stat(path, dir_fd=rootfd)
        except OSError:
            break  # the careful path gives the confined answer
        if not stat.S_ISREG(seen.st_mode):
            break
        fd: int = _syscall(_OPENAT2_NR, rootfd, path, how, _HOW_SIZE)
        if fd < 0:
            break  # a symlink on the path (or a rename meanwhile)
        st = _same(fd, seen)
        if st is not None:
            return fd, st
    return _careful(_openat2, rootfd, path, flags, op=op, display=display)


def _walk_regular(
    rootfd: int, path: bytes, flags: int, *, op: str, display: str
) -> tuple[int, os.stat_result]:
    parent, _, name = path.rpartition(b"/")
    if name in (b"", b".", b".."):
        return _careful(walk_open, rootfd, path, flags, op=op, display=display)
    dirfd = (
        walk_open(rootfd, parent, _PARENT, 0, follow=True, op=op, display=display)
        if parent
        else rootfd
    )
    try:
        for _ in range(_MAX_RACE_RETRIES):
            seen = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
            if stat.S_ISLNK(seen.st_mode):
                break
            _check(seen)
            fd = os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dirfd)
            st = _same(fd, seen)
            if st is not None:
                return fd, st
        else:
            raise _race(op, display)
    finally:
        if dirfd != rootfd:
            os.close(dirfd)
    return _careful(walk_open, rootfd, path, flags, op=op, display=display)  # a final symlink


def _unconfined_regular(
    rootfd: int, path: bytes, flags: int, *, op: str, display: str
) -> tuple[int, os.stat_result]:
    for _ in range(_MAX_RACE_RETRIES):
        seen = _check(os.stat(path, dir_fd=rootfd))
        fd = open_unconfined(rootfd, path, flags, 0, follow=True, op=op, display=display)
        st = _same(fd, seen)
        if st is not None:
            return fd, st
    raise _race(op, display)


REGULAR_OPENERS: dict[str, RegularOpener] = {
    "openat2": _openat2_regular,
    "walk": _walk_regular,
    "unconfined": _unconfined_regular,
}
