"""The project's own, dated table of blocked address ranges (DESIGN §2.4).

This table is data, reviewed by hand against the IANA special-purpose registries; it
deliberately does not call :attr:`ipaddress.IPv4Address.is_global` (whose answer
changes with the Python release and follows the registry's "globally reachable"
column, which admits e.g. 192.0.0.9). Every range here is denied *whole*.

IPv6 is denied outside the global-unicast block 2000::/3; the IPv6 rows below name the
ranges inside 2000::/3 that are denied too, plus (for readable errors) the notable
ranges outside it. Ranges that embed an IPv4 address (IPv4-mapped, -compatible,
-translated, NAT64, 6to4, Teredo) are denied whole, never "unwrapped": an embedded
address that looks public does not make the outer address public.

Beyond the special-purpose registries, the table denies the AS112 and AMT anycast
services (decision 0031): 192.31.196.0/24 and 2001:4:112::/48 (AS112 DNAME
redirection, RFC 7535; in the registries, marked globally reachable),
192.175.48.0/24 and 2620:4f:8000::/48 (AS112 direct delegation, RFC 7534; ordinary
assignments to the AS112 project, in no special registry) and 192.52.193.0/24 and
2001:3::/32 (AMT relays, RFC 7450; in the registries, globally reachable). They lie
in public IPv4 space and inside 2000::/3, so only their own rows deny them: the
classifier checks every row before the 2000::/3 rule. So does 168.63.129.16/32, the
Azure platform's virtual IP (WireServer, the VM agent's and the health probes'
address, reachable from every Azure VM): public space that only a cloud's own
services answer on, as 169.254.169.254 elsewhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from ipaddress import IPv4Network, IPv6Network, ip_network
from typing import Final, final

__all__ = ["IPV6_GLOBAL_UNICAST", "REGISTRY_DATES", "TABLE", "TABLE_REVIEWED", "BlockEntry"]

#: When this table was last reviewed against the registries below.
TABLE_REVIEWED: Final = "2026-12-01"

#: The registry state the table reflects: the newest entry each registry had that
#: this table accounts for (IANA registry pages carry their own "Last Updated" date).
REGISTRY_DATES: Final[dict[str, str]] = {
    # Newest IPv4 row: 192.0.0.10/32 TURN anycast (RFC 8155, 2017-02); the registry
    # has had no new row since. Source: iana.org/assignments/iana-ipv4-special-registry
    "iana-ipv4-special-registry": "2017-02 (RFC 8155)",
    # Newest IPv6 rows: 3fff::/20 documentation (RFC 9637, 2024-08) and 5f00::/16
    # SRv6 SIDs (RFC 9602, 2024-10). Source: iana.org/assignments/iana-ipv6-special-registry
    "iana-ipv6-special-registry": "2024-10 (RFC 9602)",
}


@final
@dataclass(frozen=True, slots=True)
class BlockEntry:
    """One denied range: the network, a short name and where it comes from."""

    network: IPv4Network | IPv6Network
    name: str
    reference: str

    @property
    def first(self) -> int:
        return int(self.network.network_address)

    @property
    def last(self) -> int:
        return int(self.network.broadcast_address)


def _rows(
    rows: tuple[tuple[str, str, str], ...],
) -> tuple[BlockEntry, ...]:
    return tuple(BlockEntry(ip_network(net, strict=True), name, ref) for net, name, ref in rows)


_IPV4_ROWS: Final = (
    ("0.0.0.0/8", "this network", "RFC 791 / RFC 1122 §3.2.1.3"),
    ("10.0.0.0/8", "private-use", "RFC 1918"),
    ("100.64.0.0/10", "shared address space (CGNAT)", "RFC 6598"),
    ("127.0.0.0/8", "loopback", "RFC 1122 §3.2.1.3"),
    # Azure's platform address (decision 0031, amended 2026-12-01): public space, but
    # every Azure VM reaches the WireServer and its VM-agent interfaces there.
    (
        "168.63.129.16/32",
        "Azure platform virtual IP (WireServer)",
        "Azure: what is IP address 168.63.129.16",
    ),
    ("169.254.0.0/16", "link-local (cloud metadata)", "RFC 3927"),
    ("172.16.0.0/12", "private-use", "RFC 1918"),
    ("192.0.0.0/24", "IETF protocol assignments (whole /24)", "RFC 6890 §2.1"),
    ("192.0.2.0/24", "documentation TEST-NET-1", "RFC 5737"),
    # AS112 and AMT anycast (decision 0031, 2026-12-01): public space, but no agent
    # needs a sink for misdirected reverse lookups or a multicast tunnel relay.
    ("192.31.196.0/24", "AS112-v4 DNAME redirection sink", "RFC 7535"),
    ("192.52.193.0/24", "AMT relay anycast", "RFC 7450"),
    ("192.88.99.0/24", "6to4 relay anycast (deprecated)", "RFC 7526"),
    ("192.168.0.0/16", "private-use", "RFC 1918"),
    ("192.175.48.0/24", "AS112 direct delegation", "RFC 7534"),
    ("198.18.0.0/15", "benchmarking", "RFC 2544"),
    ("198.51.100.0/24", "documentation TEST-NET-2", "RFC 5737"),
    ("203.0.113.0/24", "documentation TEST-NET-3", "RFC 5737"),
    ("224.0.0.0/4", "multicast", "RFC 5771"),
    ("240.0.0.0/4", "reserved", "RFC 1112 §4"),
    ("255.255.255.255/32", "limited broadcast", "RFC 8190 / RFC 919 §7"),
)

_IPV6_ROWS: Final = (
    # Inside 2000::/3: denied although global unicast.
    ("2001::/23", "IETF protocol assignments (whole /23)", "RFC 2928"),
    ("2001::/32", "Teredo (embeds IPv4)", "RFC 4380"),
    ("2001:2::/48", "benchmarking", "RFC 5180"),
    ("2001:3::/32", "AMT relay anycast", "RFC 7450"),
    ("2001:4:112::/48", "AS112-v6 DNAME redirection sink", "RFC 7535"),
    ("2001:10::/28", "ORCHID (deprecated)", "RFC 4843"),
    ("2001:20::/28", "ORCHIDv2", "RFC 7343"),
    ("2001:db8::/32", "documentation", "RFC 3849"),
    ("2002::/16", "6to4 (embeds IPv4)", "RFC 3056"),
    ("2620:4f:8000::/48", "AS112 direct delegation", "RFC 7534"),
    ("3fff::/20", "documentation", "RFC 9637"),
    # Outside 2000::/3 (denied by the global-unicast rule; named for errors).
    ("::/128", "unspecified", "RFC 4291"),
    ("::1/128", "loopback", "RFC 4291"),
    ("::ffff:0:0/96", "IPv4-mapped", "RFC 4291"),
    ("::ffff:0:0:0/96", "IPv4-translated", "RFC 2765"),
    ("::/96", "IPv4-compatible (deprecated)", "RFC 4291"),
    ("64:ff9b::/96", "NAT64 well-known prefix (embeds IPv4)", "RFC 6052"),
    ("64:ff9b:1::/48", "NAT64 local-use (embeds IPv4)", "RFC 8215"),
    ("100::/64", "discard-only", "RFC 6666"),
    ("5f00::/16", "SRv6 SIDs", "RFC 9602"),
    ("fc00::/7", "unique local", "RFC 4193"),
    ("fe80::/10", "link-local", "RFC 4291"),
    ("fec0::/10", "site-local (deprecated)", "RFC 3879"),
    ("ff00::/8", "multicast", "RFC 4291"),
)

#: IPv6 outside this block is denied whatever the rows say.
IPV6_GLOBAL_UNICAST: Final = IPv6Network("2000::/3")

#: The table, most specific rows first within each family (for the most useful name).
TABLE: Final[tuple[BlockEntry, ...]] = tuple(
    sorted(
        _rows(_IPV4_ROWS) + _rows(_IPV6_ROWS),
        key=lambda e: (e.network.version, -e.network.prefixlen),
    )
)
