"""Atomic replacement of one name in a directory fd: temp file, fsync, ``renameat``.

The new file is created in the *same* directory fd as the destination (so the rename
never crosses a file system and never goes through a symlink): unnamed with
``O_TMPFILE`` where the file system has it, filled, fsynced, linked to a temporary
name and renamed over the name (a writer killed while filling leaves nothing); else
as a named ``O_CREAT|O_EXCL|O_NOFOLLOW`` temporary file from the start. The directory
is fsynced afterwards so the rename itself survives a crash. On any failure,
``BaseException`` included, a temporary name is unlinked: nothing partial is left.

Hard links: the rename replaces the *name*; an inode shared with another name
(``st_nlink > 1``) is never modified — the other name keeps the old content.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pathlib
import stat
from collections.abc import Callable

from flux_system._exceptions import WorkspaceError, WorkspaceReason

__all__ = ["replace_atomically", "write_all"]

_MAX_TEMP_ATTEMPTS = 16  # O_EXCL name collisions tolerated before giving up
_TEMP_STEM = 180  # bytes of the destination name kept in the temp name (NAME_MAX 255)
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_SYNC_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | os.O_NONBLOCK
_O_TMPFILE = getattr(os, "O_TMPFILE", 0)  # Linux >= 3.11; 0: always the named fallback
_TMPFILE = (os.O_WRONLY | os.O_CLOEXEC | _O_TMPFILE) if _O_TMPFILE else 0
_PROC_FD = pathlib.Path("/proc/self/fd")


def write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    """Write every byte of *data* to *fd* (``os.write`` may write less than asked)."""
    view = memoryview(data).cast("B")
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _temp_name(name: bytes) -> bytes:
    return b"." + name[:_TEMP_STEM] + b"." + os.urandom(6).hex().encode() + b".flux-tmp"


def replace_atomically(
    parentfd: int,
    name: bytes,
    fill: Callable[[int], None],
    seen: os.stat_result | None,
    *,
    mode: int | None,
    op: str,
    display: str,
) -> None:
    """Atomically make *name* in *parentfd* a regular file whose content *fill* writes.

    *seen* is the ``lstat`` of *name* the caller took (``None``: missing); the caller
    has already followed a final symlink and refused directories and special files
    (:mod:`._through`). The permission bits of a replaced regular file are kept
    exactly (without setuid/setgid; the umask does not apply: nothing is widened or
    narrowed). A new file is created with *mode* (default ``0o666``) under the umask,
    as ``cp`` and ``open(O_CREAT)`` do. Whatever the name has become meanwhile is
    replaced by the rename, in *parentfd* (a symlink swapped in is replaced itself,
    never written through).

    Raises:
        WorkspaceError: ``IS_A_DIRECTORY`` when *seen* is a directory.
        OSError: for the caller to map; the temporary file is gone by then.
    """
    keep: int | None = None
    if seen is not None:
        if stat.S_ISDIR(seen.st_mode):
            raise WorkspaceError(
                f"{op}: is a directory", op=op, path=display, reason=WorkspaceReason.IS_A_DIRECTORY
            )
        if stat.S_ISREG(seen.st_mode):
            keep = stat.S_IMODE(seen.st_mode) & 0o777
    create_mode = 0o600 if keep is not None else (0o666 if mode is None else mode & 0o777)
    fd = _open_anonymous(parentfd, create_mode)
    if fd < 0:
        _replace_named(parentfd, name, fill, keep, create_mode)
    else:
        _replace_anonymous(parentfd, fd, name, fill, keep)
    _sync_dir(parentfd)


def _fill_and_sync(fd: int, fill: Callable[[int], None], keep: int | None) -> None:
    fill(fd)
    if keep is not None:
        os.fchmod(fd, keep)
    os.fsync(fd)


def _open_anonymous(parentfd: int, create_mode: int) -> int:
    """An unnamed ``O_TMPFILE`` in *parentfd*, or -1 where the file system lacks it."""
    if not _TMPFILE or not _PROC_FD.is_dir():
        return -1
    try:
        return os.open(".", _TMPFILE, create_mode, dir_fd=parentfd)
    except OSError as exc:
        if exc.errno in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):
            return -1
        raise


def _replace_anonymous(
    parentfd: int, fd: int, name: bytes, fill: Callable[[int], None], keep: int | None
) -> None:
    """Fill the unnamed *fd*, then give it a temporary name and rename that over *name*.

    The file has no name while it is written, so a writer killed then (``SIGKILL``,
    power loss) leaves nothing; only the two syscalls between ``linkat`` and the
    rename can leave a temporary name behind.
    """
    tmp: list[bytes] = []  # the temporary name, recorded *before* linkat (see _link_temp)
    try:
        try:
            _fill_and_sync(fd, fill, keep)
            _link_temp(parentfd, fd, name, tmp)
        finally:
            os.close(fd)
        os.rename(tmp[0], name, src_dir_fd=parentfd, dst_dir_fd=parentfd)
    except BaseException:
        _unlink_quietly(parentfd, tmp)
        raise


def _link_temp(parentfd: int, fd: int, name: bytes, tmp: list[bytes]) -> None:
    """Link the unnamed *fd* to a fresh temporary name, left in ``tmp[0]``.

    The name is recorded before the ``linkat``: an interrupt (``KeyboardInterrupt``)
    that arrives as the syscall returns is raised before its result could be stored,
    and the caller must still find the name to unlink it. A name someone else holds
    (``EEXIST``) is forgotten at once, so it is never unlinked.
    """
    for _ in range(_MAX_TEMP_ATTEMPTS):
        tmp[:] = [_temp_name(name)]
        try:
            os.link(f"/proc/self/fd/{fd}", tmp[0], dst_dir_fd=parentfd, follow_symlinks=True)
            return
        except FileExistsError:
            tmp.clear()
    raise FileExistsError(errno.EEXIST, "no free temporary name")


def _unlink_quietly(parentfd: int, tmp: list[bytes]) -> None:
    if tmp:
        with contextlib.suppress(OSError):
            os.unlink(tmp[0], dir_fd=parentfd)


def _replace_named(
    parentfd: int, name: bytes, fill: Callable[[int], None], keep: int | None, create_mode: int
) -> None:
    """The fallback without ``O_TMPFILE``: a named ``O_EXCL`` temp file from the start.

    As in :func:`_link_temp`, the name is recorded before the ``open`` creates it.
    """
    tmp: list[bytes] = []
    try:
        for _ in range(_MAX_TEMP_ATTEMPTS):
            tmp[:] = [_temp_name(name)]
            try:
                fd = os.open(tmp[0], _CREATE, create_mode, dir_fd=parentfd)
                break
            except FileExistsError:
                tmp.clear()
        else:
            raise FileExistsError(errno.EEXIST, "no free temporary name")
        try:
            _fill_and_sync(fd, fill, keep)
        finally:
            os.close(fd)
        os.rename(tmp[0], name, src_dir_fd=parentfd, dst_dir_fd=parentfd)
    except BaseException:
        _unlink_quietly(parentfd, tmp)
        raise


def _sync_dir(parentfd: int) -> None:
    """fsync the directory *parentfd* (an ``O_PATH`` fd cannot be fsynced: reopen ``.``).

    Makes the rename itself durable (decision 0014). A directory the caller may write
    but not read (mode ``-wx``) cannot be opened for it: its rename is then durable
    only once the file system commits it. An fsync error is raised: the new content is
    in place, but whether it survives a crash is unknown, and the caller must know.
    """
    try:
        dirfd = os.open(".", _SYNC_DIR, dir_fd=parentfd)
    except PermissionError:
        return
    try:
        os.fsync(dirfd)
    finally:
        os.close(dirfd)
