"""The DNS answer cache's own bounds (decision 0035): lifetimes, entries, memory, fork.

The cache is exercised directly with a settable clock; the fork case uses a real DNS
server on loopback and a real ``os.fork()``.
"""

from __future__ import annotations

import threading
from ipaddress import IPv4Address, IPv6Address, ip_address

import pytest

from flux_system.net import DnsResolver
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
from tests.flux_system.net._cache_support import NAME, ROUND, SOA, Clock, resolver_for
from tests.flux_system.net._servers import FlipDnsServer
from tests.flux_system.net.test_fork import _in_child

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
        resolver = resolver_for(dns_server, clock)
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
