"""What the protected-path audit reports: :class:`AuditRecord` and :class:`AuditReport`."""

from __future__ import annotations

import enum
from typing import Final, final

from flux_system._values import field, record
from flux_system.workspace import FileKind

__all__ = ["MAX_AUDIT_RECORDS", "AuditChange", "AuditRecord", "AuditReport"]

MAX_AUDIT_RECORDS: Final = 1000  # records kept per report; later ones are only counted


class AuditChange(enum.Enum):
    """What happened to a protected name during the run."""

    CREATED = "created"  # absent before
    DELETED = "deleted"  # present before, absent after
    MODIFIED = "modified"  # content, symlink target or hard-link count changed
    MODE = "mode"  # permission bits changed (content unchanged)
    REPLACED = "replaced"  # another type, or (a parent) another directory, now there
    UNREADABLE = "unreadable"  # could not be examined after the run: treat as changed


@final
@record
class AuditRecord:
    """One difference, as the run result reports it (``layer`` ``protected_paths``).

    ``path`` is relative to ``root``; ``before``/``after`` the kinds (``None``:
    absent); ``restored`` whether the snapshot's state was put back; ``found_at``,
    for a directory renamed away during the run, the name (relative to ``root``) the
    original was found under — with ``restored``, it was moved back from there (so
    that name is gone) and what stood in its place was removed.
    """

    root: str
    path: str
    change: AuditChange
    before: FileKind | None
    after: FileKind | None
    restored: bool = False
    layer: str = field(default="protected_paths")
    found_at: str = ""


@final
@record
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
