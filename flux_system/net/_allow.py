"""Explicit grants (:class:`PrivateNetAllow`) and the public allow-list (:class:`EgressPolicy`)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_network
from typing import Final, final

from flux_system.net._names import matches_pattern

__all__ = ["EgressPolicy", "PrivateNetAllow"]

_PATTERN_LABEL: Final = re.compile(r"^[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?$")
_MAX_PATTERNS: Final = 4096  # a grant list is configuration, not data: keep it bounded


def _pattern(text: object, arg: str) -> str:
    if not isinstance(text, str):
        raise TypeError(f"{arg} must be an iterable of str, not {type(text).__name__}")
    value = str.__str__(text).strip().lower().removesuffix(".")  # never a subclass's overrides
    body = value[2:] if value.startswith("*.") else value
    if not body or "*" in body:
        raise ValueError(f"{arg}: bad host pattern {text!r} (use 'name' or '*.suffix')")
    for label in body.split("."):
        if not _PATTERN_LABEL.match(label):
            # An IP literal is a valid exact pattern for the allow-list.
            try:
                ip_network(body)
            except ValueError:
                raise ValueError(f"{arg}: bad host pattern {text!r}") from None
            return value
    return value


def _patterns(items: Iterable[str], arg: str) -> tuple[str, ...]:
    if isinstance(items, str | bytes):
        raise TypeError(f"{arg} must be an iterable of str, not {type(items).__name__}")
    out: list[str] = []
    for item in items:
        out.append(_pattern(item, arg))
        if len(out) > _MAX_PATTERNS:
            raise ValueError(f"{arg}: more than {_MAX_PATTERNS} patterns")
    return tuple(dict.fromkeys(out))


@final
class PrivateNetAllow:
    """Explicit grants that lift parts of the egress guard, nothing implicit.

    A blocked address is admitted only when it lies in one of ``cidrs``. A host
    pattern in ``hosts`` (``name`` or ``*.suffix``, label boundary) admits the *name*:
    it lifts the internal-name refusal, but admits no blocked address by itself. So a
    loopback test server needs ``PrivateNetAllow(hosts=["localhost"],
    cidrs=["127.0.0.0/8"])``, and a granted name resolving to 169.254.169.254 is still
    refused. Guarantee: immutable once built. Not guaranteed: that a granted CIDR holds
    only what you meant (``0.0.0.0/0`` grants everything IPv4).

    Raises:
        TypeError: an argument is not an iterable of str (or networks for ``cidrs``).
        ValueError: a malformed pattern or CIDR (host bits set count as malformed).
    """

    __slots__ = ("_cidrs", "_hosts", "_ranges")

    def __init__(
        self,
        *,
        hosts: Iterable[str] = (),
        cidrs: Iterable[str | IPv4Network | IPv6Network] = (),
    ) -> None:
        self._hosts = _patterns(hosts, "hosts")
        if isinstance(cidrs, str | bytes):
            raise TypeError(f"cidrs must be an iterable of str, not {type(cidrs).__name__}")
        nets: list[IPv4Network | IPv6Network] = []
        for item in cidrs:
            if isinstance(item, IPv4Network | IPv6Network):
                nets.append(item)
            elif isinstance(item, str):
                try:
                    nets.append(ip_network(item.strip(), strict=True))
                except ValueError as exc:
                    raise ValueError(f"cidrs: bad network {item!r}: {exc}") from None
            else:
                raise TypeError(f"cidrs must hold str or networks, not {type(item).__name__}")
            if len(nets) > _MAX_PATTERNS:
                raise ValueError(f"cidrs: more than {_MAX_PATTERNS} networks")
        self._cidrs = tuple(dict.fromkeys(nets))
        self._ranges = tuple(
            (n.version, int(n.network_address), int(n.broadcast_address)) for n in self._cidrs
        )

    @classmethod
    def none(cls) -> PrivateNetAllow:
        """No grant at all: the default."""
        return _NONE

    @property
    def hosts(self) -> tuple[str, ...]:
        return self._hosts

    @property
    def cidrs(self) -> tuple[IPv4Network | IPv6Network, ...]:
        return self._cidrs

    def admits_name(self, host: str) -> bool:
        """True when a host pattern grants the normalized name *host*."""
        return any(matches_pattern(host, p) for p in self._hosts)

    def admits_address(self, address: IPv4Address | IPv6Address) -> bool:
        """True when *address* lies in a granted CIDR (same family only)."""
        version, value = address.version, int(address)
        return any(v == version and lo <= value <= hi for v, lo, hi in self._ranges)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PrivateNetAllow):
            return NotImplemented
        return (self._hosts, self._cidrs) == (other._hosts, other._cidrs)

    def __hash__(self) -> int:
        return hash((self._hosts, self._cidrs))

    def __repr__(self) -> str:
        cidrs = [str(n) for n in self._cidrs]
        return f"PrivateNetAllow(hosts={list(self._hosts)!r}, cidrs={cidrs!r})"


_NONE: Final = PrivateNetAllow()


@final
class EgressPolicy:
    """An allow-list of destinations: only listed hosts may be reached at all.

    ``allow_hosts`` holds names (``api.example.com``), suffix patterns
    (``*.example.com``, label boundary) or IP literals. Anything else is denied before
    resolution (reason ``NOT_ALLOWED``). The allow-list narrows, never widens: a
    listed host is still subject to the block table, the internal-name refusal and
    the port set. Guarantee: immutable once built.

    Raises:
        TypeError, ValueError: as :class:`PrivateNetAllow`.
    """

    __slots__ = ("_hosts",)

    def __init__(self, *, allow_hosts: Iterable[str]) -> None:
        self._hosts = tuple(_canonical_literal(p) for p in _patterns(allow_hosts, "allow_hosts"))

    @property
    def allow_hosts(self) -> tuple[str, ...]:
        return self._hosts

    def allows(self, host: str) -> bool:
        """True when the normalized *host* is on the list."""
        return any(matches_pattern(host, p) for p in self._hosts)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, EgressPolicy):
            return NotImplemented
        return self._hosts == other._hosts

    def __hash__(self) -> int:
        return hash(self._hosts)

    def __repr__(self) -> str:
        return f"EgressPolicy(allow_hosts={list(self._hosts)!r})"


def _canonical_literal(pattern: str) -> str:
    try:
        net = ip_network(pattern)
    except ValueError:
        return pattern
    if net.num_addresses != 1:
        raise ValueError(f"allow_hosts: {pattern!r} is a network, list single addresses")
    address: IPv4Address | IPv6Address = net.network_address
    return str(address)
