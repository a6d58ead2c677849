"""Properties: every address of a blocked range, in every accepted textual form, is
denied; public addresses are allowed (and their IPv4-embedding IPv6 forms denied).

The ranges are written here again from DESIGN §2.4, independently of the block table
the guard uses, so a row missing from that table fails these tests.
"""

from __future__ import annotations

from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_network

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flux_system import EgressDeniedError, EgressReason
from flux_system.net import StaticResolver, guard_host, guard_url

BLOCKED_V4 = [
    ip_network(n)
    for n in [
        "0.0.0.0/8",
        "10.0.0.0/8",
        "100.64.0.0/10",
        "127.0.0.0/8",
        "169.254.0.0/16",
        "172.16.0.0/12",
        "192.0.0.0/24",
        "192.0.2.0/24",
        "192.88.99.0/24",
        "192.168.0.0/16",
        "198.18.0.0/15",
        "198.51.100.0/24",
        "203.0.113.0/24",
        "224.0.0.0/4",
        "240.0.0.0/4",
        "255.255.255.255/32",
        # Decision 0031's additions (not in DESIGN §2.4): AS112 and AMT anycast.
        "192.31.196.0/24",
        "192.52.193.0/24",
        "192.175.48.0/24",
        "168.63.129.16/32",  # Azure's platform address (0031, amended)
    ]
]
GLOBAL_UNICAST = IPv6Network("2000::/3")
BLOCKED_V6_INSIDE = [
    IPv6Network(n)
    for n in ("2001::/23", "2001:db8::/32", "2002::/16", "3fff::/20", "2620:4f:8000::/48")
]
BLOCKED_V6_OUTSIDE = [  # samples of "outside 2000::/3", IPv4-embedding ranges first
    IPv6Network(n)
    for n in (
        "::ffff:0:0/96",
        "::/96",
        "::ffff:0:0:0/96",
        "64:ff9b::/96",
        "64:ff9b:1::/48",
        "fc00::/7",
        "fe80::/10",
        "ff00::/8",
        "100::/64",
        "::/3",
        "4000::/2",
        "8000::/1",
    )
]


def _in(net: IPv4Network | IPv6Network) -> st.SearchStrategy[int]:
    first = int(net.network_address)
    return st.integers(first, first + net.num_addresses - 1)


v4_blocked = st.sampled_from(BLOCKED_V4).flatmap(_in).map(IPv4Address)
v6_blocked = st.sampled_from(BLOCKED_V6_INSIDE + BLOCKED_V6_OUTSIDE).flatmap(_in).map(IPv6Address)


def _public_v4(value: int) -> bool:
    return not any(IPv4Address(value) in n for n in BLOCKED_V4)


def _public_v6(value: int) -> bool:
    a = IPv6Address(value)
    return a in GLOBAL_UNICAST and not any(a in n for n in BLOCKED_V6_INSIDE)


v4_public = st.integers(0, 2**32 - 1).filter(_public_v4).map(IPv4Address)
v6_public = (
    st.integers(int(GLOBAL_UNICAST.network_address), int(GLOBAL_UNICAST.broadcast_address))
    .filter(_public_v6)
    .map(IPv6Address)
)


def v6_forms(a: IPv6Address) -> list[str]:
    """Every textual form the parser accepts for one IPv6 address."""
    last32 = IPv4Address(int(a) & 0xFFFFFFFF)
    head = a.exploded.rsplit(":", 2)[0]
    return [
        a.compressed,
        a.exploded,
        a.exploded.upper(),
        a.compressed.upper(),
        f"{head}:{last32}",  # dotted tail
        ":".join(g.lstrip("0") or "0" for g in a.exploded.split(":")),  # unpadded, uncompressed
    ]


def v4_embeddings(v4: IPv4Address) -> list[str]:
    """IPv6 forms that embed *v4*: mapped, compatible, translated, NAT64, 6to4, Teredo."""
    hi, lo = int(v4) >> 16, int(v4) & 0xFFFF
    return [
        f"::ffff:{v4}",
        f"::ffff:{hi:x}:{lo:x}",
        f"0:0:0:0:0:ffff:{v4}",
        f"::{v4}",
        f"::ffff:0:{v4}",
        f"64:ff9b::{v4}",
        f"64:ff9b:1::{v4}",
        f"2002:{hi:x}:{lo:x}::1",
        f"2001:0:4136:e378:8000:63bf:{hi ^ 0xFFFF:x}:{lo ^ 0xFFFF:x}",  # Teredo
    ]


def v4_noncanonical(v4: IPv4Address) -> list[str]:
    """Spellings of *v4* that browsers and inet_aton accept and the guard refuses."""
    o = [int(x) for x in str(v4).split(".")]
    n = int(v4)
    return [
        str(n),
        hex(n),
        "0" + oct(n)[2:],
        ".".join(f"0{x:o}" for x in o),
        ".".join(hex(x) for x in o),
        f"{o[0]}.{(o[1] << 16) | (o[2] << 8) | o[3]}",
        f"{o[0]}.{o[1]}.{(o[2] << 8) | o[3]}",
        ".".join(f"{x:03d}" for x in o),
    ]


def _denied(reason: EgressReason | None, url: str) -> None:
    with pytest.raises(EgressDeniedError) as info:
        guard_url(url, resolver=StaticResolver({}))
    if reason is not None:
        assert info.value.reason is reason, url


@given(v4_blocked)
def test_blocked_ipv4_in_every_form_is_denied(a: IPv4Address) -> None:
    _denied(EgressReason.BLOCKED_ADDRESS, f"http://{a}/")
    _denied(EgressReason.BLOCKED_ADDRESS, f"http://{a}./")
    for form in v4_embeddings(a):
        _denied(EgressReason.BLOCKED_ADDRESS, f"http://[{form}]/")
    for form in v4_noncanonical(a):
        if form != str(a):
            _denied(EgressReason.NON_CANONICAL_IP, f"http://{form}/")
    with pytest.raises(EgressDeniedError):
        guard_host(str(a), 443)


@given(v6_blocked)
def test_blocked_ipv6_in_every_form_is_denied(a: IPv6Address) -> None:
    for form in v6_forms(a):
        _denied(EgressReason.BLOCKED_ADDRESS, f"http://[{form}]:443/")
        with pytest.raises(EgressDeniedError) as info:
            guard_host(form, 443)
        assert info.value.reason is EgressReason.BLOCKED_ADDRESS


@given(st.one_of(v4_blocked, v6_blocked), st.one_of(v4_public, v6_public), st.booleans())
def test_one_blocked_answer_among_public_ones_denies(
    bad: IPv4Address | IPv6Address, good: IPv4Address | IPv6Address, bad_first: bool
) -> None:
    answers = [bad, good] if bad_first else [good, bad]
    resolver = StaticResolver({"mixed.flux.example": answers})
    with pytest.raises(EgressDeniedError) as info:
        guard_url("https://mixed.flux.example/", resolver=resolver)
    assert info.value.reason is EgressReason.BLOCKED_ADDRESS
    assert info.value.address == str(bad)


@given(v4_public)
def test_public_ipv4_allowed_but_its_embeddings_denied(a: IPv4Address) -> None:
    assert guard_url(f"http://{a}/").addresses == (a,)
    assert guard_host(str(a), 80).addresses == (a,)
    for form in v4_embeddings(a):
        _denied(EgressReason.BLOCKED_ADDRESS, f"http://[{form}]/")
    for form in v4_noncanonical(a):
        if form != str(a):
            _denied(EgressReason.NON_CANONICAL_IP, f"http://{form}/")


@given(v6_public)
def test_public_ipv6_allowed_in_every_form(a: IPv6Address) -> None:
    for form in v6_forms(a):
        assert guard_url(f"https://[{form}]/").addresses == (a,)
    resolver = StaticResolver({"v6.flux.example": [a]})
    assert guard_url("https://v6.flux.example/", resolver=resolver).addresses == (a,)


@given(st.text(max_size=80))
def test_arbitrary_text_is_denied_or_yields_vetted_addresses(text: str) -> None:
    resolver = StaticResolver({"example.com": ["93.184.216.34"]})
    for url in (text, "http://" + text, "http://example.com/" + text):
        try:
            target = guard_url(url, resolver=resolver)
        except EgressDeniedError as exc:
            assert isinstance(exc.reason, EgressReason)
        else:
            assert target.addresses and target.url is not None
            assert guard_url(target.url, resolver=resolver) == target
