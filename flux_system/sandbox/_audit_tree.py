"""Capturing protected paths by directory fd, never following a symlink.

Every name is examined with ``fstatat(AT_SYMLINK_NOFOLLOW)`` relative to the fd of
the directory holding it; directories are entered with ``O_DIRECTORY|O_NOFOLLOW`` and
their identity checked against that ``lstat`` (a swap between the two is a race, not
a descent elsewhere); only regular files are opened for reading (``O_NOFOLLOW``, and
never a device or FIFO, whose ``open`` alone can have effects); a symlink's target
is read as text and never resolved.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import Final, final

from flux_system._values import record
from flux_system.workspace import FileKind

__all__ = [
    "MAX_AUDIT_BYTES",
    "MAX_AUDIT_DEPTH",
    "MAX_AUDIT_ENTRIES",
    "Budget",
    "Node",
    "TreeError",
    "capture",
    "lstat_or_none",
    "open_dir",
    "read_file",
]

MAX_AUDIT_ENTRIES: Final = 10_000  # names captured per audit: protected paths are config, not data
MAX_AUDIT_BYTES: Final = 32 << 20  # file bytes kept for restoring, per audit
MAX_AUDIT_DEPTH: Final = 64  # nesting below a protected path
_DIR: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_FILE: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK

_KINDS: Final = {
    stat.S_IFREG: FileKind.FILE,
    stat.S_IFDIR: FileKind.DIRECTORY,
    stat.S_IFLNK: FileKind.SYMLINK,
    stat.S_IFIFO: FileKind.FIFO,
    stat.S_IFSOCK: FileKind.SOCKET,
    stat.S_IFCHR: FileKind.CHAR_DEVICE,
    stat.S_IFBLK: FileKind.BLOCK_DEVICE,
}


@final
class TreeError(Exception):
    """A capture could not complete: ``why`` names the bound or the failure."""

    def __init__(self, why: str, path: str) -> None:
        super().__init__(f"{path}: {why}")
        self.why = why
        self.path = path


@final
@record
class Node:
    """One name as captured: type, permission bits, identity and (for a leaf) content.

    ``data`` is a file's bytes or a symlink's target; ``children`` the captured
    entries of a directory inside a protected subtree (``None`` for an ancestor
    directory, whose other entries are not the audit's business).
    """

    kind: FileKind
    mode: int
    ident: tuple[int, int]
    nlink: int
    data: bytes | None
    digest: bytes | None
    children: dict[str, Node] | None = None


@final
class Budget:
    """The bounds one capture shares across all its paths."""

    __slots__ = ("bytes_left", "entries", "entries_left", "size")

    def __init__(self, entries: int = MAX_AUDIT_ENTRIES, size: int = MAX_AUDIT_BYTES) -> None:
        self.entries = self.entries_left = entries
        self.size = self.bytes_left = size

    def take_entry(self, path: str) -> None:
        self.entries_left -= 1
        if self.entries_left < 0:
            raise TreeError(f"more than {self.entries} entries (the audit's bound)", path)

    def take_bytes(self, size: int, path: str) -> None:
        self.bytes_left -= size
        if self.bytes_left < 0:
            raise TreeError(f"more than {self.size} bytes of files (the audit's bound)", path)


def kind_of(st: os.stat_result) -> FileKind:
    return _KINDS.get(stat.S_IFMT(st.st_mode), FileKind.OTHER)


def lstat_or_none(dirfd: int, name: str) -> os.stat_result | None:
    """``lstat`` of *name* in *dirfd*; ``None`` when it does not exist."""
    try:
        return os.stat(name, dir_fd=dirfd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def open_dir(dirfd: int, name: str, expected: os.stat_result) -> int:
    """Enter the directory *name* that ``lstat`` showed as *expected*.

    Raises:
        OSError: ``ESTALE`` when what was opened is not what was examined (a swap).
    """
    fd = os.open(name, _DIR, dir_fd=dirfd)
    st = os.fstat(fd)
    if (st.st_dev, st.st_ino) != (expected.st_dev, expected.st_ino):
        os.close(fd)
        raise OSError(errno.ESTALE, "directory changed while it was entered")
    return fd


def read_file(dirfd: int, name: str, expected: os.stat_result, limit: int) -> bytes:
    """Read the regular file *name* that ``lstat`` showed as *expected*, at most *limit*.

    Raises:
        OSError: ``ESTALE`` on a swap, ``EFBIG`` over *limit*.
    """
    fd = os.open(name, _FILE, dir_fd=dirfd)
    try:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != (expected.st_dev, expected.st_ino):
            raise OSError(errno.ESTALE, "file changed while it was opened")
        if st.st_size > limit:
            raise OSError(errno.EFBIG, "file over the audit's size bound")
        chunks: list[bytes] = []
        total = 0
        while chunk := os.read(fd, 1 << 20):
            total += len(chunk)
            if total > limit:
                raise OSError(errno.EFBIG, "file over the audit's size bound")
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def leaf_data(dirfd: int, name: str, st: os.stat_result, limit: int) -> bytes | None:
    """A file's bytes or a symlink's target; ``None`` for other kinds."""
    kind = kind_of(st)
    if kind is FileKind.FILE:
        return read_file(dirfd, name, st, limit)
    if kind is FileKind.SYMLINK:
        return os.fsencode(os.readlink(name, dir_fd=dirfd))
    return None


def capture(
    dirfd: int, name: str, path: str, budget: Budget, *, subtree: bool, depth: int = 0
) -> Node | None:
    """Capture *name* in *dirfd* (``None``: absent), its subtree too when *subtree*.

    Raises:
        TreeError: a bound was exceeded or the name could not be read (the message
            names the workspace-relative *path*).
    """
    try:
        st = lstat_or_none(dirfd, name)
        if st is None:
            return None
        budget.take_entry(path)
        kind = kind_of(st)
        try:
            data = leaf_data(dirfd, name, st, max(0, budget.bytes_left))
        except OSError as exc:
            if exc.errno == errno.EFBIG:
                raise TreeError(
                    f"more than {budget.size} bytes of files (the audit's bound)", path
                ) from exc
            raise
        if data is not None:
            budget.take_bytes(len(data), path)
        children: dict[str, Node] | None = None
        if kind is FileKind.DIRECTORY and subtree:
            if depth >= MAX_AUDIT_DEPTH:
                raise TreeError(f"nested deeper than {MAX_AUDIT_DEPTH}", path)
            children = {}
            fd = open_dir(dirfd, name, st)
            try:
                for entry in sorted(os.listdir(fd)):
                    child = capture(
                        fd, entry, f"{path}/{entry}", budget, subtree=True, depth=depth + 1
                    )
                    if child is not None:
                        children[entry] = child
            finally:
                os.close(fd)
    except OSError as exc:
        raise TreeError(exc.strerror or "unreadable", path) from exc
    digest = None if data is None else _sha256(data)
    return Node(
        kind, stat.S_IMODE(st.st_mode), (st.st_dev, st.st_ino), st.st_nlink, data, digest, children
    )


def _sha256(data: bytes) -> bytes:
    import hashlib  # here: a run that never reads a protected file never pays for it

    return hashlib.sha256(data).digest()
