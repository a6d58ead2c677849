"""Low-level file helpers for the log and the verifier (OSError left to callers)."""

from __future__ import annotations

import os

__all__ = ["fsync_dir", "read_all", "write_all"]

_READ_CHUNK = 1 << 20
# A regular-file write returns short only on errors like ENOSPC/EFBIG (which then raise
# on the retry); bound the retries anyway so a misbehaving filesystem cannot spin us.
_MAX_SHORT_WRITES = 64


def read_all(fd: int) -> bytes:
    """Read from offset 0 to EOF with pread (the fd's offset is not used)."""
    chunks: list[bytes] = []
    offset = 0
    while True:
        chunk = os.pread(fd, _READ_CHUNK, offset)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        offset += len(chunk)


def write_all(fd: int, data: bytes) -> None:
    """Write *data* completely (one write in the normal case)."""
    view = memoryview(data)
    for _ in range(_MAX_SHORT_WRITES):
        written = os.write(fd, view)
        if written == len(view):
            return
        view = view[written:]
    raise OSError(5, "too many short writes")  # EIO


def fsync_dir(path: str) -> None:
    """fsync the directory holding *path* so a new name survives a crash."""
    directory = os.path.dirname(os.path.abspath(path))
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
