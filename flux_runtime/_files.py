"""The one module through which ``flux_runtime`` touches files of its own (DESIGN §1).

``flux_runtime`` composes the guarded packages; the files it writes itself (run
reports today; a session store and a scripted provider's input later) go through here,
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

__all__ = ["write_text_replace"]


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
