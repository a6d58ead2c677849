"""Classify one IP address against the block table (see :mod:`._blocklist`)."""

from __future__ import annotations

from ipaddress import IPv4Address, IPv6Address
from typing import Final

from flux_system.net._blocklist import IPV6_GLOBAL_UNICAST, TABLE, BlockEntry

__all__ = ["classify_address"]

_OUTSIDE_GLOBAL_UNICAST: Final = BlockEntry(
    IPV6_GLOBAL_UNICAST, "outside IPv6 global unicast 2000::/3", "RFC 4291 §2.4"
)
_V4: Final = tuple((e.first, e.last, e) for e in TABLE if e.network.version == 4)
_V6: Final = tuple((e.first, e.last, e) for e in TABLE if e.network.version == 6)
_GU_FIRST: Final = int(IPV6_GLOBAL_UNICAST.network_address)
_GU_LAST: Final = int(IPV6_GLOBAL_UNICAST.broadcast_address)


def classify_address(address: IPv4Address | IPv6Address) -> BlockEntry | None:
    """Return the block-table row that denies *address*, or ``None`` if it is public.

    Guarantee: the answer depends only on the project's dated table
    (``flux_system.net._blocklist``), never on :mod:`ipaddress`'s ``is_global`` or
    ``is_private``; addresses that embed IPv4 are denied by their own range, never by
    what they embed. An IPv6 address carrying a zone id is always denied.
    Not guaranteed: that an allowed address is reachable or owned by who you think.

    Raises:
        TypeError: *address* is not an ``IPv4Address``/``IPv6Address``.
    """
    if isinstance(address, IPv4Address):
        value = int(address)
        for first, last, entry in _V4:
            if first <= value <= last:
                return entry
        return None
    if isinstance(address, IPv6Address):
        value = int(address)
        for first, last, entry in _V6:
            if first <= value <= last:
                return entry
        if not (_GU_FIRST <= value <= _GU_LAST) or address.scope_id is not None:
            return _OUTSIDE_GLOBAL_UNICAST
        return None
    raise TypeError(f"address must be IPv4Address or IPv6Address, not {type(address).__name__}")
