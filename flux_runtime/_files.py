"""The one module through which ``flux_runtime`` touches files of its own (DESIGN §1).

``flux_runtime`` composes the guarded packages; the files it touches itself (run
reports, the SQLite session store, a scripted provider's input) go through here,
and the source gate (tests/test_import_rules.py) allows file access in this module only.

Guarantee: :func:`write_text_replace` replaces *path* atomically — a reader sees the old
content or the new, never a torn file — by writing a temporary file in the same
directory, syncing it and renaming it over *path*. A symlink at *path* is replaced, not
followed. :func:`real_dir` and :func:`write_text_beneath` split that for a write after a
sandboxed run into a directory the run could change (``flux exec --report ws/out/r.json``):
the directory's real path is taken before the run, and after it the directory is
reached again from ``/`` one component at a time with ``O_NOFOLLOW``, so a parent the
run swapped for a symlink (``ws/out -> /home/me/.config/...``) is refused
(:class:`ReplacedError`), never followed, and the file is written relative to the fd
reached, so nothing can swap the directory between the check and the write.
Not guaranteed: durability of the rename itself across a power loss (the directory is
not synced); that a directory the run removed and re-created at the same path is the
one that stood there before (the new one is written into: it is at the path asked for).

Raises: ``OSError`` from the file system (callers translate it into their message).
"""

from __future__ import annotations

import contextlib
import os
import typing

if typing.TYPE_CHECKING:
    import sqlite3

__all__ = [
    "ReplacedError",
    "fill_closed_std_fds",
    "open_sqlite",
    "read_text",
    "real_dir",
    "real_path",
    "symlinks_on",
    "write_text_beneath",
    "write_text_replace",
]

_DIR_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class ReplacedError(Exception):
    """The directory at *path* (a real path taken earlier) is no longer one: a symlink,
    a file or nothing stands at one of its components now."""

    def __init__(self, path: str, why: str) -> None:
        super().__init__(f"{path}: {why}")
        self.path = path
        self.why = why


def fill_closed_std_fds() -> frozenset[int]:
    """Put ``/dev/null`` on whichever of fds 0-2 is closed; return which were.

    For a program's very start, before anything opens a file: the lowest free fd would
    otherwise be one of them, and a pipe or a cgroup directory opened later would pass
    for the process's stdin or stdout (read as input, written with output).
    """
    closed = []
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            closed.append(fd)
    for fd in closed:
        got = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)  # the lowest free fd: this one
        if got != fd:  # pragma: no cover - the lower ones are open by now
            os.dup2(got, fd, inheritable=False)
            os.close(got)
    return frozenset(closed)


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
    """Open (creating) the SQLite database at *path*; its directory is made 0700 and a
    new database file 0600 before SQLite opens it (its journal and WAL files take the
    database's mode), so another local user cannot read sessions or the receipt key
    through a directory that already existed with looser permissions.

    Raises:
        OSError: the directory cannot be made; sqlite3.Error: the database cannot open.
    """
    import sqlite3  # here: the CLI's start imports this module, and only sessions need it

    directory = os.path.dirname(path) or "."
    os.makedirs(directory, mode=0o700, exist_ok=True)
    os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600))
    conn = sqlite3.connect(path, timeout=10.0, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    return conn


def _open_dir_nofollow(real: str) -> int:
    """An ``O_PATH`` fd on the directory *real* (absolute, no symlink in it), reached
    from ``/`` one component at a time without following a symlink.

    Raises:
        ReplacedError: a component is a symlink, not a directory, or missing.
        OSError: any other failure (permission).
    """
    parts = [p for p in real.split("/") if p]
    fd = os.open("/", _DIR_FLAGS)
    try:
        for i, name in enumerate(parts):
            try:
                nxt = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except (NotADirectoryError, FileNotFoundError) as exc:
                at = "/" + "/".join(parts[: i + 1])
                what = "is missing" if isinstance(exc, FileNotFoundError) else "is no directory"
                raise ReplacedError(real, f"{at} {what} (a symlink or a file?)") from None
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def real_dir(path: str) -> str:
    """The real path of the directory *path* (symlinks resolved now), checked to be
    reachable as :func:`write_text_beneath` will reach it.

    Raises:
        OSError: not a directory, missing or not searchable (ReplacedError is an
        ``ENOTDIR`` here: nothing has run yet).
    """
    real = os.path.realpath(path)
    try:
        os.close(_open_dir_nofollow(real))
    except ReplacedError as exc:
        raise NotADirectoryError(20, f"not a directory ({exc.why})", path) from None
    return real


def symlinks_on(path: str) -> list[tuple[str, str]]:
    """The symlinks met resolving *path* (relative to the cwd), in order: each as (the
    real path of the directory holding it, the link's name there).

    Raises:
        OSError: a component cannot be examined (a loop, permission).
    """
    found: list[tuple[str, str]] = []
    cur = os.getcwd() if not path.startswith("/") else "/"
    for name in path.split("/"):
        if name in ("", "."):
            continue
        if name == "..":
            cur = os.path.dirname(cur)
            continue
        cand = os.path.join(cur, name)
        if os.path.islink(cand):
            found.append((cur, name))
            cur = os.path.realpath(cand)
        else:
            cur = cand
    return found


def write_text_beneath(real: str, name: str, text: str) -> None:
    """Write *text* atomically to *name* in the directory *real* (from :func:`real_dir`),
    the directory reached without following a symlink (module docstring).

    Raises:
        ReplacedError: a component of *real* is now a symlink, a file or missing.
        OSError: the directory is not writable, or the rename failed.
    """
    if not name or "/" in name or name in (".", ".."):
        raise IsADirectoryError(21, "not a file name", name)
    dir_fd = _open_dir_nofollow(real)
    try:
        _replace_at(dir_fd, name, text)
    finally:
        os.close(dir_fd)


def _replace_at(dir_fd: int, name: str, text: str) -> None:
    tmp = f".{name}.{os.urandom(6).hex()}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(tmp, flags, 0o644, dir_fd=dir_fd)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise


def write_text_replace(path: str, text: str) -> None:
    """Write *text* (UTF-8) to *path* atomically (temporary file + rename), its
    directory's symlinks resolved now (:func:`real_dir` then :func:`write_text_beneath`).

    Raises:
        OSError: the directory is missing or not writable, or the rename failed.
    """
    real = real_dir(os.path.dirname(path) or ".")
    try:
        write_text_beneath(real, os.path.basename(path), text)
    except ReplacedError as exc:
        raise NotADirectoryError(20, f"not a directory ({exc.why})", path) from None
