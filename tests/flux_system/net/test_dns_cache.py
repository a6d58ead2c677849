"""The DNS answer cache (decision 0035) against a real DNS server on loopback.

Time is the resolver's ``clock`` parameter (a settable value), so expiry is exercised
without sleeping; the DNS server's query log shows when a lookup really happened.
Each cached answer must be classified again, under the calling client's own grants,
on every hit; an expired one must be resolved and vetted again.
"""

from __future__ import annotations

import threading
from ipaddress import IPv4Address, IPv6Address, ip_address

import pytest

from flux_system import EgressDeniedError, EgressReason
from flux_system.net import (
    DnsResolver,
    PrivateNetAllow,
    dial_tcp,
    guard_url,
    guarded_async_client,
    guarded_client,
)
from flux_system.net._dnscache import (
    MAX_ENTRIES,
    MAX_ENTRY_ADDRESSES,
    MAX_ENTRY_ALIASES,
    MAX_NAME_LENGTH,
    MAX_TTL,
    MIN_TTL,
    AnswerCache,
    cache_lifetime,
)
from flux_system.net._resolver import MAX_ANSWERS
from tests.flux_system.net._servers import FlipDnsServer, Handler, LoopbackHTTP, free_port_on
from tests.flux_system.net.test_fork import _in_child

NAME = "cached.flux.example"
ROUND = [(NAME, "A"), (NAME, "AAAA")]  # one lookup: one query per record type
#: The SOA negative TTL on empty answers (a day: the names here have no AAAA, and the
#: SOA must not be what limits the lifetime unless a test says so).
SOA = 86400


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _resolver(server: FlipDnsServer, clock: Clock, **kwargs: int) -> DnsResolver:
    return DnsResolver(["127.0.0.1"], port=server.port, timeout=2.0, clock=clock, **kwargs)


def _served_by(h: Handler) -> None:
    h.reply(200, h.server.owner.host.encode())


def _served_by_then_close(h: Handler) -> None:
    h.close_connection = True  # every request needs a new connection (a new dial)
    h.reply(200, h.server.owner.host.encode(), {"Connection": "close"})


# ----------------------------------------------------------------- TTL and lifetime


def test_repeated_host_is_resolved_once_within_its_ttl() -> None:
    clock = Clock()
    with FlipDnsServer({NAME: ["93.184.216.34", "2606:2800::1"]}, ttl=60) as dns_server:
        resolver = _resolver(dns_server, clock)
        for _ in range(5):
            target = guard_url(f"https://{NAME}/", resolver=resolver)
            assert target.addresses == (ip_address("93.184.216.34"), ip_address("2606:2800::1"))
            clock.now += 11.0  # 44 s in total: still inside the 60 s TTL
        assert dns_server.queries() == ROUND


def test_ttl_zero_is_never_cached() -> None:
    clock = Clock()
    with FlipDnsServer({NAME: ["93.184.216.34"]}, {NAME: ["169.254.169.254"]}) as dns_server:
        resolver = _resolver(dns_server, clock)
        guard_url(f"http://{NAME}/", resolver=resolver)
        with pytest.raises(EgressDeniedError) as info:  # asked again, at once
            guard_url(f"http://{NAME}/", resolver=resolver)
        assert info.value.reason is EgressReason.BLOCKED_ADDRESS
        assert info.value.address == "169.254.169.254"
        assert dns_server.queries() == ROUND * 2


def test_expired_answer_is_resolved_and_vetted_again() -> None:
    clock = Clock()
    with FlipDnsServer({NAME: ["93.184.216.34"]}, ttl=60, soa_minimum=SOA) as dns_server:
        resolver = _resolver(dns_server, clock)
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
        resolver = _resolver(dns_server, clock)
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
        resolver = _resolver(dns_server, clock)
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
        resolver = _resolver(dns_server, clock)
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
        resolver = _resolver(dns_server, clock)
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
        resolver = _resolver(dns_server, clock)
        guard_url(f"http://{NAME}/", resolver=resolver)
        guard_url(f"http://{NAME}/", resolver=resolver)
        assert dns_server.queries() == ROUND * 2


def test_nxdomain_is_never_cached_even_with_an_soa() -> None:
    clock = Clock()
    with FlipDnsServer({}, ttl=120, soa_minimum=SOA) as dns_server:
        resolver = _resolver(dns_server, clock)
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
        resolver = _resolver(dns_server, clock)
        for _ in range(2):
            with pytest.raises(EgressDeniedError) as info:
                guard_url(f"http://{NAME}/", resolver=resolver)
            assert info.value.reason is EgressReason.TOO_MANY_ANSWERS
        assert [q for q in dns_server.queries() if q[1] == "A"] == [(NAME, "A")] * 4  # UDP+TCP


def test_cache_size_zero_turns_the_cache_off_and_clear_cache_forgets() -> None:
    clock = Clock()
    with FlipDnsServer({NAME: ["93.184.216.34"]}, ttl=300, soa_minimum=SOA) as dns_server:
        off = _resolver(dns_server, clock, cache_size=0)
        guard_url(f"http://{NAME}/", resolver=off)
        guard_url(f"http://{NAME}/", resolver=off)
        assert dns_server.queries() == ROUND * 2
        on = _resolver(dns_server, clock)
        guard_url(f"http://{NAME}/", resolver=on)
        guard_url(f"http://{NAME}/", resolver=on)
        assert dns_server.queries() == ROUND * 3
        on.clear_cache()
        guard_url(f"http://{NAME}/", resolver=on)
        assert dns_server.queries() == ROUND * 4


def test_names_are_cached_case_and_trailing_dot_insensitively() -> None:
    clock = Clock()
    with FlipDnsServer({NAME: ["93.184.216.34"]}, ttl=300, soa_minimum=SOA) as dns_server:
        resolver = _resolver(dns_server, clock)
        for host in (NAME, NAME.upper(), NAME + "."):
            assert resolver.resolve(host, 443) == (ip_address("93.184.216.34"),)
        assert dns_server.queries() == ROUND


def test_a_hit_is_a_fresh_resolution_a_caller_cannot_poison() -> None:
    clock = Clock()
    chain = {"alias.flux.example": NAME}
    with FlipDnsServer(
        {NAME: ["93.184.216.34"]}, cname=chain, ttl=300, soa_minimum=SOA
    ) as dns_server:
        resolver = _resolver(dns_server, clock)
        first = resolver.resolve("alias.flux.example", 80)
        assert getattr(first, "aliases", None) == (NAME,)
        first.aliases = ()  # type: ignore[attr-defined]  # a careless caller
        again = resolver.resolve("alias.flux.example", 80)
        assert again is not first and again.aliases == (NAME,)  # type: ignore[attr-defined]
        assert len(dns_server.queries()) == 2


# -------------------------------------------------- one cache, clients with other grants


def test_shared_cache_classifies_every_hit_under_the_callers_grants() -> None:
    port = free_port_on(["127.0.0.2"])
    clock = Clock()
    with (
        FlipDnsServer({NAME: ["127.0.0.2"]}, ttl=300, soa_minimum=SOA) as dns_server,
        LoopbackHTTP("127.0.0.2", port, routes={"/": _served_by}) as server,
    ):
        shared = _resolver(dns_server, clock)
        url = f"http://{NAME}:{port}/"
        granted = guarded_client(
            allow=PrivateNetAllow(cidrs=["127.0.0.2/32"]), resolver=shared, ports=[port]
        )
        ungranted = guarded_client(resolver=shared, ports=[port])
        other_grant = guarded_client(
            allow=PrivateNetAllow(cidrs=["127.0.0.3/32"]), resolver=shared, ports=[port]
        )
        with granted, ungranted, other_grant:
            # The denial comes first: it must not be remembered as the name's verdict.
            for client in (ungranted, other_grant):
                with pytest.raises(EgressDeniedError) as info:
                    client.get(url)
                assert info.value.reason is EgressReason.BLOCKED_ADDRESS
                assert info.value.address == "127.0.0.2"
            assert granted.get(url).text == "127.0.0.2"  # positive control: reachable
            # ...and the admission must not be handed to the clients without the grant.
            for client in (ungranted, other_grant):
                with pytest.raises(EgressDeniedError) as info:
                    client.get(url)
                assert info.value.reason is EgressReason.BLOCKED_ADDRESS
            assert granted.get(url).text == "127.0.0.2"
        assert dns_server.queries() == ROUND  # every verdict after the first came from a hit
        assert len(server.seen) == 2  # only the granted client's requests arrived


def test_shared_cache_checks_cname_targets_under_the_callers_host_grants() -> None:
    clock = Clock()
    chain = {"svc.flux.example": "db.corp.internal"}
    with FlipDnsServer(
        {"db.corp.internal": ["93.184.216.34"]},
        cname=chain,
        ttl=300,
        soa_minimum=SOA,
        zone="corp.internal",  # the SOA of the zone the chain ends in (RFC 2308 §2.1)
    ) as dns_server:
        shared = _resolver(dns_server, clock)
        url = "http://svc.flux.example/"
        corp = PrivateNetAllow(hosts=["*.corp.internal"])
        assert guard_url(url, resolver=shared, allow=corp).addresses == (
            ip_address("93.184.216.34"),
        )
        with pytest.raises(EgressDeniedError) as info:  # a hit, judged without the grant
            guard_url(url, resolver=shared)
        assert info.value.reason is EgressReason.INTERNAL_NAME
        assert guard_url(url, resolver=shared, allow=corp).host == "svc.flux.example"
        assert len(dns_server.queries()) == 2


# ------------------------------------------------------------- pinning, no rebinding


def test_new_connections_dial_the_vetted_answer_until_it_expires() -> None:
    # Every response closes its connection, so each request dials anew. The DNS server
    # changes its answer after the first request: until the cached answer expires,
    # every new connection still goes to the address that was vetted (never to the new
    # one); after it, the name is resolved again and the new address vetted and used.
    port = free_port_on(["127.0.0.2", "127.0.0.3"])
    clock = Clock()
    with (
        FlipDnsServer({NAME: ["127.0.0.2"]}, ttl=60, soa_minimum=SOA) as dns_server,
        LoopbackHTTP("127.0.0.2", port, routes={"/": _served_by_then_close}) as old,
        LoopbackHTTP("127.0.0.3", port, routes={"/": _served_by_then_close}) as new,
    ):
        allow = PrivateNetAllow(cidrs=["127.0.0.2/32", "127.0.0.3/32"])
        resolver = _resolver(dns_server, clock)
        with guarded_client(allow=allow, resolver=resolver, ports=[port]) as client:
            url = f"http://{NAME}:{port}/"
            assert client.get(url).text == "127.0.0.2"
            dns_server.answer_with({NAME: ["127.0.0.3"]})
            for _ in range(3):
                clock.now += 15.0  # 45 s: inside the TTL
                response = client.get(url)
                assert response.text == "127.0.0.2"
                assert response.target.addresses == (ip_address("127.0.0.2"),)
            assert new.seen == []
            assert dns_server.queries() == ROUND
            clock.now += 15.0  # 60 s: expired
            response = client.get(url)
            assert response.text == "127.0.0.3"  # re-resolved, re-vetted, then dialled
            assert response.target.addresses == (ip_address("127.0.0.3"),)
        assert dns_server.queries() == ROUND * 2
        assert len(old.seen) == 4 and len(new.seen) == 1
        # Negative control: the server really did change its answer at once.
        assert DnsResolver(["127.0.0.1"], port=dns_server.port, cache_size=0).resolve(
            NAME, port
        ) == (ip_address("127.0.0.3"),)


def test_expired_answer_rebinding_to_a_blocked_address_is_refused_despite_keepalive() -> None:
    # A kept-alive connection to the vetted address sits in the pool; the name now
    # resolves to an address this client may not reach. After expiry the request is
    # guarded afresh and refused before the pool could hand out the old connection.
    port = free_port_on(["127.0.0.2", "127.0.0.4"])
    clock = Clock()
    with (
        FlipDnsServer({NAME: ["127.0.0.2"]}, ttl=60, soa_minimum=SOA) as dns_server,
        LoopbackHTTP("127.0.0.2", port, routes={"/": _served_by}) as vetted,
        LoopbackHTTP("127.0.0.4", port, routes={"/": _served_by}) as blocked,
    ):
        allow = PrivateNetAllow(cidrs=["127.0.0.2/32"])
        resolver = _resolver(dns_server, clock)
        with guarded_client(allow=allow, resolver=resolver, ports=[port]) as client:
            url = f"http://{NAME}:{port}/"
            assert client.get(url).text == "127.0.0.2"
            dns_server.answer_with({NAME: ["127.0.0.4"]})
            clock.now += 30.0
            assert client.get(url).text == "127.0.0.2"  # control: a hit, the kept-alive conn
            clock.now += 30.0
            with pytest.raises(EgressDeniedError) as info:
                client.get(url)
            assert info.value.reason is EgressReason.BLOCKED_ADDRESS
            assert info.value.address == "127.0.0.4"
        assert len(vetted.seen) == 2 and blocked.seen == []
        assert dns_server.queries() == ROUND * 2


def test_dial_tcp_uses_the_cache_and_pins_to_the_cached_answer() -> None:
    port = free_port_on(["127.0.0.2", "127.0.0.3"])
    clock = Clock()
    with (
        FlipDnsServer({NAME: ["127.0.0.2"]}, ttl=60, soa_minimum=SOA) as dns_server,
        LoopbackHTTP("127.0.0.2", port, routes={"/": _served_by}),
        LoopbackHTTP("127.0.0.3", port, routes={"/": _served_by}),
    ):
        allow = PrivateNetAllow(cidrs=["127.0.0.0/8"])
        resolver = _resolver(dns_server, clock)
        peers = []
        for step in range(2):
            if step:
                dns_server.answer_with({NAME: ["127.0.0.3"]})
            with dial_tcp(NAME, port, allow=allow, resolver=resolver, ports=[port]) as sock:
                peers.append(sock.getpeername())
        clock.now += 60.0
        with dial_tcp(NAME, port, allow=allow, resolver=resolver, ports=[port]) as sock:
            peers.append(sock.getpeername())
        assert peers == [("127.0.0.2", port), ("127.0.0.2", port), ("127.0.0.3", port)]
        assert dns_server.queries() == ROUND * 2


def test_async_client_shares_the_cache() -> None:
    import anyio

    port = free_port_on(["127.0.0.2"])
    clock = Clock()
    with (
        FlipDnsServer({NAME: ["127.0.0.2"]}, ttl=60, soa_minimum=SOA) as dns_server,
        LoopbackHTTP("127.0.0.2", port, routes={"/": _served_by}),
    ):
        resolver = _resolver(dns_server, clock)
        allow = PrivateNetAllow(cidrs=["127.0.0.2/32"])

        async def main() -> list[str]:
            async with guarded_async_client(allow=allow, resolver=resolver, ports=[port]) as c:
                return [(await c.get(f"http://{NAME}:{port}/")).text for _ in range(3)]

        assert anyio.run(main) == ["127.0.0.2"] * 3
        with pytest.raises(EgressDeniedError):  # same resolver, no grant: a hit, refused
            guard_url(f"http://{NAME}:{port}/", resolver=resolver, ports=[port])
        assert dns_server.queries() == ROUND


def test_an_soa_of_another_zone_does_not_make_an_empty_answer_cacheable() -> None:
    clock = Clock()
    with FlipDnsServer(
        {NAME: ["93.184.216.34"]}, ttl=300, soa_minimum=SOA, zone="other.example"
    ) as dns_server:
        resolver = _resolver(dns_server, clock)
        guard_url(f"http://{NAME}/", resolver=resolver)
        guard_url(f"http://{NAME}/", resolver=resolver)
        assert dns_server.queries() == ROUND * 2


# ------------------------------------------------------------------ the cache's bounds

A1, A2 = ip_address("93.184.216.34"), ip_address("2606:2800::1")


@pytest.mark.parametrize(
    ("ttl", "expected"),
    [
        (0, None),
        (-1, None),
        (True, None),
        (1.5, None),
        ("60", None),
        (None, None),
        (1, MIN_TTL),
        (MIN_TTL - 1, MIN_TTL),
        (MIN_TTL, MIN_TTL),
        (MIN_TTL + 1, MIN_TTL + 1),
        (MAX_TTL - 1, MAX_TTL - 1),
        (MAX_TTL, MAX_TTL),
        (MAX_TTL + 1, MAX_TTL),
        (2**31 - 1, MAX_TTL),
    ],
)
def test_cache_lifetime(ttl: object, expected: int | None) -> None:
    assert cache_lifetime(ttl) == expected


def test_bounds_are_what_decision_0035_records() -> None:
    assert (MIN_TTL, MAX_TTL, MAX_ENTRIES) == (5, 300, 1024)
    assert (MAX_ENTRY_ADDRESSES, MAX_ENTRY_ALIASES, MAX_NAME_LENGTH) == (32, 32, 253)
    assert MAX_ENTRY_ADDRESSES == MAX_ANSWERS


def test_entries_are_bounded_least_recently_used_first() -> None:
    clock = Clock()
    cache = AnswerCache(max_entries=3, clock=clock)
    for name in ("a", "b", "c"):
        assert cache.put(name, (A1,), (), ttl=60, asked_at=clock.now)
    assert cache.get("a") is not None  # "a" is now the most recently used
    assert cache.put("d", (A2,), (), ttl=60, asked_at=clock.now)
    assert len(cache) == 3
    assert cache.get("b") is None  # the least recently used went first
    assert [cache.get(n) is not None for n in ("a", "c", "d")] == [True, True, True]


def test_the_full_default_cache_holds_exactly_max_entries() -> None:
    cache = AnswerCache(clock=Clock())
    for i in range(MAX_ENTRIES + 10):
        cache.put(f"n{i}.example", (A1,), (), ttl=60, asked_at=1000.0)
    assert len(cache) == MAX_ENTRIES
    assert cache.get("n0.example") is None and cache.get(f"n{MAX_ENTRIES + 9}.example")


@pytest.mark.parametrize(
    ("addresses", "aliases", "name", "stored"),
    [
        ((A1,) * MAX_ENTRY_ADDRESSES, (), "n.example", True),
        ((A1,) * (MAX_ENTRY_ADDRESSES + 1), (), "n.example", False),
        ((), (), "n.example", False),
        ((A1,), ("a.example",) * MAX_ENTRY_ALIASES, "n.example", True),
        ((A1,), ("a.example",) * (MAX_ENTRY_ALIASES + 1), "n.example", False),
        ((A1,), ("a" * MAX_NAME_LENGTH,), "n.example", True),
        ((A1,), ("a" * (MAX_NAME_LENGTH + 1),), "n.example", False),
        ((A1,), (), "n" * MAX_NAME_LENGTH, True),
        ((A1,), (), "n" * (MAX_NAME_LENGTH + 1), False),
    ],
    ids=[
        "addresses-at-cap",
        "addresses-over-cap",
        "no-address",
        "aliases-at-cap",
        "aliases-over-cap",
        "alias-at-length",
        "alias-over-length",
        "name-at-length",
        "name-over-length",
    ],
)
def test_memory_per_entry_is_bounded(
    addresses: tuple[IPv4Address | IPv6Address, ...],
    aliases: tuple[str, ...],
    name: str,
    stored: bool,
) -> None:
    cache = AnswerCache(clock=Clock())
    assert cache.put(name, addresses, aliases, ttl=60, asked_at=1000.0) is stored
    assert (cache.get(name) is not None) is stored


def test_an_uncacheable_answer_drops_the_older_entry() -> None:
    cache = AnswerCache(clock=Clock())
    assert cache.put("n.example", (A1,), (), ttl=60, asked_at=1000.0)
    assert not cache.put("n.example", (A2,), (), ttl=0, asked_at=1000.0)
    assert cache.get("n.example") is None  # never the superseded answer


def test_expiry_is_measured_from_when_the_query_was_sent() -> None:
    clock = Clock()
    cache = AnswerCache(clock=clock)
    cache.put("n.example", (A1,), (), ttl=60, asked_at=clock.now - 59.0)  # a slow answer
    assert cache.get("n.example") is not None
    clock.now += 1.0
    assert cache.get("n.example") is None
    assert len(cache) == 0  # dropped when found expired


@pytest.mark.parametrize("bad", [0, -1, MAX_ENTRIES + 1, True, 1.0])
def test_cache_size_out_of_range_is_refused(bad: object) -> None:
    with pytest.raises(ValueError, match="max_entries"):
        AnswerCache(max_entries=bad)  # type: ignore[arg-type]
    if bad != 0:
        with pytest.raises(ValueError, match="cache_size"):
            DnsResolver(["127.0.0.1"], cache_size=bad)  # type: ignore[arg-type]


def test_cache_lock_held_at_fork_does_not_deadlock_the_child() -> None:
    # Another thread is inside the cache when the fork happens (held here
    # deterministically): the child's lookups must still work. Hang-guarded: the
    # child gives up after 20 s and reports "hung" (nothing is timed).
    clock = Clock()
    with FlipDnsServer({NAME: ["93.184.216.34"]}, ttl=300, soa_minimum=SOA) as dns_server:
        resolver = _resolver(dns_server, clock)
        resolver.resolve(NAME, 80)  # cached: the child answers from the inherited entry
        held, release = threading.Event(), threading.Event()

        def hold() -> None:
            with resolver._cache._lock:  # type: ignore[union-attr]
                held.set()
                release.wait()

        t = threading.Thread(target=hold)
        t.start()
        held.wait()
        try:
            child = _in_child(lambda: str(resolver.resolve(NAME, 80)[0]))
        finally:
            release.set()
            t.join()
        assert child == "93.184.216.34"
        assert dns_server.queries() == ROUND  # the child used the inherited answer


def test_non_ascii_names_bypass_the_cache() -> None:
    # Lower-casing is DNS case folding only for ASCII; other text goes to the server.
    clock = Clock()
    name = "bücher.flux.example"
    with FlipDnsServer(
        {"xn--bcher-kva.flux.example": ["93.184.216.34"]}, ttl=300, soa_minimum=SOA
    ) as dns_server:
        resolver = _resolver(dns_server, clock)
        for _ in range(2):
            assert resolver.resolve(name, 80) == (ip_address("93.184.216.34"),)
        assert len(dns_server.queries()) == 4
        for _ in range(2):  # the A-label form, as the guard passes it, is cached
            resolver.resolve("xn--bcher-kva.flux.example", 80)
        assert len(dns_server.queries()) == 6


def test_concurrent_clients_with_other_grants_never_see_each_others_verdicts() -> None:
    # Threads of a granted and an ungranted caller share one resolver while a third
    # thread keeps expiring the cache (so hits, misses and stores interleave).
    clock = Clock()
    with FlipDnsServer({NAME: ["10.1.2.3"]}, ttl=5, soa_minimum=SOA) as dns_server:
        shared = _resolver(dns_server, clock)
        granted = PrivateNetAllow(cidrs=["10.0.0.0/8"])
        wrong: list[str] = []
        stop = threading.Event()

        def caller(allow: PrivateNetAllow | None) -> None:
            for _ in range(60):
                try:
                    guard_url(f"http://{NAME}/", allow=allow, resolver=shared)
                    outcome = "allowed"
                except EgressDeniedError as exc:
                    outcome = exc.reason.value
                expected = "allowed" if allow is not None else "blocked_address"
                if outcome != expected:
                    wrong.append(outcome)

        def expirer() -> None:
            while not stop.is_set():
                clock.now += 5.0
                stop.wait(0.002)

        threads = [threading.Thread(target=caller, args=(a,)) for a in (granted, None) * 2]
        ticker = threading.Thread(target=expirer)
        ticker.start()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        stop.set()
        ticker.join()
        assert wrong == []
        assert len(dns_server.queries()) >= 4  # the control: the cache did expire and refill
