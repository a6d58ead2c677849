"""One sandboxed run's protected-path audit: :class:`RunAudit` (``SandboxSettings.audit``).

A backend with ``audit`` set takes the snapshot in ``launch()`` (before the child
exists), checks — and with the profile's ``restore``, restores — from the launch's
``release`` hook (the tree dead and reaped, on every path: result, timeout, kill,
``spawn()``), and reports the differences among the run's denial records (layer
``protected_paths``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import final

from flux_system.process._confine import Denial
from flux_system.sandbox._audit import AuditReport, ProtectedPathAudit

__all__ = ["RunAudit"]


@final
class RunAudit:
    """The snapshot of one run; :meth:`release` checks it once.

    Raises (constructor):
        SandboxUnavailableError: layer ``protected_paths`` (a root cannot be opened, a
            protected path is unreadable or over a bound): the run does not start.
    """

    def __init__(self, roots: Iterable[str], paths: Iterable[str], *, restore: bool) -> None:
        self._audit: ProtectedPathAudit | None = ProtectedPathAudit(tuple(roots), tuple(paths))
        self._restore = restore
        self._report: AuditReport | None = None

    def release(self) -> None:
        """Compare (and restore) now; the child's tree is gone. Idempotent, never raises."""
        audit, self._audit = self._audit, None
        if audit is None:
            return
        try:
            self._report = audit.check(restore=self._restore)
        finally:
            audit.close()

    @property
    def report(self) -> AuditReport | None:
        """The report, once :meth:`release` ran."""
        return self._report

    def records(self) -> tuple[Denial, ...]:
        """The differences as denial records (checking first if not done yet).

        ``what`` is the absolute path; ``detail`` the change and whether it was
        undone (``"created; restored"``, ``"modified; not restored"``).
        """
        self.release()
        if self._report is None:
            return ()
        out = [
            Denial(
                layer=r.layer,
                what=os.path.join(r.root, r.path),
                errno=None,
                detail=f"{r.change.value}; {'restored' if r.restored else 'not restored'}",
            )
            for r in self._report.records
        ]
        if self._report.dropped:
            what = f"{self._report.dropped} more change(s)"
            out.append(Denial("protected_paths", what, None, detail="not listed (record bound)"))
        return tuple(out)
