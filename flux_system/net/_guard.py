"""The egress decision: :func:`guard_url` and :func:`guard_host`."""

from __future__ import annotations

import os
import threading
from collections.abc import Collection
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv6Address
from typing import Final, final

from flux_system._exceptions import EgressDeniedError, EgressReason
from flux_system.net._allow import EgressPolicy, PrivateNetAllow
from flux_system.net._classify import classify_address
from flux_system.net._names import is_internal_name
from flux_system.net._resolver import MAX_ANSWERS, DnsResolver, Resolver
from flux_system.net._url import ParsedHost, normalize_host, parse_url

__all__ = ["DEFAULT_PORTS", "GuardedTarget", "guard_host", "guard_url"]

_ADDRESS_TYPES: Final = (IPv4Address, IPv6Address)

#: ``ports=None`` means these, for either scheme (DESIGN §2.4).
DEFAULT_PORTS: Final = frozenset({80, 443})

_default_lock = threading.Lock()


def _after_fork_in_child() -> None:
    """A lock another thread held at the fork would stay held in the child forever."""
    global _default_lock  # noqa: PLW0603 - reset once per fork, only the forking thread runs
    _default_lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)

_default_resolver: list[DnsResolver] = []


def _system_resolver() -> DnsResolver:
    with _default_lock:
        if not _default_resolver:
            _default_resolver.append(DnsResolver())
        return _default_resolver[0]


@final
@dataclass(frozen=True, slots=True)
class GuardedTarget:
    """A destination the guard accepted, with the only addresses it may be reached at.

    ``url`` and ``scheme`` are ``None`` for :func:`guard_host`. ``host`` is normalized
    (ASCII, lower case, no trailing dot; an IPv6 literal without brackets).
    ``addresses`` are the vetted answers in resolver order, deduplicated.
    """

    url: str | None
    scheme: str | None
    host: str
    port: int
    addresses: tuple[IPv4Address | IPv6Address, ...]


def guard_url(
    url: str,
    *,
    allow: PrivateNetAllow | None = None,
    resolver: Resolver | None = None,
    ports: Collection[int] | None = None,
    policy: EgressPolicy | None = None,
) -> GuardedTarget:
    """Decide whether *url* may be fetched, resolving its host exactly once.

    Guarantee: the URL parses strictly (see ``flux_system.net._url``); the port is in
    *ports* (``None``: {80, 443}); with a *policy*, the host is on its allow-list;
    internal names are refused unless a host grant admits them, before any lookup;
    the host is resolved once, **every** answer is classified against the block table
    and **one** blocked answer outside a granted CIDR denies. The returned addresses
    are the only ones a caller may connect to. Not guaranteed: anything about the
    connection itself — use :func:`guarded_client` or :func:`dial_tcp` for that.

    Args:
        url: an absolute http or https URL.
        allow: explicit grants; default :meth:`PrivateNetAllow.none`.
        resolver: default: a :class:`DnsResolver` on the system's nameservers.
        ports: the allowed ports; replaces {80, 443}.
        policy: an optional allow-list of hosts.

    Raises:
        TypeError: an argument of the wrong type.
        EgressDeniedError: ``reason`` says why; ``target`` is the host (never the path
            or query); ``address`` the offending address when one was involved.
    """
    parsed = parse_url(url, op="guard_url")
    return _decide(
        parsed.host,
        parsed.port,
        allow=allow,
        resolver=resolver,
        ports=ports,
        policy=policy,
        op="guard_url",
        url=parsed.url,
        scheme=parsed.scheme,
    )


def guard_host(
    host: str,
    port: int,
    *,
    allow: PrivateNetAllow | None = None,
    resolver: Resolver | None = None,
    ports: Collection[int] | None = None,
    policy: EgressPolicy | None = None,
) -> GuardedTarget:
    """Decide whether *host*:*port* may be reached; the same rules as :func:`guard_url`.

    *host* is a name, a dotted-quad IPv4 address or an IPv6 literal (bracketed or not).

    Raises:
        TypeError: an argument of the wrong type.
        EgressDeniedError: as :func:`guard_url`.
    """
    if isinstance(port, bool) or not isinstance(port, int):
        raise TypeError(f"port must be int, not {type(port).__name__}")
    parsed = normalize_host(host, op="guard_host")
    return _decide(
        parsed,
        port,
        allow=allow,
        resolver=resolver,
        ports=ports,
        policy=policy,
        op="guard_host",
        url=None,
        scheme=None,
    )


def _deny(
    reason: EgressReason, why: str, op: str, host: str, address: str | None = None
) -> EgressDeniedError:
    return EgressDeniedError(f"{op}: {why}", op=op, target=host, reason=reason, address=address)


def _decide(
    parsed: ParsedHost,
    port: int,
    *,
    allow: PrivateNetAllow | None,
    resolver: Resolver | None,
    ports: Collection[int] | None,
    policy: EgressPolicy | None,
    op: str,
    url: str | None,
    scheme: str | None,
) -> GuardedTarget:
    grants = PrivateNetAllow.none() if allow is None else allow
    if not isinstance(grants, PrivateNetAllow):
        raise TypeError(f"allow must be PrivateNetAllow, not {type(allow).__name__}")
    if policy is not None and not isinstance(policy, EgressPolicy):
        raise TypeError(f"policy must be EgressPolicy, not {type(policy).__name__}")
    host = parsed.host
    allowed_ports = DEFAULT_PORTS if ports is None else ports
    if not 1 <= port <= 65535 or port not in allowed_ports:
        raise _deny(EgressReason.PORT, f"port {port} is not allowed", op, host)
    if policy is not None and not policy.allows(host):
        raise _deny(EgressReason.NOT_ALLOWED, "host is not on the allow-list", op, host)
    if parsed.ip is not None:
        _vet(parsed.ip, grants, op, host)
        return GuardedTarget(url, scheme, host, port, (parsed.ip,))
    if is_internal_name(host) and not grants.admits_name(host):
        raise _deny(EgressReason.INTERNAL_NAME, "internal name", op, host)
    try:
        chosen = _system_resolver() if resolver is None else resolver
        answers = chosen.resolve(host, port)
    except EgressDeniedError as exc:
        if exc.reason is EgressReason.TOO_MANY_ANSWERS:
            raise _deny(exc.reason, "too many answers", op, host) from exc
        raise _deny(EgressReason.RESOLUTION_FAILED, "resolution failed", op, host) from exc
    except Exception as exc:  # a caller's resolver: any failure fails closed
        raise _deny(EgressReason.RESOLUTION_FAILED, "resolver raised", op, host) from exc
    if isinstance(answers, str | bytes) or not hasattr(answers, "__len__"):
        raise _deny(EgressReason.RESOLUTION_FAILED, "resolver returned no sequence", op, host)
    if len(answers) > MAX_ANSWERS:
        raise _deny(EgressReason.TOO_MANY_ANSWERS, "too many answers", op, host)
    if len(answers) == 0:
        raise _deny(EgressReason.RESOLUTION_FAILED, "no address", op, host)
    aliases = getattr(answers, "aliases", ())
    if not isinstance(aliases, tuple | list):
        raise _deny(EgressReason.RESOLUTION_FAILED, "aliases are not a sequence", op, host)
    if len(aliases) > MAX_ANSWERS:  # never skip one: deny rather than check a prefix
        raise _deny(EgressReason.TOO_MANY_ANSWERS, "too many CNAME targets", op, host)
    for alias in aliases:
        if not isinstance(alias, str) or (
            is_internal_name(alias) and not grants.admits_name(alias)
        ):
            raise _deny(EgressReason.INTERNAL_NAME, "CNAME to an internal name", op, host)
    vetted: list[IPv4Address | IPv6Address] = []
    for answer in answers:  # at most MAX_ANSWERS: the quadratic dedupe is bounded
        if not isinstance(answer, _ADDRESS_TYPES):
            raise _deny(EgressReason.RESOLUTION_FAILED, "answer is not an address", op, host)
        _vet(answer, grants, op, host)
        if answer not in vetted:
            vetted.append(answer)
    return GuardedTarget(url, scheme, host, port, tuple(vetted))


def _vet(address: IPv4Address | IPv6Address, grants: PrivateNetAllow, op: str, host: str) -> None:
    if address.version == 6 and address.scope_id is not None:
        raise _deny(EgressReason.ZONE_ID, "address with a zone id", op, host, str(address))
    entry = classify_address(address)
    if entry is not None and not grants.admits_address(address):
        raise _deny(
            EgressReason.BLOCKED_ADDRESS,
            f"blocked address ({entry.name})",
            op,
            host,
            str(address),
        )
