"""Address classification at both edges of every block-table row.

For each row the first and last address, and the addresses just outside it, are
classified and compared with a reference that asks :mod:`ipaddress` for network
membership (never the integer comparisons ``classify_address`` uses): the most
specific row holding the address, else (IPv6) the outside-global-unicast entry, else
public. The 2000::/3 edges and zone ids are pinned too.
"""

from __future__ import annotations

from ipaddress import IPv4Address, IPv6Address, ip_address

import pytest

from flux_system.net._blocklist import IPV6_GLOBAL_UNICAST, TABLE, BlockEntry
from flux_system.net._classify import classify_address

_MAX = {4: 2**32 - 1, 6: 2**128 - 1}


def _reference(address: IPv4Address | IPv6Address) -> tuple[str, str] | None:
    """(network, name) of the row expected to deny *address*, or None if public."""
    for entry in TABLE:  # most specific first within each family
        if entry.network.version == address.version and address in entry.network:
            return (str(entry.network), entry.name)
    if isinstance(address, IPv6Address) and (
        address not in IPV6_GLOBAL_UNICAST or address.scope_id is not None
    ):
        return (str(IPV6_GLOBAL_UNICAST), "outside IPv6 global unicast 2000::/3")
    return None


def _got(entry: BlockEntry | None) -> tuple[str, str] | None:
    return None if entry is None else (str(entry.network), entry.name)


def _edges() -> list[IPv4Address | IPv6Address]:
    out: set[IPv4Address | IPv6Address] = set()
    for entry in TABLE:
        version = entry.network.version
        for value in (entry.first - 1, entry.first, entry.last, entry.last + 1):
            if 0 <= value <= _MAX[version]:
                out.add(ip_address(value) if version == 4 else IPv6Address(value))
    gu = IPV6_GLOBAL_UNICAST
    for value in (int(gu.network_address) - 1, int(gu.network_address)):
        out.add(IPv6Address(value))
    for value in (int(gu.broadcast_address), int(gu.broadcast_address) + 1):
        out.add(IPv6Address(value))
    out |= {IPv4Address(0), IPv4Address(_MAX[4]), IPv6Address(0), IPv6Address(_MAX[6])}
    return sorted(out, key=lambda a: (a.version, int(a)))


EDGES = _edges()


def test_edges_hold_public_and_denied_addresses_of_both_families() -> None:
    results = [_reference(a) for a in EDGES]
    assert any(r is None for a, r in zip(EDGES, results, strict=True) if a.version == 4)
    assert any(r is None for a, r in zip(EDGES, results, strict=True) if a.version == 6)
    assert sum(r is not None for r in results) > len(TABLE)


@pytest.mark.parametrize("address", EDGES, ids=str)
def test_row_edges(address: IPv4Address | IPv6Address) -> None:
    assert _got(classify_address(address)) == _reference(address)


@pytest.mark.parametrize(
    ("text", "denied"),
    [
        ("2000::", False),  # first global-unicast address: public
        ("1fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", True),  # just below 2000::/3
        ("3fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", False),  # last one (past 3fff::/20)
        ("4000::", True),  # just above
        ("2606:4700::1111", False),
        ("2606:4700::1111%1", True),  # a zone id: always denied
        ("fe80::1%eth0", True),
    ],
)
def test_global_unicast_edges_and_zone_ids(text: str, denied: bool) -> None:
    address = IPv6Address(text)
    assert (classify_address(address) is not None) is denied
    assert _got(classify_address(address)) == _reference(address)


@pytest.mark.parametrize(("value", "kind"), [("1.2.3.4", "str"), (None, "NoneType"), (1, "int")])
def test_non_addresses_are_refused_naming_their_type(value: object, kind: str) -> None:
    with pytest.raises(TypeError) as info:
        classify_address(value)  # type: ignore[arg-type]
    assert str(info.value) == f"address must be IPv4Address or IPv6Address, not {kind}"
