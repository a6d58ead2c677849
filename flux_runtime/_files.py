"""The one module through which ``flux_runtime`` touches files of its own (DESIGN §1).

``flux_runtime`` composes the guarded packages; the files it touches itself (run
reports, the SQLite session store, a scripted provider's input) go through here,
and the source gate (tests/test_import_rules.py) allows file access in this module only.

Guarantee: :func:`write_text_replace` replaces *path* atomically — a reader sees the old
content or the new, never a torn file — by writing a temporary file in the same
directory, syncing it and renaming it over *path*. A symlink at *path* is replaced, not
followed.
Not guaranteed: durability of the rename itself across a power loss (the directory is
not synced).

Raises: ``OSError`` from the file system (callers translate it into their message).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3

__all__ = ["open_sqlite", "read_text", "real_path", "write_text_replace"]


def read_text(path: str, *, limit: int = 16 << 20) -> str:
    """The UTF-8 text of *path* (at most *limit* bytes read).

    Raises:
        OSError: missing or unreadable; ValueError: longer than *limit* or not UTF-8.
    """
    with open(path, "rb") as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"{path}: larger than {limit} bytes")
    return data.decode("utf-8")


def real_path(path: str) -> str:
    """*path* with every symlink resolved (for the "not inside the workspace" check)."""
    return os.path.realpath(path)


def open_sqlite(path: str) -> sqlite3.Connection:
    """Open (creating) the SQLite database at *path*; its directory is made 0700.

    Raises:
        OSError: the directory cannot be made; sqlite3.Error: the database cannot open.
    """
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, mode=0o700, exist_ok=True)
    conn = sqlite3.connect(path, timeout=10.0, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    return conn


def write_text_replace(path: str, text: str) -> None:
    """Write *text* (UTF-8) to *path* atomically (temporary file + rename).

    Raises:
        OSError: the directory is missing or not writable, or the rename failed.
    """
    directory = os.path.dirname(path) or "."
    tmp = os.path.join(directory, f".{os.path.basename(path)}.{os.urandom(6).hex()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
