"""Directory listing and bounded recursive walks by fd, never following a symlink."""

from __future__ import annotations

import errno
import os

from flux_system._exceptions import WorkspaceError, WorkspaceReason
from flux_system.workspace._pathname import PATH_MAX

__all__ = ["list_names", "walk_tree"]

_MAX_WALK_DEPTH = 256  # directory fds a walk holds at once (one per nesting level)
# A returned path must be one the API accepts back (under PATH_MAX bytes). This also
# bounds memory: without it 256 levels of 255-byte names make each entry ~64 KiB.
_MAX_PATH_BYTES = PATH_MAX - 1
_SUBDIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


def _too_many(op: str, display: str, bound: int) -> WorkspaceError:
    return WorkspaceError(
        f"{op}: more than {bound} entries",
        op=op,
        path=display,
        reason=WorkspaceReason.TOO_MANY_ENTRIES,
    )


def list_names(fd: int, *, bound: int, op: str, display: str) -> list[str]:
    """Sorted names in the directory *fd* (``.``/``..`` excluded), at most *bound*."""
    names: list[str] = []
    with os.scandir(fd) as it:
        for entry in it:
            names.append(entry.name)
            if len(names) > bound:
                raise _too_many(op, display, bound)
    names.sort()
    return names


def _entries(fd: int, budget: int, op: str, display: str, bound: int) -> list[tuple[str, bool]]:
    items: list[tuple[str, bool]] = []
    with os.scandir(fd) as it:
        for entry in it:
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                is_dir = False  # vanished meanwhile: listed, not descended
            items.append((entry.name, is_dir))
            if len(items) > budget:
                raise _too_many(op, display, bound)
    items.sort(reverse=True)  # pop() yields ascending names
    return items


def _too_deep(op: str, display: str, what: str) -> WorkspaceError:
    return WorkspaceError(f"{op}: {what}", op=op, path=display, reason=WorkspaceReason.TOO_DEEP)


def walk_tree(topfd: int, prefix: str, *, max_entries: int, op: str, display: str) -> list[str]:
    """Pre-order, sorted walk of the directory *topfd* (borrowed, not closed).

    Returns paths ``prefix + relative/name``, each meaning the same file when passed
    back: with an empty *prefix*, a top-level name beginning with ``@`` is returned as
    ``./@name`` (``@name`` would address a named root). Directories are listed and entered by
    ``openat(O_DIRECTORY|O_NOFOLLOW)`` relative to their parent's fd: a symlink is
    listed, never entered, even if it replaced a directory after listing.

    Raises:
        WorkspaceError: ``TOO_MANY_ENTRIES`` past *max_entries*, ``TOO_DEEP`` past
            :data:`_MAX_WALK_DEPTH` nesting levels or for a path of ``PATH_MAX`` bytes
            or more (which the API would refuse back).
    """
    out: list[str] = []
    frames: list[tuple[int, str, list[tuple[str, bool]]]] = []
    first = _entries(topfd, max_entries, op, display, max_entries)
    frames.append((-1, prefix, first))
    try:
        while frames:
            fd, base, items = frames[-1]
            if not items:
                frames.pop()
                if fd >= 0:
                    os.close(fd)
                continue
            name, is_dir = items.pop()
            # "@x" at the top would address the named root "x" when passed back
            rel = base + name if base or name[:1] != "@" else "./" + name
            # str length <= encoded length, so only long paths pay for the encode
            if len(rel) > _MAX_PATH_BYTES // 4 and len(os.fsencode(rel)) > _MAX_PATH_BYTES:
                raise _too_deep(op, display, f"path longer than {_MAX_PATH_BYTES} bytes")
            out.append(rel)
            if len(out) > max_entries:
                raise _too_many(op, display, max_entries)
            if not is_dir:
                continue
            try:
                sub = os.open(name, _SUBDIR, dir_fd=fd if fd >= 0 else topfd)
            except OSError as exc:
                if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
                    continue  # gone or swapped for a non-directory: never followed
                raise
            if len(frames) > _MAX_WALK_DEPTH:
                os.close(sub)
                raise _too_deep(op, display, f"deeper than {_MAX_WALK_DEPTH} levels")
            try:
                items_sub = _entries(sub, max_entries - len(out), op, display, max_entries)
            except BaseException:
                os.close(sub)
                raise
            frames.append((sub, rel + "/", items_sub))
    finally:
        for fd, _, _ in frames:
            if fd >= 0:
                os.close(fd)
    return out
