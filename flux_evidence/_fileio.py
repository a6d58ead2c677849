"""File helpers for the log and the verifier: opening a log file as a regular file
(typed errors), reading it whole, writing a line, fsyncing its directory (the last three
leave OSError to callers)."""

from __future__ import annotations

import errno
import os
import stat

from ._exceptions import EvidenceError, EvidenceReason

__all__ = [
    "fsync_dir",
    "io_error",
    "open_log_fd",
    "pwrite_all",
    "read_all",
    "read_log",
    "write_all",
]

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


def pwrite_all(fd: int, data: bytes, offset: int) -> None:
    """Write *data* completely at *offset* (one pwrite in the normal case)."""
    view = memoryview(data)
    for _ in range(_MAX_SHORT_WRITES):
        written = os.pwrite(fd, view, offset)
        if written == len(view):
            return
        view, offset = view[written:], offset + written
    raise OSError(5, "too many short writes")  # EIO


def fsync_dir(path: str) -> None:
    """fsync the directory holding *path* so a new name survives a crash."""
    directory = os.path.dirname(os.path.abspath(path))
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def io_error(op: str, exc: OSError) -> EvidenceError:
    """The typed error for an OS-level failure (names the errno, nothing else)."""
    return EvidenceError(
        f"evidence log I/O failed: {errno.errorcode.get(exc.errno or 0, 'unknown')}",
        op=op,
        reason=EvidenceReason.IO,
    )


def _not_a_file(op: str) -> EvidenceError:
    return EvidenceError(
        "evidence log is not a regular file", op=op, reason=EvidenceReason.NOT_A_FILE
    )


def open_log_fd(path: str, *, readonly: bool, op: str) -> tuple[int, bool]:
    """Open *path* as a regular file (read-only, or read-append creating it 0o600)
    without blocking on a FIFO; return the blocking fd and whether we created the file.

    Raises:
        EvidenceError: NOT_FOUND, NOT_A_FILE or IO; BAD_ARGUMENT for a NUL in *path*.
    """
    base = os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY
    created = False
    try:
        if readonly:
            fd = os.open(path, os.O_RDONLY | base)
        else:
            try:
                fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_EXCL | base, 0o600)
                created = True
            except FileExistsError:
                fd = os.open(path, os.O_RDWR | os.O_APPEND | base)
    except FileNotFoundError as exc:
        raise EvidenceError(
            "evidence log not found", op=op, reason=EvidenceReason.NOT_FOUND
        ) from exc
    except IsADirectoryError as exc:
        raise _not_a_file(op) from exc
    except OSError as exc:
        raise io_error(op, exc) from exc
    except ValueError:  # os.open: a NUL byte in the path
        raise EvidenceError(
            "evidence log path contains a NUL byte", op=op, reason=EvidenceReason.BAD_ARGUMENT
        ) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _not_a_file(op)
        os.set_blocking(fd, True)
    except OSError as exc:
        os.close(fd)
        raise io_error(op, exc) from exc
    except BaseException:
        os.close(fd)
        raise
    return fd, created


def read_log(path: str, *, op: str) -> bytes:
    """The whole content of the regular file at *path* (opened read-only, never changed).

    Raises:
        EvidenceError: NOT_FOUND, NOT_A_FILE or IO.
    """
    fd, _ = open_log_fd(path, readonly=True, op=op)
    try:
        return read_all(fd)
    except OSError as exc:
        raise io_error(op, exc) from exc
    finally:
        os.close(fd)
