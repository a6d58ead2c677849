"""Atomic replacement of one name in a directory fd: temp file, fsync, ``renameat``.

The temporary file is created with ``O_CREAT|O_EXCL|O_NOFOLLOW`` in the *same*
directory fd as the destination (so the rename never crosses a file system and never
goes through a symlink), filled, fsynced, and renamed over the name; then the
directory is fsynced so the rename itself survives a crash. On any failure before the
rename, ``BaseException`` included, the temporary file is unlinked: nothing partial
is left.

Hard links: the rename replaces the *name*; an inode shared with another name
(``st_nlink > 1``) is never modified — the other name keeps the old content.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable

from flux_system._exceptions import WorkspaceError, WorkspaceReason

__all__ = ["replace_atomically", "write_all"]

_MAX_TEMP_ATTEMPTS = 16  # O_EXCL name collisions tolerated before giving up
_TEMP_STEM = 180  # bytes of the destination name kept in the temp name (NAME_MAX 255)
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_SYNC_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | os.O_NONBLOCK


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
    *,
    mode: int | None,
    op: str,
    display: str,
) -> None:
    """Atomically make *name* in *parentfd* a regular file whose content *fill* writes.

    The permission bits of a replaced regular file are kept exactly (without
    setuid/setgid; the umask does not apply: nothing is widened or narrowed). A new
    file (also one replacing a symlink, which is replaced itself, never written
    through) is created with *mode* (default ``0o666``) under the umask, as ``cp``
    and ``open(O_CREAT)`` do.

    Raises:
        WorkspaceError: ``IS_A_DIRECTORY`` when *name* is a directory.
        OSError: for the caller to map; the temporary file is gone by then.
    """
    keep: int | None = None
    try:
        st = os.stat(name, dir_fd=parentfd, follow_symlinks=False)
    except FileNotFoundError:
        pass
    else:
        if stat.S_ISDIR(st.st_mode):
            raise WorkspaceError(
                f"{op}: is a directory", op=op, path=display, reason=WorkspaceReason.IS_A_DIRECTORY
            )
        if stat.S_ISREG(st.st_mode):
            keep = stat.S_IMODE(st.st_mode) & 0o777
    create_mode = 0o600 if keep is not None else (0o666 if mode is None else mode & 0o777)
    for _ in range(_MAX_TEMP_ATTEMPTS):
        tmp = _temp_name(name)
        try:
            fd = os.open(tmp, _CREATE, create_mode, dir_fd=parentfd)
            break
        except FileExistsError:
            continue
    else:
        raise FileExistsError("no free temporary name")
    try:
        try:
            fill(fd)
            if keep is not None:
                os.fchmod(fd, keep)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, name, src_dir_fd=parentfd, dst_dir_fd=parentfd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=parentfd)
        raise
    _sync_dir(parentfd)


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
