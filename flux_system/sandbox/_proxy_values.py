"""The egress proxy's values: what it may reach (:class:`ProxySettings`) and what it
refused (:class:`ProxyDenial`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, final

from flux_system.sandbox._proxy_head import MAX_HEAD_BYTES

__all__ = ["LIFELINE", "MAX_DENIALS", "ProxyDenial", "ProxySettings"]

MAX_DENIALS: Final = 1000  # denial records kept per proxy; later ones are only counted
#: The head the in-sandbox launcher sends on the connection it keeps open for the run:
#: when that connection ends (the sandbox's processes are gone), the proxy closes.
LIFELINE: Final = b"LIFELINE flux HTTP/1.1\r\n\r\n"


@final
@dataclass(frozen=True, slots=True)
class ProxySettings:
    """What the proxy may reach, and its bounds.

    ``allow_hosts`` (``--allow-host`` patterns and the profile's hosts: ``name``,
    ``*.suffix`` or an IP literal) is the allow-list; those names also lift the
    internal-name refusal. ``allow_private`` (``--allow-private`` CIDRs) admits blocked
    addresses in those ranges. With no host, everything is denied. ``ports=None``
    means {80, 443}. With ``lifeline_deadline``, the proxy closes itself when no
    :data:`LIFELINE` connection arrived within that many seconds of ``start()``, and
    when the one it accepted ends (the run's tree is gone, however the run ended).
    """

    allow_hosts: tuple[str, ...] = ()
    allow_private: tuple[str, ...] = ()
    ports: frozenset[int] | None = None
    max_connections: int = 64
    idle_timeout: float = 60.0
    head_timeout: float = 10.0
    connect_timeout: float = 10.0
    max_head_bytes: int = MAX_HEAD_BYTES
    lifeline_deadline: float | None = None


@final
@dataclass(frozen=True, slots=True)
class ProxyDenial:
    """One request the proxy refused, as the run result reports it.

    ``reason`` is an :class:`EgressReason` value for the guard's refusals, or one of
    the proxy's own: ``bad_request``, ``head_too_large``, ``head_timeout``,
    ``too_many_connections``, ``https_requires_connect``, ``peer``. ``host`` and
    ``port`` are those asked for (``None`` when the request did not get that far);
    never a path or a query.
    """

    method: str | None
    host: str | None
    port: int | None
    reason: str
    status: int
    address: str | None = None
    layer: str = field(default="proxy")
