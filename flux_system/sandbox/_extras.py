"""Per-run parts of a launch beyond the command line: the egress proxy and the audit.

For network ``proxy`` a :class:`~flux_system.sandbox._proxy_run.ProxyRun` is started
for the run (its socket bound in, the forwarder started by the launcher, its
refusals returned as denial records). With ``audit`` set, the protected paths are
snapshot before the run and compared after it (restored when the profile says so),
each difference a denial record of layer ``protected_paths``.

Guarantee: whatever is started here is ended by :meth:`RunExtras.finish` (called
once the run's tree was reaped: ``run``, ``arun`` and ``spawn`` alike) or
:meth:`RunExtras.abort` (the launch failed); a proxy whose launch failed after the
fork closes itself when the sandbox's processes are gone (its lifeline) or, if the run
never started, after its deadline.
Not guaranteed: the audit's view of changes made by *another* run in the same
workspace at the same time (each run compares its own before and after).
"""

from __future__ import annotations

import contextlib
import typing

from flux_system.process._confine import Denial, Denials

if typing.TYPE_CHECKING:
    from flux_system.sandbox._audit import ProtectedPathAudit
    from flux_system.sandbox._proxy_run import ProxyRun
    from flux_system.sandbox._sandbox import Sandbox

__all__ = ["RunExtras"]


@typing.final
class RunExtras:
    """The proxy and the audit of one run (either may be absent)."""

    __slots__ = ("_audit", "_done", "_restore", "proxy")

    def __init__(
        self, sandbox: Sandbox, writable_roots: tuple[str, ...], protected: tuple[str, ...]
    ) -> None:
        profile = sandbox.profile
        assert profile is not None
        settings = sandbox.settings
        self.proxy: ProxyRun | None = None
        self._audit: ProtectedPathAudit | None = None
        self._restore = profile.restore
        self._done = False
        try:
            if settings.audit and writable_roots:
                from flux_system.sandbox._audit import ProtectedPathAudit  # only if asked

                self._audit = ProtectedPathAudit(writable_roots, paths=protected)
            if sandbox.network == "proxy":
                # Imported here: flux_system.net (httpx, dnspython) only when it is used.
                from flux_system.sandbox._proxy_run import ProxyRun

                self.proxy = ProxyRun(
                    allow_hosts=(*profile.allow_hosts, *settings.allow_hosts),
                    allow_private=(*profile.allow_private, *settings.allow_private),
                    resolver=sandbox.resolver,
                )
        except BaseException:
            self.abort()
            raise

    @property
    def active(self) -> bool:
        return self.proxy is not None or self._audit is not None

    def finish(self, base: Denials) -> Denials:
        """End the proxy, check (and restore) the protected paths; merge the records."""
        if self._done:
            return base
        self._done = True
        records: list[Denial] = list(base.records)
        if self.proxy is not None:
            from flux_system.sandbox._proxy_run import as_denials

            records += as_denials(self.proxy.finish())
        if self._audit is not None:
            try:
                report = self._audit.check(restore=self._restore)
            finally:
                self._audit.close()
            for r in report.records:
                found = f", the original found at {r.found_at}" if r.found_at else ""
                detail = r.change.value + found + (", restored" if r.restored else "")
                records.append(
                    Denial(
                        layer="protected_paths",
                        what=f"{r.root}/{r.path}",
                        errno=None,
                        detail=detail,
                    )
                )
        return Denials(tuple(records), observable=base.observable, reason=base.reason)

    def abort(self) -> None:
        """The launch failed: close what was started (no records)."""
        self._done = True
        if self.proxy is not None:
            with contextlib.suppress(Exception):
                self.proxy.finish()
        if self._audit is not None:
            self._audit.close()
