"""One sandboxed run's egress proxy: :class:`ProxyRun` (what the backend wires in).

For network mode ``proxy`` the bubblewrap backend, per launch: starts a
:class:`ProxyRun` (the host proxy, on its own socket), adds :attr:`ProxyRun.bwrap_args`
(the socket bound at :data:`SANDBOX_SOCKET`), merges :attr:`ProxyRun.env` into the
command's environment, has the in-sandbox launcher start the forwarder
(``--forwarder``), and calls :meth:`ProxyRun.finish` when the run ends, which closes
the proxy and returns its refusals as the run's denial records.
"""

from __future__ import annotations

import typing
from collections.abc import Iterable
from typing import Final, final

from flux_system._exceptions import SandboxReason, SandboxUnavailableError
from flux_system.net import EgressPolicy, PrivateNetAllow, Resolver
from flux_system.process._confine import Denial
from flux_system.sandbox._forwarder import FORWARDER_PORT, SANDBOX_SOCKET, proxy_environment
from flux_system.sandbox._proxy import EgressProxy, ProxyDenial, ProxySettings

if typing.TYPE_CHECKING:
    from flux_system.sandbox._profile import Profile
    from flux_system.sandbox._settings import SandboxSettings

__all__ = ["LIFELINE_DEADLINE", "ProxyRun", "as_denials", "check_grants"]

#: Seconds for the launcher to connect its lifeline after the proxy started; past
#: that the run is taken as failed to start and the proxy closes (generous: the
#: launcher connects before the command runs, normally within milliseconds).
LIFELINE_DEADLINE: Final = 60.0


@final
class ProxyRun:
    """A started :class:`EgressProxy` for one run, and how the sandbox reaches it.

    Guarantee: the proxy is listening when the constructor returns; it closes (every
    connection ended, the socket removed) at :meth:`finish`, when the launcher's
    lifeline ends (the run's processes are gone, also after a timeout or a kill), or
    when no lifeline arrived within *lifeline_deadline* seconds (the run never
    started).

    Args:
        allow_hosts: ``--allow-host`` patterns and the profile's hosts.
        allow_private: ``--allow-private`` CIDRs and the profile's.
        resolver: the host-side resolver (default: the system's nameservers).
        ports: allowed ports (default {80, 443}).

    Raises:
        TypeError, ValueError: bad patterns or CIDRs.
        SandboxUnavailableError: layer ``proxy``, the socket could not be made.
    """

    def __init__(
        self,
        allow_hosts: Iterable[str] = (),
        allow_private: Iterable[str] = (),
        *,
        resolver: Resolver | None = None,
        ports: Iterable[int] | None = None,
        lifeline_deadline: float = LIFELINE_DEADLINE,
    ) -> None:
        settings = ProxySettings(
            allow_hosts=tuple(allow_hosts),
            allow_private=tuple(allow_private),
            ports=None if ports is None else frozenset(ports),
            lifeline_deadline=lifeline_deadline,
        )
        self._proxy = EgressProxy(settings, resolver=resolver).start()
        self._denials: tuple[ProxyDenial, ...] | None = None

    @property
    def socket_path(self) -> str:
        """The host side of the socket."""
        return self._proxy.socket_path

    @property
    def bwrap_args(self) -> tuple[str, ...]:
        """bubblewrap options binding the socket in at :data:`SANDBOX_SOCKET`."""
        return ("--ro-bind", self._proxy.socket_path, SANDBOX_SOCKET)

    @property
    def launcher_args(self) -> tuple[str, ...]:
        """Launcher options that start the forwarder before the command."""
        return ("--forwarder", f"{FORWARDER_PORT}:{SANDBOX_SOCKET}")

    @property
    def env(self) -> dict[str, str]:
        """The variables pointing the command's clients at the forwarder."""
        return proxy_environment(FORWARDER_PORT)

    def denials(self) -> tuple[ProxyDenial, ...]:
        """The refusals so far (all of them after :meth:`finish`)."""
        return self._denials if self._denials is not None else self._proxy.denials()

    def finish(self) -> tuple[ProxyDenial, ...]:
        """Close the proxy (ending every connection); return every refusal. Idempotent."""
        if self._denials is None:
            self._proxy.close()
            self._denials = self._proxy.denials()
        return self._denials


def as_denials(denials: Iterable[ProxyDenial]) -> tuple[Denial, ...]:
    """The proxy's refusals as the run result's denial records (layer ``proxy``).

    ``what`` is ``METHOD host:port`` (or as much of it as the request got to),
    ``detail`` the reason (an ``EgressReason`` value or the proxy's own); never a
    path or a query.
    """
    out = []
    for d in denials:
        target = "" if d.host is None else (f"[{d.host}]" if ":" in d.host else d.host)
        if target and d.port is not None:
            target = f"{target}:{d.port}"
        what = " ".join(part for part in (d.method or "", target) if part) or "request"
        out.append(Denial(layer="proxy", what=what, errno=None, detail=d.reason))
    return tuple(out)


def check_grants(settings: SandboxSettings, profile: Profile) -> None:
    """The proxy's host patterns and CIDRs parse (else each launch would raise).

    Raises:
        SandboxUnavailableError: ``BAD_SETTING`` (*settings*' ``allow_hosts`` or
            ``allow_private``, named in ``layer``) or ``BAD_PROFILE`` (the profile's).
    """
    for of_profile in (True, False):
        src = profile if of_profile else settings
        for key, values in (("allow_hosts", src.allow_hosts), ("allow_private", src.allow_private)):
            try:
                if key == "allow_hosts":
                    EgressPolicy(allow_hosts=values)
                    PrivateNetAllow(hosts=values)
                else:
                    PrivateNetAllow(cidrs=values)
            except ValueError as exc:
                msg = str(exc) if str(exc).startswith(key) else f"{key}: {exc}"
                raise SandboxUnavailableError(
                    f"profile {profile.source}: {msg}" if of_profile else msg,
                    op="confine",
                    layer=f"{profile.source}:network.{key}" if of_profile else key,
                    reason=SandboxReason.BAD_PROFILE if of_profile else SandboxReason.BAD_SETTING,
                ) from None
