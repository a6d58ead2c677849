"""The DNS answer cache's lifetimes (decision 0035) against a real DNS server on loopback.

Time is the resolver's ``clock`` parameter (a settable value), so expiry is exercised
without sleeping; the DNS server's query log shows when a lookup really happened.
"""

from __future__ import annotations

from ipaddress import ip_address

import pytest

from flux_system import EgressDeniedError, EgressReason
from flux_system.net import guard_url
from flux_system.net._dnscache import MAX_TTL, MIN_TTL
from tests.flux_system.net._cache_support import NAME, ROUND, SOA, Clock, resolver_for
from tests.flux_system.net._servers import FlipDnsServer

# ----------------------------------------------------------------- TTL and lifetime


def test_repeated_host_is_resolved_once_within_its_ttl() -> None:
    clock = Clock()
    with FlipDnsServer({NAME: ["93.184.216.34", "2606:2800::1"]}, ttl=60) as dns_server:
        resolver = resolver_for(dns_server, clock)
        for _ in range(5):
            target = guard_url(f"https://{NAME}/", resolver=resolver)
            assert target.addresses == (ip_address("93.184.216.34"), ip_address("2606:2800::1"))
            clock.now += 11.0  # 44 s in total: still inside the 60 s TTL
        assert dns_server.queries() == ROUND


def test_ttl_zero_is_never_cached() -> None:
    clock = Clock()
    with FlipDnsServer({NAME: ["93.184.216.34"]}, {NAME: ["169.254.169.254"]}) as dns_server:
        resolver = resolver_for(dns_server, clock)
        guard_url(f"http://{NAME}/", resolver=resolver)
        with pytest.raises(EgressDeniedError) as info:  # asked again, at once
            guard_url(f"http://{NAME}/", resolver=resolver)
        assert info.value.reason is EgressReason.BLOCKED_ADDRESS
        assert info.value.address == "169.254.169.254"
        assert dns_server.queries() == ROUND * 2


def test_expired_answer_is_resolved_and_vetted_again() -> None:
    clock = Clock()
    with FlipDnsServer({NAME: ["93.184.216.34"]}, ttl=60, soa_minimum=SOA) as dns_server:
        resolver = resolver_for(dns_server, clock)
        guard_url(f"http://{NAME}/", resolver=resolver)
        dns_server.answer_with({NAME: ["169.254.169.254"]})  # the name now rebinds
        clock.now += 59.9
        assert guard_url(f"http://{NAME}/", resolver=resolver).addresses == (
            ip_address("93.184.216.34"),
        )
        assert dns_server.queries() == ROUND
        clock.now += 0.1  # exactly the TTL: expired
        with pytest.raises(EgressDeniedError) as info:
            guard_url(f"http://{NAME}/", resolver=resolver)
        assert info.value.reason is EgressReason.BLOCKED_ADDRESS
        assert info.value.address == "169.254.169.254"
        assert dns_server.queries() == ROUND * 2


@pytest.mark.parametrize(
    ("ttl", "lifetime"),
    [(1, MIN_TTL), (MIN_TTL - 1, MIN_TTL), (MIN_TTL, MIN_TTL), (MAX_TTL + 1, MAX_TTL)],
    ids=["ttl1-floor", "below-floor", "at-floor", "above-ceiling"],
)
def test_floor_and_ceiling_bound_the_lifetime(ttl: int, lifetime: int) -> None:
    clock = Clock()
    with FlipDnsServer({NAME: ["93.184.216.34"]}, ttl=ttl, soa_minimum=SOA) as dns_server:
        resolver = resolver_for(dns_server, clock)
        guard_url(f"http://{NAME}/", resolver=resolver)
        clock.now += lifetime - 0.01
        guard_url(f"http://{NAME}/", resolver=resolver)
        assert dns_server.queries() == ROUND
        clock.now += 0.01
        guard_url(f"http://{NAME}/", resolver=resolver)
        assert dns_server.queries() == ROUND * 2


def test_ceiling_applies_to_a_day_long_ttl() -> None:
    clock = Clock()
    with FlipDnsServer({NAME: ["93.184.216.34"]}, ttl=86400, soa_minimum=SOA) as dns_server:
        resolver = resolver_for(dns_server, clock)
        guard_url(f"http://{NAME}/", resolver=resolver)
        clock.now += MAX_TTL
        guard_url(f"http://{NAME}/", resolver=resolver)
        assert dns_server.queries() == ROUND * 2


def test_the_smallest_ttl_of_the_chain_wins() -> None:
    clock = Clock()
    chain = {"alias.flux.example": NAME}
    with FlipDnsServer(
        {NAME: ["93.184.216.34"]}, cname=chain, ttl=120, cname_ttl=10, soa_minimum=SOA
    ) as dns_server:
        resolver = resolver_for(dns_server, clock)
        guard_url("http://alias.flux.example/", resolver=resolver)
        clock.now += 9.9
        guard_url("http://alias.flux.example/", resolver=resolver)
        assert len(dns_server.queries()) == 2
        clock.now += 0.1  # the CNAME's 10 s, not the A record's 120 s
        guard_url("http://alias.flux.example/", resolver=resolver)
        assert len(dns_server.queries()) == 4


def test_one_family_only_is_cached_for_the_soa_negative_ttl() -> None:
    # A has TTL 120; AAAA is empty and its SOA says 30 s (RFC 2308: min(TTL, MINIMUM)).
    clock = Clock()
    with FlipDnsServer({NAME: ["93.184.216.34"]}, ttl=120, soa_minimum=30) as dns_server:
        resolver = resolver_for(dns_server, clock)
        guard_url(f"http://{NAME}/", resolver=resolver)
        clock.now += 29.9
        guard_url(f"http://{NAME}/", resolver=resolver)
        assert dns_server.queries() == ROUND
        clock.now += 0.1
        guard_url(f"http://{NAME}/", resolver=resolver)
        assert dns_server.queries() == ROUND * 2


def test_empty_family_without_soa_is_not_cached() -> None:
    # RFC 2308 §5: a negative answer without SOA SHOULD NOT be cached — so the whole
    # answer is not (its AAAA half would otherwise be kept for an unknown time).
    clock = Clock()
    with FlipDnsServer({NAME: ["93.184.216.34"]}, ttl=120) as dns_server:
        resolver = resolver_for(dns_server, clock)
        guard_url(f"http://{NAME}/", resolver=resolver)
        guard_url(f"http://{NAME}/", resolver=resolver)
        assert dns_server.queries() == ROUND * 2


def test_nxdomain_is_never_cached_even_with_an_soa() -> None:
    clock = Clock()
    with FlipDnsServer({}, ttl=120, soa_minimum=SOA) as dns_server:
        resolver = resolver_for(dns_server, clock)
        for _ in range(2):
            with pytest.raises(EgressDeniedError) as info:
                guard_url(f"http://{NAME}/", resolver=resolver)
            assert info.value.reason is EgressReason.RESOLUTION_FAILED
        assert dns_server.queries() == ROUND * 2
        # The name appears: the very next lookup finds it (nothing negative was kept).
        dns_server.answer_with({NAME: ["93.184.216.34"]})
        assert guard_url(f"http://{NAME}/", resolver=resolver).addresses == (
            ip_address("93.184.216.34"),
        )


def test_over_cap_answer_is_refused_every_time_never_cached() -> None:
    clock = Clock()
    many = {NAME: [f"93.184.{i}.1" for i in range(40)]}
    with FlipDnsServer(many, ttl=300, soa_minimum=SOA) as dns_server:
        resolver = resolver_for(dns_server, clock)
        for _ in range(2):
            with pytest.raises(EgressDeniedError) as info:
                guard_url(f"http://{NAME}/", resolver=resolver)
            assert info.value.reason is EgressReason.TOO_MANY_ANSWERS
        assert [q for q in dns_server.queries() if q[1] == "A"] == [(NAME, "A")] * 4  # UDP+TCP


def test_cache_size_zero_turns_the_cache_off_and_clear_cache_forgets() -> None:
    clock = Clock()
    with FlipDnsServer({NAME: ["93.184.216.34"]}, ttl=300, soa_minimum=SOA) as dns_server:
        off = resolver_for(dns_server, clock, cache_size=0)
        guard_url(f"http://{NAME}/", resolver=off)
        guard_url(f"http://{NAME}/", resolver=off)
        assert dns_server.queries() == ROUND * 2
        on = resolver_for(dns_server, clock)
        guard_url(f"http://{NAME}/", resolver=on)
        guard_url(f"http://{NAME}/", resolver=on)
        assert dns_server.queries() == ROUND * 3
        on.clear_cache()
        guard_url(f"http://{NAME}/", resolver=on)
        assert dns_server.queries() == ROUND * 4


def test_names_are_cached_case_and_trailing_dot_insensitively() -> None:
    clock = Clock()
    with FlipDnsServer({NAME: ["93.184.216.34"]}, ttl=300, soa_minimum=SOA) as dns_server:
        resolver = resolver_for(dns_server, clock)
        for host in (NAME, NAME.upper(), NAME + "."):
            assert resolver.resolve(host, 443) == (ip_address("93.184.216.34"),)
        assert dns_server.queries() == ROUND


def test_a_hit_is_a_fresh_resolution_a_caller_cannot_poison() -> None:
    clock = Clock()
    chain = {"alias.flux.example": NAME}
    with FlipDnsServer(
        {NAME: ["93.184.216.34"]}, cname=chain, ttl=300, soa_minimum=SOA
    ) as dns_server:
        resolver = resolver_for(dns_server, clock)
        first = resolver.resolve("alias.flux.example", 80)
        assert getattr(first, "aliases", None) == (NAME,)
        first.aliases = ()  # type: ignore[attr-defined]  # a careless caller
        again = resolver.resolve("alias.flux.example", 80)
        assert again is not first and again.aliases == (NAME,)  # type: ignore[attr-defined]
        assert len(dns_server.queries()) == 2


def test_an_soa_of_another_zone_does_not_make_an_empty_answer_cacheable() -> None:
    clock = Clock()
    with FlipDnsServer(
        {NAME: ["93.184.216.34"]}, ttl=300, soa_minimum=SOA, zone="other.example"
    ) as dns_server:
        resolver = resolver_for(dns_server, clock)
        guard_url(f"http://{NAME}/", resolver=resolver)
        guard_url(f"http://{NAME}/", resolver=resolver)
        assert dns_server.queries() == ROUND * 2


def test_non_ascii_names_bypass_the_cache() -> None:
    # Lower-casing is DNS case folding only for ASCII; other text goes to the server.
    clock = Clock()
    name = "bücher.flux.example"
    with FlipDnsServer(
        {"xn--bcher-kva.flux.example": ["93.184.216.34"]}, ttl=300, soa_minimum=SOA
    ) as dns_server:
        resolver = resolver_for(dns_server, clock)
        for _ in range(2):
            assert resolver.resolve(name, 80) == (ip_address("93.184.216.34"),)
        assert len(dns_server.queries()) == 4
        for _ in range(2):  # the A-label form, as the guard passes it, is cached
            resolver.resolve("xn--bcher-kva.flux.example", 80)
        assert len(dns_server.queries()) == 6


def test_the_lifetime_starts_when_the_query_is_sent() -> None:
    # Each answer "takes" 3 s on the test clock, so the lookup ends 6 s after it began:
    # a 10 s TTL ends 10 s after the first query was sent, not 10 s after the answer.
    clock = Clock()

    def slow() -> None:
        clock.now += 3.0

    with FlipDnsServer(
        {NAME: ["93.184.216.34"]}, ttl=10, soa_minimum=SOA, on_query=slow
    ) as dns_server:
        resolver = resolver_for(dns_server, clock)
        start = clock.now
        guard_url(f"http://{NAME}/", resolver=resolver)
        assert clock.now == start + 6.0
        clock.now = start + 9.9
        guard_url(f"http://{NAME}/", resolver=resolver)
        assert dns_server.queries() == ROUND
        clock.now = start + 10.0
        guard_url(f"http://{NAME}/", resolver=resolver)
        assert dns_server.queries() == ROUND * 2
