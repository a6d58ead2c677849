"""The post-run audit of protected paths: :class:`ProtectedPathAudit`.

Bind mounts make protected paths that exist read-only inside the sandbox; what a
mount cannot cover — a path that does not exist yet, ``.git`` replaced by a file, a
parent renamed away (``mv .git .git-old && mkdir -p .git/hooks``) — is caught here:
a snapshot before the run (type, permission bits, identity, content hash and bytes,
symlink target; bounded by :data:`MAX_AUDIT_ENTRIES` / :data:`MAX_AUDIT_BYTES`),
compared after it, every difference reported as an :class:`AuditRecord`, and with
``restore=True`` what was created removed and what was changed put back. Everything
is done by directory fd beneath each root (the plan and capture in ``_audit_plan``
and ``_audit_tree``, the comparison in ``_audit_check``, restoring in
``_audit_restore``); nothing is written into the workspace before the run.

Opt-in: a plain ``System`` does not pay for it. Use :func:`audit_protected_paths`
around any runs, or :func:`run_audited` for one run. Decision record:
docs/decisions/0088-protected-paths-audit.md.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Final, final

from flux_system._exceptions import SandboxReason, SandboxUnavailableError
from flux_system._values import record
from flux_system.process import RunResult, System
from flux_system.sandbox._audit_check import Out, check_created, check_level
from flux_system.sandbox._audit_plan import Entry, capture_plan, make_plan, normalised
from flux_system.sandbox._audit_records import (
    MAX_AUDIT_RECORDS,
    AuditChange,
    AuditRecord,
    AuditReport,
)
from flux_system.sandbox._audit_tree import (
    MAX_AUDIT_BYTES,
    MAX_AUDIT_DEPTH,
    MAX_AUDIT_ENTRIES,
    Budget,
    TreeError,
)
from flux_system.sandbox._protected import BUILTIN_PROTECTED, git_dir_paths
from flux_system.workspace import Workspace

__all__ = [
    "DEFAULT_PROTECTED_PATHS",
    "MAX_AUDIT_BYTES",
    "MAX_AUDIT_DEPTH",
    "MAX_AUDIT_ENTRIES",
    "MAX_AUDIT_RECORDS",
    "AuditChange",
    "AuditHandle",
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
        git_dirs: also the hooks, config, ``config.worktree`` and ``commondir`` of
            every git directory below ``.git/modules`` and ``.git/worktrees`` (found
            before the run and again after it: one made by the run is reported as
            created and, with ``restore``, its protected names removed).
        max_entries, max_bytes: narrower bounds than :data:`MAX_AUDIT_ENTRIES` and
            :data:`MAX_AUDIT_BYTES` (names captured, file bytes kept), for all roots.

    Raises:
        TypeError, ValueError: bad arguments.
        SandboxUnavailableError: layer ``protected_paths`` — a root cannot be opened,
            or a protected path is unreadable or over a bound (also: more git
            directories than ``MAX_GIT_DIRS``).
    """

    def __init__(
        self,
        roots: Iterable[str | os.PathLike[str] | Workspace] | str | os.PathLike[str] | Workspace,
        paths: Iterable[str] = DEFAULT_PROTECTED_PATHS,
        *,
        max_entries: int = MAX_AUDIT_ENTRIES,
        max_bytes: int = MAX_AUDIT_BYTES,
        git_dirs: bool = True,
    ) -> None:
        if isinstance(roots, str | os.PathLike | Workspace):
            roots = (roots,)
        if not 0 < max_entries <= MAX_AUDIT_ENTRIES or not 0 <= max_bytes <= MAX_AUDIT_BYTES:
            raise ValueError("max_entries and max_bytes may only narrow the audit's bounds")
        self._roots: list[tuple[str, int, dict[str, Entry], frozenset[str]]] = []
        self._git_dirs = git_dirs
        names = tuple(paths) if not isinstance(paths, str) else paths
        make_plan(names)  # bad names refused before any root is opened
        budget = Budget(max_entries, max_bytes)
        try:
            for root in roots:
                path = _root_path(root)
                try:
                    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
                except OSError as exc:
                    raise _unavailable(f"root cannot be opened ({exc.strerror})", path) from exc
                found: tuple[str, ...] = ()
                if git_dirs:
                    git = git_dir_paths(fd)
                    if not git.complete:
                        os.close(fd)
                        raise _unavailable("too many directories below .git/modules", path)
                    found = git.paths
                plan = make_plan((*names, *found))
                self._roots.append((path, fd, plan, normalised((*names, *found))))
                try:
                    capture_plan(fd, plan, "", budget)
                except TreeError as exc:
                    raise _unavailable(f"{exc.path}: {exc.why}", path) from exc
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Release the roots. Idempotent."""
        roots, self._roots = self._roots, []
        for _path, fd, _, _ in roots:
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
        out = Out(restore)
        for path, fd, plan, planned in self._roots:
            out.root = path
            check_level(fd, plan, "", out)
            if self._git_dirs:  # git directories the run made: their names were absent
                git = git_dir_paths(fd)
                check_created(fd, [p for p in git.paths if p not in planned], out)
                if not git.complete:
                    out.add(".git/modules", AuditChange.UNREADABLE, None, None, False)
        return AuditReport(tuple(out.records), restore, out.dropped)


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
    git_dirs: bool = True,
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
    with ProtectedPathAudit(roots, paths, git_dirs=git_dirs) as audit:
        try:
            yield handle
        finally:
            handle._report = audit.check(restore=restore)


@final
@record
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
