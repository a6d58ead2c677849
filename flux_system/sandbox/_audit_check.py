"""Comparing protected names with the snapshot after a run, and putting them back.

Every name is examined and changed relative to an ``O_NOFOLLOW`` directory fd beneath
its root (``_audit_tree``, ``_audit_restore``); a name that cannot be examined is
reported (``UNREADABLE``), never raised.
"""

from __future__ import annotations

import os
import stat
from typing import Any, Final

from flux_system._exceptions import FluxSystemError
from flux_system.sandbox._audit_plan import Entry
from flux_system.sandbox._audit_records import MAX_AUDIT_RECORDS, AuditChange, AuditRecord
from flux_system.sandbox._audit_restore import (
    make_dir,
    put_leaf,
    remove_name,
    set_mode,
    temp_name,
)
from flux_system.sandbox._audit_tree import Node, kind_of, lstat_or_none, open_dir, read_file
from flux_system.workspace import FileKind

__all__ = ["Out", "check_created", "check_level"]

_MAX_SIBLINGS: Final = 4096  # entries searched for a renamed-away protected parent
_WRITABLE: Final = 0o700  # owner bits a directory needs while its entries are restored


class Out:
    __slots__ = ("dropped", "records", "restore", "root")

    def __init__(self, restore: bool) -> None:
        self.restore = restore
        self.root = ""
        self.records: list[AuditRecord] = []
        self.dropped = 0

    def add(
        self,
        path: str,
        change: AuditChange,
        before: FileKind | None,
        after: os.stat_result | None,
        restored: bool,
        *,
        found_at: str = "",
    ) -> None:
        if len(self.records) >= MAX_AUDIT_RECORDS:
            self.dropped += 1
            return
        kind = None if after is None else kind_of(after)
        self.records.append(
            AuditRecord(self.root, path, change, before, kind, restored, found_at=found_at)
        )


def _attempt(action: Any, *args: Any) -> bool:
    """Run one restoring step; False (never an exception) when it failed."""
    try:
        action(*args)
    except (OSError, ValueError, FluxSystemError):
        return False
    return True


def check_level(dirfd: int, level: dict[str, Entry], prefix: str, out: Out) -> None:
    found = _bring_back(dirfd, level, prefix, out)
    for name, entry in level.items():
        path = f"{prefix}{name}"
        try:
            if entry.protected:
                _compare(dirfd, name, entry.before, path, out, found_at=found.get(name, ""))
            else:
                _check_parent(dirfd, name, entry, path, out, found.get(name, ""))
        except OSError:  # e.g. a directory made untraversable: reported, never raised
            before = entry.before.kind if entry.before is not None else None
            out.add(path, AuditChange.UNREADABLE, before, None, False)


def check_created(root_fd: int, paths: list[str], out: Out) -> None:
    """Names that were no protected path before the run (found after it, such as the
    hooks of a git directory the run made): any that exists was created by the run."""
    for path in paths:
        parts = path.split("/")
        fd = root_fd
        opened: list[int] = []
        try:
            for part in parts[:-1]:
                st = lstat_or_none(fd, part)
                if st is None or not stat.S_ISDIR(st.st_mode):
                    break
                fd = open_dir(fd, part, st)
                opened.append(fd)
            else:
                cur = lstat_or_none(fd, parts[-1])
                if cur is not None:
                    restored = out.restore and _attempt(remove_name, fd, parts[-1])
                    out.add(path, AuditChange.CREATED, None, cur, restored)
        except OSError:
            out.add(path, AuditChange.UNREADABLE, None, None, False)
        finally:
            for opened_fd in opened:
                os.close(opened_fd)


def _bring_back(dirfd: int, level: dict[str, Entry], prefix: str, out: Out) -> dict[str, str]:
    """Directories of this level renamed away during the run (``mv .vscode .vscode-old
    && mkdir .vscode``): where each original is now, and with ``restore`` each moved
    back and reported, before anything at this level is compared or removed (a name
    the audit removes as created may hold an original: ``mv .git .envrc``).

    What stood in an original's place is moved aside first and removed once every
    original of the level is back (it may itself be another entry's original: two
    protected directories swapped). Returns ``{name: where its original was found}``
    for the originals not moved back (no ``restore``, or the move failed).
    """
    found: dict[str, str] = {}
    aside: list[str] = []
    for name, entry in level.items():
        before = entry.before
        if before is None or before.kind is not FileKind.DIRECTORY:
            continue
        try:
            cur = lstat_or_none(dirfd, name)
            if cur is not None and stat.S_ISDIR(cur.st_mode) and _ident(cur) == before.ident:
                continue
            original = _find_original(dirfd, name, entry)
            if original is None:
                continue
            found[name] = f"{prefix}{original}"
            if not out.restore:
                continue
            if cur is not None:
                moved = temp_name(name)
                os.rename(name, moved, src_dir_fd=dirfd, dst_dir_fd=dirfd)
                aside.append(moved)
            os.rename(original, name, src_dir_fd=dirfd, dst_dir_fd=dirfd)
        except OSError:
            continue  # the second pass reports it (and restores from the snapshot)
        change = AuditChange.DELETED if cur is None else AuditChange.REPLACED
        out.add(f"{prefix}{name}", change, before.kind, cur, True, found_at=found.pop(name))
    for moved in aside:
        _attempt(remove_name, dirfd, moved)
    return found


def _find_original(dirfd: int, name: str, entry: Entry) -> str | None:
    """The sibling that is *name*'s original directory: its inode and, when it had
    entries, at least one of their recorded ``(name, inode)`` (inode numbers are
    reused: a directory made after the original was deleted may get its number)."""
    before = entry.before
    assert before is not None
    marks = entry.marks
    if entry.protected and before.children:
        marks = frozenset((n, c.ident[1]) for n, c in before.children.items())
    for index, sibling in enumerate(os.listdir(dirfd)):
        if index >= _MAX_SIBLINGS:
            break
        st = lstat_or_none(dirfd, sibling)
        if sibling == name or st is None or _ident(st) != before.ident:
            continue
        if stat.S_ISDIR(st.st_mode) and (not marks or _has_mark(dirfd, sibling, st, marks)):
            return sibling
    return None


def _check_parent(  # noqa: PLR0917 - one step of the recursive walk
    dirfd: int, name: str, entry: Entry, path: str, out: Out, found_at: str
) -> None:
    """A parent of protected paths: only its identity matters, then its protected names."""
    before = entry.before
    cur = lstat_or_none(dirfd, name)
    if before is None or before.kind is not FileKind.DIRECTORY:
        if before is not None or cur is None or not stat.S_ISDIR(cur.st_mode):
            _compare(dirfd, name, before, path, out)  # a leaf (or absent) parent
            return
    elif cur is None or not stat.S_ISDIR(cur.st_mode) or _ident(cur) != before.ident:
        # Not renamed back by _bring_back: made again, emptied, from the snapshot.
        change = AuditChange.DELETED if cur is None else AuditChange.REPLACED
        restored = out.restore and _attempt(make_dir, dirfd, name, before.mode)
        out.add(path, change, before.kind, cur, restored, found_at=found_at)
        cur = lstat_or_none(dirfd, name)
        if cur is None or not stat.S_ISDIR(cur.st_mode):
            return
    try:
        fd = open_dir(dirfd, name, cur)
    except OSError:
        out.add(path, AuditChange.UNREADABLE, FileKind.DIRECTORY, cur, False)
        return
    try:
        check_level(fd, entry.children, f"{path}/", out)
    finally:
        os.close(fd)


def _ident(st: os.stat_result) -> tuple[int, int]:
    return (st.st_dev, st.st_ino)


def _has_mark(dirfd: int, name: str, st: os.stat_result, marks: frozenset[tuple[str, int]]) -> bool:
    try:
        fd = open_dir(dirfd, name, st)
    except OSError:
        return False
    try:
        return any(
            (found := lstat_or_none(fd, mark)) is not None and found.st_ino == ino
            for mark, ino in marks
        )
    finally:
        os.close(fd)


def _compare(  # noqa: PLR0917 - one step of the recursive walk
    dirfd: int, name: str, before: Node | None, path: str, out: Out, found_at: str = ""
) -> None:
    cur = lstat_or_none(dirfd, name)
    if before is None:
        if cur is not None:
            restored = out.restore and _attempt(remove_name, dirfd, name)
            out.add(path, AuditChange.CREATED, None, cur, restored)
        return
    if cur is None or kind_of(cur) is not before.kind:
        change = AuditChange.DELETED if cur is None else AuditChange.REPLACED
        restored = out.restore and _attempt(_recreate, dirfd, name, before)
        out.add(path, change, before.kind, cur, restored, found_at=found_at)
        return
    if before.kind is FileKind.DIRECTORY and _ident(cur) != before.ident:
        # Another directory (the original renamed away, or removed): made again from
        # the snapshot; without restore, what differs inside the new one is listed too.
        restored = out.restore and _attempt(_recreate, dirfd, name, before)
        out.add(path, AuditChange.REPLACED, before.kind, cur, restored, found_at=found_at)
        if out.restore:
            return
    if before.kind is FileKind.DIRECTORY:
        _compare_dir(dirfd, name, before, cur, path, out)
        return
    if _leaf_changed(dirfd, name, before, cur):
        restored = out.restore and _attempt(put_leaf, dirfd, name, before)
        out.add(path, AuditChange.MODIFIED, before.kind, cur, restored)
    elif before.kind is not FileKind.SYMLINK and stat.S_IMODE(cur.st_mode) != before.mode:
        restored = out.restore and _attempt(set_mode, dirfd, name, before.mode)
        out.add(path, AuditChange.MODE, before.kind, cur, restored)


def _leaf_changed(dirfd: int, name: str, before: Node, cur: os.stat_result) -> bool:
    if before.kind is FileKind.SYMLINK:
        try:
            return os.fsencode(os.readlink(name, dir_fd=dirfd)) != before.data
        except OSError:
            return True
    if before.kind is not FileKind.FILE:
        return False
    data = before.data or b""
    if cur.st_size != len(data) or cur.st_nlink > before.nlink:
        return True  # a new hard link: the inode is now shared with a name outside
    try:
        return read_file(dirfd, name, cur, len(data)) != data
    except OSError:
        return True  # cannot prove it unchanged: treat it as changed (fail closed)


def _compare_dir(  # noqa: PLR0917 - one step of the recursive walk
    dirfd: int, name: str, before: Node, cur: os.stat_result, path: str, out: Out
) -> None:
    mode = stat.S_IMODE(cur.st_mode)
    mode_restored = False
    if mode != before.mode:
        mode_restored = out.restore and _attempt(set_mode, dirfd, name, before.mode)
        out.add(path, AuditChange.MODE, before.kind, cur, mode_restored)
    opened = out.restore and (before.mode & _WRITABLE) != _WRITABLE
    if opened:
        _attempt(set_mode, dirfd, name, before.mode | _WRITABLE)  # to restore inside it
    try:
        fd = open_dir(dirfd, name, cur)
    except OSError:
        out.add(path, AuditChange.UNREADABLE, before.kind, cur, False)
        return
    try:
        children = before.children or {}
        try:
            now = os.listdir(fd)
        except OSError:
            out.add(path, AuditChange.UNREADABLE, before.kind, cur, False)
            return
        for child in sorted(set(now) | set(children)):
            sub = children.get(child)
            try:
                _compare(fd, child, sub, f"{path}/{child}", out)
            except OSError:
                kind = None if sub is None else sub.kind
                out.add(f"{path}/{child}", AuditChange.UNREADABLE, kind, None, False)
    finally:
        os.close(fd)
        if opened:
            _attempt(set_mode, dirfd, name, before.mode)


def _recreate(dirfd: int, name: str, node: Node) -> None:
    if node.kind is not FileKind.DIRECTORY:
        put_leaf(dirfd, name, node)
        return
    make_dir(dirfd, name, _WRITABLE)
    st = lstat_or_none(dirfd, name)
    if st is None:
        raise FileNotFoundError(name)
    fd = open_dir(dirfd, name, st)
    try:
        for child, sub in (node.children or {}).items():
            _recreate(fd, child, sub)
    finally:
        os.close(fd)
    set_mode(dirfd, name, node.mode)


# --- opt-in entry points ----------------------------------------------------------------
