"""The post-run audit of protected paths: :class:`ProtectedPathAudit`.

Bind mounts make protected paths that exist read-only inside the sandbox; what a
mount cannot cover — a path that does not exist yet, ``.git`` replaced by a file, a
parent renamed away (``mv .git .git-old && mkdir -p .git/hooks``) — is caught here:
a snapshot before the run (type, permission bits, identity, content hash and bytes,
symlink target; bounded by :data:`MAX_AUDIT_ENTRIES` / :data:`MAX_AUDIT_BYTES`),
compared after it, every difference reported as an :class:`AuditRecord`, and with
``restore=True`` what was created removed and what was changed put back. Everything
is done by directory fd beneath each root (``_audit_tree``, ``_audit_restore``);
nothing is written into the workspace before the run.

Opt-in: a plain ``System`` does not pay for it. Use :func:`audit_protected_paths`
around any runs, or :func:`run_audited` for one run. Decision record:
docs/decisions/0088-protected-paths-audit.md.
"""

from __future__ import annotations

import contextlib
import enum
import os
import stat
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, final

from flux_system._exceptions import FluxSystemError, SandboxReason, SandboxUnavailableError
from flux_system.process import RunResult, System
from flux_system.sandbox._audit_restore import make_dir, put_leaf, remove_name, set_mode
from flux_system.sandbox._audit_tree import (
    MAX_AUDIT_BYTES,
    MAX_AUDIT_DEPTH,
    MAX_AUDIT_ENTRIES,
    Budget,
    Node,
    TreeError,
    capture,
    kind_of,
    lstat_or_none,
    open_dir,
    read_file,
)
from flux_system.sandbox._protected import BUILTIN_PROTECTED
from flux_system.workspace import FileKind, Workspace

__all__ = [
    "DEFAULT_PROTECTED_PATHS",
    "MAX_AUDIT_BYTES",
    "MAX_AUDIT_DEPTH",
    "MAX_AUDIT_ENTRIES",
    "MAX_AUDIT_RECORDS",
    "AuditChange",
    "AuditRecord",
    "AuditReport",
    "AuditedRun",
    "ProtectedPathAudit",
    "audit_protected_paths",
    "run_audited",
]

#: The protected paths of DESIGN §2.5 (profiles add theirs), relative to each writable
#: root: the same list the bubblewrap backend binds read-only.
DEFAULT_PROTECTED_PATHS: Final = BUILTIN_PROTECTED
MAX_AUDIT_RECORDS: Final = 1000  # records kept per report; later ones are only counted
_MAX_SIBLINGS: Final = 4096  # entries searched for a renamed-away protected parent
_MARKS: Final = 16  # entries of a parent recorded to recognise it (inode numbers are reused)
_WRITABLE: Final = 0o700  # owner bits a directory needs while its entries are restored


class AuditChange(enum.Enum):
    """What happened to a protected name during the run."""

    CREATED = "created"  # absent before
    DELETED = "deleted"  # present before, absent after
    MODIFIED = "modified"  # content, symlink target or hard-link count changed
    MODE = "mode"  # permission bits changed (content unchanged)
    REPLACED = "replaced"  # another type, or (a parent) another directory, now there
    UNREADABLE = "unreadable"  # could not be examined after the run: treat as changed


@final
@dataclass(frozen=True, slots=True)
class AuditRecord:
    """One difference, as the run result reports it (``layer`` ``protected_paths``).

    ``path`` is relative to ``root``; ``before``/``after`` the kinds (``None``:
    absent); ``restored`` whether the snapshot's state was put back.
    """

    root: str
    path: str
    change: AuditChange
    before: FileKind | None
    after: FileKind | None
    restored: bool = False
    layer: str = field(default="protected_paths")


@final
@dataclass(frozen=True, slots=True)
class AuditReport:
    """Every difference found (at most :data:`MAX_AUDIT_RECORDS`, the rest counted)."""

    records: tuple[AuditRecord, ...]
    restore: bool
    dropped: int = 0

    @property
    def clean(self) -> bool:
        """True when no protected name changed."""
        return not self.records and not self.dropped

    @property
    def unrestored(self) -> tuple[AuditRecord, ...]:
        """The records whose change is still there (all of them without ``restore``)."""
        return tuple(r for r in self.records if not r.restored)


@final
class _Entry:
    """The plan: one name to capture, with the deeper names of protected paths."""

    __slots__ = ("before", "children", "marks", "protected")

    def __init__(self) -> None:
        self.protected = False
        self.before: Node | None = None
        self.children: dict[str, _Entry] = {}
        self.marks: frozenset[tuple[str, int]] = frozenset()  # a parent's (name, inode)s


def _components(path: object) -> tuple[str, ...]:
    if not isinstance(path, str):
        raise TypeError(f"protected paths must be str, not {type(path).__name__}")
    parts = tuple(p for p in path.strip("/").split("/") if p not in ("", "."))
    if not parts or path.startswith("/") or ".." in parts or "\x00" in path:
        raise ValueError(f"protected path must be relative, without '..': {path!r}")
    return parts


def _plan(paths: Iterable[str]) -> dict[str, _Entry]:
    if isinstance(paths, str):
        raise TypeError("paths must be an iterable of str, not str")
    top: dict[str, _Entry] = {}
    for parts in sorted({_components(p) for p in paths}, key=len):
        level, entry = top, None
        for part in parts:
            if entry is not None and entry.protected:
                break  # inside a protected subtree already: covered
            entry = level.setdefault(part, _Entry())
            level = entry.children
        else:
            if entry is not None and not entry.protected:
                entry.protected = True
                entry.children.clear()
    return top


def _root_path(root: object) -> str:
    if isinstance(root, Workspace):
        return str(root.root)
    if isinstance(root, str | os.PathLike):
        return os.path.abspath(os.fspath(root))
    raise TypeError(f"roots must hold paths or Workspace, not {type(root).__name__}")


def _unavailable(why: str, root: str) -> SandboxUnavailableError:
    return SandboxUnavailableError(
        f"protected-path audit: {why} (beneath {root})",
        op="audit.snapshot",
        layer="protected_paths",
        reason=SandboxReason.LAYER_UNAVAILABLE,
    )


@final
class ProtectedPathAudit:
    """A snapshot of the protected paths beneath writable roots, checked after a run.

    Constructing it takes the snapshot (each root held open by fd until
    :meth:`close`); :meth:`check` compares, reports and optionally restores.

    Guarantee: no symlink is followed and no name outside a root is touched, before
    or after (every name is examined and changed relative to an ``O_NOFOLLOW``
    directory fd); restoring replaces names (rename of a fresh temporary: never
    writes through a link, never into an inode another name shares) and leaves no
    temporary behind; nothing is written before the run. ``.git/objects``,
    ``.git/refs`` and ``.git/index`` are not protected and not examined.
    Not guaranteed: that nothing else changed while the audit restores (run it once
    the sandboxed tree is gone); ownership is not restored; sockets and devices are
    reported but not made again.

    Args:
        roots: the writable roots (paths or :class:`Workspace`).
        paths: relative protected paths (default :data:`DEFAULT_PROTECTED_PATHS`).
        max_entries, max_bytes: narrower bounds than :data:`MAX_AUDIT_ENTRIES` and
            :data:`MAX_AUDIT_BYTES` (names captured, file bytes kept), for all roots.

    Raises:
        TypeError, ValueError: bad arguments.
        SandboxUnavailableError: layer ``protected_paths`` — a root cannot be opened,
            or a protected path is unreadable or over a bound.
    """

    def __init__(
        self,
        roots: Iterable[str | os.PathLike[str] | Workspace] | str | os.PathLike[str] | Workspace,
        paths: Iterable[str] = DEFAULT_PROTECTED_PATHS,
        *,
        max_entries: int = MAX_AUDIT_ENTRIES,
        max_bytes: int = MAX_AUDIT_BYTES,
    ) -> None:
        if isinstance(roots, str | os.PathLike | Workspace):
            roots = (roots,)
        if not 0 < max_entries <= MAX_AUDIT_ENTRIES or not 0 <= max_bytes <= MAX_AUDIT_BYTES:
            raise ValueError("max_entries and max_bytes may only narrow the audit's bounds")
        self._roots: list[tuple[str, int, dict[str, _Entry]]] = []
        names = tuple(paths) if not isinstance(paths, str) else paths
        budget = Budget(max_entries, max_bytes)
        try:
            for root in roots:
                path = _root_path(root)
                plan = _plan(names)
                try:
                    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
                except OSError as exc:
                    raise _unavailable(f"root cannot be opened ({exc.strerror})", path) from exc
                self._roots.append((path, fd, plan))
                try:
                    _capture_level(fd, plan, "", budget)
                except TreeError as exc:
                    raise _unavailable(f"{exc.path}: {exc.why}", path) from exc
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Release the roots. Idempotent."""
        roots, self._roots = self._roots, []
        for _path, fd, _ in roots:
            os.close(fd)

    def __enter__(self) -> ProtectedPathAudit:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def check(self, *, restore: bool = False) -> AuditReport:
        """Compare every protected name with the snapshot; with *restore*, put it back.

        Never raises for what it finds: a name that cannot be examined or restored is
        reported (``UNREADABLE``, ``restored=False``).
        """
        if not self._roots:
            raise RuntimeError("ProtectedPathAudit.check after close()")
        out = _Out(restore)
        for path, fd, plan in self._roots:
            out.root = path
            _check_level(fd, plan, "", out)
        return AuditReport(tuple(out.records), restore, out.dropped)


def _capture_level(dirfd: int, level: dict[str, _Entry], prefix: str, budget: Budget) -> None:
    for name, entry in level.items():
        path = f"{prefix}{name}"
        entry.before = capture(dirfd, name, path, budget, subtree=entry.protected)
        if entry.protected or entry.before is None or entry.before.kind is not FileKind.DIRECTORY:
            continue
        st = lstat_or_none(dirfd, name)
        if st is None:
            raise TreeError("vanished while captured", path)
        try:
            fd = open_dir(dirfd, name, st)
            entry.marks = _marks(fd)
        except OSError as exc:
            raise TreeError(exc.strerror or "unreadable", path) from exc
        try:
            _capture_level(fd, entry.children, f"{path}/", budget)
        finally:
            os.close(fd)


def _marks(fd: int) -> frozenset[tuple[str, int]]:
    """A few ``(name, inode)`` of a directory's entries: with its own inode, what makes
    a renamed-away parent recognisable (a new directory may get a freed inode number,
    not the same entries)."""
    marks = []
    for name in sorted(os.listdir(fd))[:_MARKS]:
        st = lstat_or_none(fd, name)
        if st is not None:
            marks.append((name, st.st_ino))
    return frozenset(marks)


class _Out:
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
    ) -> None:
        if len(self.records) >= MAX_AUDIT_RECORDS:
            self.dropped += 1
            return
        kind = None if after is None else kind_of(after)
        self.records.append(AuditRecord(self.root, path, change, before, kind, restored))


def _attempt(action: Any, *args: Any) -> bool:
    """Run one restoring step; False (never an exception) when it failed."""
    try:
        action(*args)
    except (OSError, ValueError, FluxSystemError):
        return False
    return True


def _check_level(dirfd: int, level: dict[str, _Entry], prefix: str, out: _Out) -> None:
    for name, entry in level.items():
        path = f"{prefix}{name}"
        try:
            if entry.protected:
                _compare(dirfd, name, entry.before, path, out)
            else:
                _check_parent(dirfd, name, entry, path, out, siblings=level.keys())
        except OSError:  # e.g. a directory made untraversable: reported, never raised
            before = entry.before.kind if entry.before is not None else None
            out.add(path, AuditChange.UNREADABLE, before, None, False)


def _check_parent(
    dirfd: int, name: str, entry: _Entry, path: str, out: _Out, *, siblings: Iterable[str]
) -> None:
    """A parent of protected paths: only its identity matters, then its protected names."""
    before = entry.before
    cur = lstat_or_none(dirfd, name)
    if before is None or before.kind is not FileKind.DIRECTORY:
        if before is not None or cur is None or not stat.S_ISDIR(cur.st_mode):
            _compare(dirfd, name, before, path, out)  # a leaf (or absent) parent
            return
    elif cur is None or not stat.S_ISDIR(cur.st_mode) or _ident(cur) != before.ident:
        change = AuditChange.DELETED if cur is None else AuditChange.REPLACED
        restored = out.restore and _attempt(_put_parent_back, dirfd, name, entry, cur, siblings)
        out.add(path, change, before.kind, cur, restored)
        cur = lstat_or_none(dirfd, name)
        if cur is None or not stat.S_ISDIR(cur.st_mode):
            return
    try:
        fd = open_dir(dirfd, name, cur)
    except OSError:
        out.add(path, AuditChange.UNREADABLE, FileKind.DIRECTORY, cur, False)
        return
    try:
        _check_level(fd, entry.children, f"{path}/", out)
    finally:
        os.close(fd)


def _ident(st: os.stat_result) -> tuple[int, int]:
    return (st.st_dev, st.st_ino)


def _put_parent_back(
    dirfd: int, name: str, entry: _Entry, cur: os.stat_result | None, level: Iterable[str]
) -> None:
    """Bring back the parent directory renamed away, else make it again (emptied).

    The original is a sibling with its inode and, when it had entries, at least one
    of its recorded ``(name, inode)`` marks; names the audit itself handles at this
    level are never candidates.
    """
    before = entry.before
    assert before is not None
    original = None
    planned = set(level)
    for index, sibling in enumerate(os.listdir(dirfd)):
        if index >= _MAX_SIBLINGS:
            break
        st = lstat_or_none(dirfd, sibling)
        if sibling in planned or st is None or _ident(st) != before.ident:
            continue
        if not stat.S_ISDIR(st.st_mode) or (
            entry.marks and not _has_mark(dirfd, sibling, st, entry)
        ):
            continue
        original = sibling
        break
    if cur is not None:
        remove_name(dirfd, name)
    if original is not None:
        os.rename(original, name, src_dir_fd=dirfd, dst_dir_fd=dirfd)
    else:
        make_dir(dirfd, name, before.mode)


def _has_mark(dirfd: int, name: str, st: os.stat_result, entry: _Entry) -> bool:
    try:
        fd = open_dir(dirfd, name, st)
    except OSError:
        return False
    try:
        return any(
            (found := lstat_or_none(fd, mark)) is not None and found.st_ino == ino
            for mark, ino in entry.marks
        )
    finally:
        os.close(fd)


def _compare(dirfd: int, name: str, before: Node | None, path: str, out: _Out) -> None:
    cur = lstat_or_none(dirfd, name)
    if before is None:
        if cur is not None:
            restored = out.restore and _attempt(remove_name, dirfd, name)
            out.add(path, AuditChange.CREATED, None, cur, restored)
        return
    if cur is None or kind_of(cur) is not before.kind:
        change = AuditChange.DELETED if cur is None else AuditChange.REPLACED
        restored = out.restore and _attempt(_recreate, dirfd, name, before)
        out.add(path, change, before.kind, cur, restored)
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
    dirfd: int, name: str, before: Node, cur: os.stat_result, path: str, out: _Out
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


@final
class AuditHandle:
    """What :func:`audit_protected_paths` yields; :attr:`report` is set when it exits."""

    __slots__ = ("_report",)

    def __init__(self) -> None:
        self._report: AuditReport | None = None

    @property
    def report(self) -> AuditReport:
        if self._report is None:
            raise RuntimeError("the audit report exists once the with-block has exited")
        return self._report


@contextlib.contextmanager
def audit_protected_paths(
    roots: Iterable[str | os.PathLike[str] | Workspace] | str | os.PathLike[str] | Workspace,
    paths: Iterable[str] = DEFAULT_PROTECTED_PATHS,
    *,
    restore: bool = False,
) -> Iterator[AuditHandle]:
    """Snapshot on entry; on exit (also when the block raised) check and maybe restore.

    Example::

        with audit_protected_paths(ws, restore=True) as audit:
            result = system.run(argv)
        audit.report.records

    Raises:
        SandboxUnavailableError, TypeError, ValueError: as :class:`ProtectedPathAudit`.
    """
    handle = AuditHandle()
    with ProtectedPathAudit(roots, paths) as audit:
        try:
            yield handle
        finally:
            handle._report = audit.check(restore=restore)


@final
@dataclass(frozen=True, slots=True)
class AuditedRun:
    """A run's result with the audit of its protected paths."""

    result: RunResult
    audit: AuditReport


def run_audited(
    system: System,
    argv: Sequence[str],
    *,
    roots: Iterable[str | os.PathLike[str] | Workspace] | Workspace,
    paths: Iterable[str] = DEFAULT_PROTECTED_PATHS,
    restore: bool = False,
    **run_kwargs: Any,
) -> AuditedRun:
    """``system.run(argv, **run_kwargs)`` between a snapshot and its check.

    Raises:
        whatever ``System.run`` raises (the audit still checks, and restores when
        asked, before the error propagates); SandboxUnavailableError as
        :class:`ProtectedPathAudit`.
    """
    with audit_protected_paths(roots, paths, restore=restore) as audit:
        result = system.run(argv, **run_kwargs)
    return AuditedRun(result, audit.report)
