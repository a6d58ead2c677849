"""File metadata as a plain value (:class:`FileInfo`), built from one ``stat`` result."""

from __future__ import annotations

import enum
import os
import stat
import typing

from flux_system._values import record

__all__ = ["FileInfo", "FileKind"]


class FileKind(enum.Enum):
    """What kind of object a name refers to (without following a final symlink if asked)."""

    FILE = "file"
    DIRECTORY = "directory"
    SYMLINK = "symlink"
    FIFO = "fifo"
    SOCKET = "socket"
    CHAR_DEVICE = "char_device"
    BLOCK_DEVICE = "block_device"
    OTHER = "other"


_KINDS: dict[int, FileKind] = {
    stat.S_IFREG: FileKind.FILE,
    stat.S_IFDIR: FileKind.DIRECTORY,
    stat.S_IFLNK: FileKind.SYMLINK,
    stat.S_IFIFO: FileKind.FIFO,
    stat.S_IFSOCK: FileKind.SOCKET,
    stat.S_IFCHR: FileKind.CHAR_DEVICE,
    stat.S_IFBLK: FileKind.BLOCK_DEVICE,
}


@typing.final
@record
class FileInfo:
    """Metadata of one object beneath a workspace root, taken at one instant.

    Guarantee: every field comes from a single ``fstat`` of an fd opened beneath the
    root, so the fields are mutually consistent. Not guaranteed: that the object still
    looks like this afterwards (it is a snapshot, not a lock).

    Attributes:
        kind: the object's type.
        size: size in bytes (for a symlink, the length of its target text).
        mode: permission bits only (``stat.S_IMODE``), e.g. ``0o644``.
        mtime: modification time, seconds since the epoch.
        nlink: number of hard links; ``> 1`` means another name shares the inode.
        inode, device: the identity of the object on its file system.
        uid, gid: owner and group ids.
    """

    kind: FileKind
    size: int
    mode: int
    mtime: float
    nlink: int
    inode: int
    device: int
    uid: int
    gid: int

    @property
    def is_file(self) -> bool:
        return self.kind is FileKind.FILE

    @property
    def is_dir(self) -> bool:
        return self.kind is FileKind.DIRECTORY

    @property
    def is_symlink(self) -> bool:
        return self.kind is FileKind.SYMLINK

    @classmethod
    def from_stat(cls, st: os.stat_result) -> FileInfo:
        """Build from an ``os.stat_result``."""
        return cls(
            kind=_KINDS.get(stat.S_IFMT(st.st_mode), FileKind.OTHER),
            size=st.st_size,
            mode=stat.S_IMODE(st.st_mode),
            mtime=st.st_mtime,
            nlink=st.st_nlink,
            inode=st.st_ino,
            device=st.st_dev,
            uid=st.st_uid,
            gid=st.st_gid,
        )
