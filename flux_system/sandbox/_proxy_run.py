"""One sandboxed run's egress proxy: :class:`ProxyRun` (what the backend wires in).

For network mode ``proxy`` the bubblewrap backend, per launch: starts a
:class:`ProxyRun` (the host proxy, on its own socket), adds :attr:`ProxyRun.bwrap_args`
(the socket bound at :data:`SANDBOX_SOCKET`), merges :attr:`ProxyRun.env` into the
command's environment, has the in-sandbox launcher start the forwarder
(``--forwarder``), and calls :meth:`ProxyRun.finish` when the run ends, which closes
the proxy and returns its refusals as the run's denial records.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final, final

from flux_system._exceptions import SandboxReason, SandboxUnavailableError
from flux_system.net import Resolver
from flux_system.process._confine import Denial
from flux_system.sandbox._forwarder import FORWARDER_PORT, SANDBOX_SOCKET, proxy_environment
from flux_system.sandbox._layers import launcher_python
from flux_system.sandbox._proxy import EgressProxy, ProxyDenial, ProxySettings

__all__ = ["LIFELINE_DEADLINE", "ProxyRun", "as_denials", "proxy_launcher_python", "start_proxy"]

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
    def launcher_spec(self) -> dict[str, object]:
        """The launcher spec's ``forwarder`` step (port and socket inside)."""
        return {"port": FORWARDER_PORT, "socket": SANDBOX_SOCKET}

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


def start_proxy(sandbox: Any) -> ProxyRun:
    """Start the proxy of one run of *sandbox* (a ``Sandbox`` with network ``proxy``).

    Destinations: the profile's ``allow_hosts`` / ``allow_private`` and the settings'
    (``--allow-host`` / ``--allow-private``); the resolver given to ``Sandbox.resolve``.

    Raises:
        SandboxUnavailableError: layer ``proxy`` — a bad pattern or CIDR
            (``BAD_PROFILE``), or the socket could not be made.
    """
    profile, settings = sandbox.profile, sandbox.settings
    hosts = (*profile.allow_hosts, *settings.allow_hosts)
    private = (*profile.allow_private, *settings.allow_private)
    try:
        return ProxyRun(hosts, private, resolver=getattr(sandbox, "resolver", None))
    except (TypeError, ValueError) as exc:
        raise SandboxUnavailableError(
            f"network proxy: {exc}",
            op="run",
            layer="proxy",
            reason=SandboxReason.BAD_PROFILE,
        ) from exc


def proxy_launcher_python() -> str:
    """The interpreter for the in-sandbox launcher that starts the forwarder.

    Raises:
        SandboxUnavailableError: layer ``proxy`` when there is none this user can run.
    """
    python, why = launcher_python()
    if python is None:
        raise SandboxUnavailableError(
            f"network proxy needs the in-sandbox launcher: {why} (run `flux doctor`)",
            op="confine",
            layer="proxy",
            reason=SandboxReason.LAYER_UNAVAILABLE,
        )
    return python
