"""Putting protected names back, by directory fd, beneath the root.

Every operation acts on a name relative to the fd of the directory that holds it
(opened ``O_NOFOLLOW`` component by component by the caller): a name is replaced by
``rename`` of a freshly made temporary beside it (the name, never a link's target,
and never an inode another name shares), removed by ``unlinkat`` or the fd-based
:func:`remove_tree`, and its mode set through an ``O_PATH|O_NOFOLLOW`` fd checked to
be the object that was examined. No temporary survives a failure.
"""

from __future__ import annotations

import contextlib
import os
import stat

from flux_system.sandbox._audit_tree import Node, kind_of, lstat_or_none
from flux_system.workspace import FileKind
from flux_system.workspace._rmtree import remove_tree

__all__ = ["make_dir", "put_leaf", "remove_name", "set_mode", "temp_name"]

_TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def temp_name(name: str) -> str:
    """A fresh hidden name beside *name* for a temporary (random: never guessed first)."""
    return f".{name[:40]}.flux-restore-{os.urandom(6).hex()}"


def remove_name(dirfd: int, name: str) -> None:
    """Remove *name* (a whole tree when it is a directory); absent is fine.

    Raises:
        OSError, WorkspaceError, PathEscapeError: for the caller to record.
    """
    st = lstat_or_none(dirfd, name)
    if st is None:
        return
    if stat.S_ISDIR(st.st_mode):
        remove_tree(dirfd, os.fsencode(name), op="audit.restore", display=name)
    else:
        os.unlink(name, dir_fd=dirfd)


def put_leaf(dirfd: int, name: str, node: Node) -> None:
    """Make *name* the file, symlink or FIFO *node* describes, replacing what is there.

    Raises:
        OSError: for the caller to record (the temporary is removed first).
        ValueError: *node* is of a kind that cannot be made again (socket, device).
    """
    tmp = temp_name(name)
    made = False
    try:
        if node.kind is FileKind.FILE:
            fd = os.open(tmp, _TEMP_FLAGS, 0o600, dir_fd=dirfd)
            made = True
            try:
                view = memoryview(node.data or b"")
                while view:
                    view = view[os.write(fd, view) :]
                os.fchmod(fd, node.mode)
                os.fsync(fd)
            finally:
                os.close(fd)
        elif node.kind is FileKind.SYMLINK:
            os.symlink(os.fsdecode(node.data or b""), tmp, dir_fd=dirfd)
            made = True
        elif node.kind is FileKind.FIFO:
            os.mkfifo(tmp, 0o600, dir_fd=dirfd)
            made = True
            set_mode(dirfd, tmp, node.mode)
        else:
            raise ValueError(f"cannot make a {node.kind.value} again")
        current = lstat_or_none(dirfd, name)
        if current is not None and stat.S_ISDIR(current.st_mode):
            remove_name(dirfd, name)  # rename cannot replace a directory with a file
        os.rename(tmp, name, src_dir_fd=dirfd, dst_dir_fd=dirfd)
        made = False
    finally:
        if made:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dirfd)


def make_dir(dirfd: int, name: str, mode: int) -> None:
    """Replace whatever is at *name* by an empty directory with *mode*.

    Raises:
        OSError, WorkspaceError, PathEscapeError: for the caller to record.
    """
    remove_name(dirfd, name)
    os.mkdir(name, 0o700, dir_fd=dirfd)
    set_mode(dirfd, name, mode)


def set_mode(dirfd: int, name: str, mode: int) -> None:
    """Set the permission bits of the file or directory *name* (never through a symlink).

    ``O_PATH`` opens even a mode-000 entry; ``chmod`` through its ``/proc`` magic link
    reaches exactly that object (``fchmod`` refuses ``O_PATH`` fds).

    Raises:
        OSError: ``ELOOP`` for a symlink, or the kernel's error.
    """
    fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dirfd)
    try:
        if kind_of(os.fstat(fd)) is FileKind.SYMLINK:
            raise OSError(40, "symlink: no mode to set")  # ELOOP
        os.chmod(f"/proc/self/fd/{fd}", mode)
    finally:
        os.close(fd)
