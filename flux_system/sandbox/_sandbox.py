"""``Sandbox``: settings resolved against the host — backend, layers, report.

``Sandbox.resolve(settings)`` loads the profile, probes the host, picks the backend and
the layers, and (mode ``require``) refuses when a required layer is missing, naming it.
``System(ws, sandbox=sandbox)`` then calls :meth:`Sandbox.confine` once; the spawn
builder confines every child through what that returns.
"""

from __future__ import annotations

import contextlib
import os
import threading
import typing

import flux_system.sandbox._host as _host
import flux_system.sandbox._libseccomp as _libseccomp
import flux_system.sandbox._seccomp as _seccomp
from flux_system._exceptions import SandboxReason, SandboxUnavailableError
from flux_system.process import Limits
from flux_system.process._confine import Confinement, Denials, Launch
from flux_system.sandbox._layers import Plan, plan, report_of
from flux_system.sandbox._profile import Profile, load_profile
from flux_system.sandbox._report import SandboxReport
from flux_system.sandbox._settings import SandboxSettings

if typing.TYPE_CHECKING:
    from flux_system.net import Resolver  # the egress package loads only for network proxy

__all__ = ["Sandbox"]


def _unavailable(layer: str, why: str) -> SandboxUnavailableError:
    return SandboxUnavailableError(
        f"sandbox layer {layer} is not available here: {why} (run `flux doctor`)",
        op="Sandbox.resolve",
        layer=layer,
        reason=SandboxReason.LAYER_UNAVAILABLE,
    )


@typing.final
class _Passthrough:
    """Mode ``off``: children run as without a sandbox."""

    def launch(
        self, argv: tuple[str, ...], executable: str, env: typing.Mapping[str, str], cwd_fd: int
    ) -> Launch:
        return Launch(argv=argv, executable=executable, env=dict(env))

    def default_limits(self) -> Limits | None:
        return None

    def close(self) -> None:
        return None


@typing.final
class Sandbox:
    """A sandbox resolved for this host (immutable; share it between ``System`` objects).

    Guarantee: a ``Sandbox`` in mode ``require`` exists only when every layer its
    profile requires is active here; in mode ``on`` it confines with what is
    available and :meth:`report` lists what is not; mode ``off`` confines nothing.
    Not guaranteed: that the host still supports a layer at spawn time (a spawn then
    fails with the layer's error rather than running unconfined).
    """

    __slots__ = ("_lock", "_plan", "_seccomp_fd", "host", "profile", "resolver", "settings")

    def __init__(
        self,
        settings: SandboxSettings,
        profile: Profile | None,
        host: _host.HostInfo | None,
        p: Plan,
        resolver: Resolver | None = None,
    ) -> None:
        self.settings = settings
        self.resolver = resolver  # the egress proxy's (network proxy); None: system DNS
        self.profile = profile
        self.host = host
        self._plan = p
        self._lock = threading.Lock()
        self._seccomp_fd = -1

    @classmethod
    def resolve(
        cls, settings: SandboxSettings | None = None, *, resolver: Resolver | None = None
    ) -> Sandbox:
        """Resolve *settings* (default: ``SandboxSettings()``) against this host.

        *resolver* is what the egress proxy (network ``proxy``) resolves names with on
        the host (default: a ``DnsResolver`` on the system's nameservers); pinned names
        (``StaticResolver``) or a test DNS server go here.

        Raises:
            SandboxUnavailableError: ``BAD_PROFILE`` (the profile cannot be loaded);
                ``LAYER_UNAVAILABLE`` (mode ``require`` and a required layer — named
                in ``layer`` — is missing).
            TypeError: *settings* is not a ``SandboxSettings``.
        """
        if settings is None:
            settings = SandboxSettings()
        if not isinstance(settings, SandboxSettings):
            raise TypeError("settings must be a SandboxSettings")
        if settings.mode == "off":
            return cls(settings, None, None, plan(settings, None, None))
        profile = load_profile(settings.profile)
        host = _host.probe(trial=settings.backend != "landlock")
        p = plan(settings, profile, host)
        if settings.mode == "require" and p.missing:
            layer = p.missing[0]
            raise _unavailable(layer, p.reasons.get(layer, "unavailable"))
        return cls(settings, profile, host, p, resolver)

    @property
    def mode(self) -> str:
        return self.settings.mode

    @property
    def backend(self) -> str:
        """``"bwrap"``, ``"landlock"`` or ``"none"``."""
        return self._plan.backend

    @property
    def network(self) -> str:
        return self._plan.network

    def report(self) -> SandboxReport:
        """Which layers are active, which are missing and why; each guarantee."""
        return report_of(self.settings, self.profile, self.host, self._plan)

    def _seccomp_memfd(self) -> int:
        """The BPF program for bwrap, built once (each launch reopens it: own offset)."""
        with self._lock:
            if self._seccomp_fd < 0:
                lib = _libseccomp.load()
                if lib is None:
                    raise _unavailable("seccomp", "libseccomp.so.2 not found")
                spec = _seccomp.FilterSpec(
                    allow_netlink=self.profile.allow_netlink if self.profile else False
                )
                try:
                    self._seccomp_fd = _seccomp.export_memfd(lib, spec)
                except OSError as exc:
                    raise _unavailable("seccomp", f"libseccomp failed: {exc.strerror}") from exc
            return self._seccomp_fd

    def confine(self, ws: object) -> Confinement:
        """Bind this sandbox to workspace *ws* (what ``System`` calls).

        Raises:
            SandboxUnavailableError: ``WORKSPACE_COVERS_HOME`` — the workspace is, or
                contains, ``$HOME`` or ``/`` and ``allow_home_workspace`` is not set;
                with network ``proxy``, ``BAD_SETTING`` (a bad ``allow_hosts`` pattern
                or ``allow_private`` CIDR, named in ``layer``) or ``BAD_PROFILE`` (the
                profile's, ``layer`` ``FILE:network.KEY``).
            TypeError: *ws* is not a ``Workspace``.
        """
        if self._plan.backend == "none":
            return _Passthrough()
        if self._plan.backend == "bwrap":
            from flux_system.sandbox._bwrap_confine import BwrapConfinement

            return BwrapConfinement(self, ws)
        from flux_system.sandbox._landlock_confine import LandlockConfinement

        return LandlockConfinement(self, ws)

    def _denials_unobservable(self) -> Denials:
        return Denials((), observable=False, reason=self._plan.denial_reason)

    def __del__(self) -> None:
        fd = getattr(self, "_seccomp_fd", -1)
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)

    def __repr__(self) -> str:
        name = self.profile.name if self.profile else "-"
        return f"Sandbox(mode={self.mode!r}, profile={name!r}, backend={self.backend!r})"
