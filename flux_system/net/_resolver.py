"""Resolvers: the :class:`Resolver` protocol, :class:`DnsResolver` and :class:`StaticResolver`.

As httpcore keeps its backend interface beside the real and the mock backend, the
interface, the real implementation (dnspython) and the pinned-table implementation
live together here.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from ipaddress import IPv4Address, IPv6Address, ip_address
from typing import Final, Protocol, final, runtime_checkable

import dns.exception
import dns.message
import dns.name
import dns.rdatatype
import dns.resolver

from flux_system._exceptions import EgressDeniedError, EgressReason
from flux_system.net._dnscache import MAX_ENTRIES, MAX_ENTRY_ADDRESSES, AnswerCache

__all__ = ["MAX_ANSWERS", "DnsResolver", "Resolution", "Resolver", "StaticResolver"]

#: Answers kept per destination (A and AAAA together). Real services publish a few
#: addresses; hundreds only make every later check slower. Over the cap: denied.
MAX_ANSWERS: Final = MAX_ENTRY_ADDRESSES
_MAX_NAMESERVERS: Final = 16

IPAddress = IPv4Address | IPv6Address


@runtime_checkable
class Resolver(Protocol):
    """What any resolver implements: one host to its addresses.

    The guard calls :meth:`resolve` exactly once per destination and classifies every
    answer; a resolver never decides what is blocked. A resolver may answer from a
    cache of what its nameservers said (as :class:`DnsResolver` does), never from a
    cache of verdicts: the same resolver serves callers with different grants. Raise
    :class:`~flux_system.EgressDeniedError` (reason ``RESOLUTION_FAILED``) when the name
    does not resolve; any other exception is treated the same way by the guard.
    """

    def resolve(self, host: str, port: int) -> Sequence[IPv4Address | IPv6Address]: ...


@final
class Resolution(tuple[IPv4Address | IPv6Address, ...]):
    """Addresses, plus the names the answer went through (CNAME targets, normalized).

    A resolver may return one so the guard can refuse a chain through an internal name
    (``evil.example CNAME db.corp.internal``), which a search-domain-free lookup of the
    asked name would otherwise hide.
    """

    aliases: tuple[str, ...]

    def __new__(
        cls, addresses: Iterable[IPv4Address | IPv6Address], aliases: Iterable[str] = ()
    ) -> Resolution:
        self = super().__new__(cls, addresses)
        self.aliases = tuple(aliases)
        return self


def _failed(host: str, why: str) -> EgressDeniedError:
    return EgressDeniedError(
        f"resolve: {why}", op="resolve", target=host, reason=EgressReason.RESOLUTION_FAILED
    )


@final
class StaticResolver:
    """A fixed table ``{host: [address, ...]}`` — for pinned hosts and for tests.

    Guarantee: no network traffic; a host not in the table fails to resolve. Names are
    compared case-insensitively without a trailing dot. ``calls`` counts lookups.

    Raises:
        TypeError, ValueError: a malformed table (non-str names, bad addresses).
    """

    __slots__ = ("_table", "calls")

    def __init__(self, table: Mapping[str, Iterable[str | IPAddress]]) -> None:
        if not isinstance(table, Mapping):
            raise TypeError(f"table must be a mapping, not {type(table).__name__}")
        built: dict[str, tuple[IPAddress, ...]] = {}
        for name, answers in table.items():
            if not isinstance(name, str):
                raise TypeError(f"table keys must be str, not {type(name).__name__}")
            if isinstance(answers, str | bytes):
                raise TypeError(f"answers for {name!r} must be a list, not a string")
            addrs = tuple(
                a if isinstance(a, IPv4Address | IPv6Address) else ip_address(a) for a in answers
            )
            built[name.lower().removesuffix(".")] = addrs
        self._table = built
        self.calls = 0

    def resolve(self, host: str, port: int) -> Sequence[IPv4Address | IPv6Address]:
        """Return the pinned answers for *host*.

        Raises:
            EgressDeniedError: RESOLUTION_FAILED when the host is not in the table.
        """
        self.calls += 1
        answers = self._table.get(host.lower().removesuffix("."))
        if not answers:
            raise _failed(host, "host not in the static table")
        return answers


@final
class DnsResolver:
    """Resolve A and AAAA with dnspython, straight to the given nameservers, with a cache.

    Guarantee: on a cache miss, one query per record type (no search domains, no
    retry on SERVFAIL); CNAME chains are followed inside the answer (dnspython bounds
    the chain) and their targets returned as :attr:`Resolution.aliases`; more than
    ``max_answers`` addresses is refused; any error other than "no such name / no such
    record" fails the whole lookup (fail closed). A successful answer is kept, raw, in
    this resolver's own bounded cache for its TTL (TTL 0 never; 1 to 4 s raised to
    ``MIN_TTL`` = 5 s; above ``MAX_TTL`` = 300 s cut to it; negative answers never —
    see ``flux_system.net._dnscache``), so a repeated host costs no query. The cache
    holds answers, never decisions: the guard classifies every answer, cached or not,
    against the calling client's own grants, so one resolver may serve clients with
    different grants.
    Not guaranteed: that the nameserver is honest — every answer is still classified;
    that an address is not used up to ``MIN_TTL`` seconds past a TTL below it.

    Args:
        nameservers: IP addresses of the nameservers; ``None`` reads the system
            configuration (/etc/resolv.conf).
        port: the nameservers' port.
        timeout: seconds for the whole lookup (A and AAAA together).
        max_answers: cap on addresses returned (A and AAAA together).
        cache_size: names kept in the answer cache (``0`` turns it off; at most
            ``MAX_ENTRIES`` = 1024).
        clock: monotonic seconds for the cache's expiry; a parameter so tests can
            expire entries (the lookup timeout always uses ``time.monotonic``).

    Raises:
        TypeError, ValueError: bad arguments.
    """

    __slots__ = ("_cache", "_max", "_resolver", "_timeout")

    def __init__(
        self,
        nameservers: Sequence[str] | None = None,
        *,
        port: int = 53,
        timeout: float = 5.0,
        max_answers: int = MAX_ANSWERS,
        cache_size: int = MAX_ENTRIES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not (isinstance(port, int) and 1 <= port <= 65535):
            raise ValueError("port must be an int in 1..65535")
        if not (isinstance(timeout, int | float) and timeout > 0):
            raise ValueError("timeout must be a positive number")
        if not (isinstance(max_answers, int) and 1 <= max_answers <= 1024):
            raise ValueError("max_answers must be an int in 1..1024")
        if isinstance(cache_size, bool) or not isinstance(cache_size, int):
            raise ValueError(f"cache_size must be an int in 0..{MAX_ENTRIES}")
        if not 0 <= cache_size <= MAX_ENTRIES:
            raise ValueError(f"cache_size must be an int in 0..{MAX_ENTRIES}")
        if not callable(clock):
            raise TypeError("clock must be callable")
        resolver = dns.resolver.Resolver(configure=nameservers is None)
        if nameservers is not None:
            if isinstance(nameservers, str) or not nameservers:
                raise TypeError("nameservers must be a non-empty sequence of IP strings")
            if len(nameservers) > _MAX_NAMESERVERS:
                raise ValueError(f"at most {_MAX_NAMESERVERS} nameservers")
            resolver.port = port  # must be set before the nameservers (dnspython 2.4+)
            resolver.nameservers = [str(ip_address(n)) for n in nameservers]
        resolver.timeout = float(timeout)
        resolver.lifetime = float(timeout)
        resolver.cache = None  # ours keeps answers only, bounded per entry (0035)
        resolver.search = []
        resolver.use_search_by_default = False
        resolver.retry_servfail = False
        self._resolver = resolver
        self._max = max_answers
        self._timeout = float(timeout)
        self._cache = AnswerCache(max_entries=cache_size, clock=clock) if cache_size else None

    def clear_cache(self) -> None:
        """Forget every cached answer (the next lookup of any name queries again)."""
        if self._cache is not None:
            self._cache.clear()

    def resolve(self, host: str, port: int) -> Sequence[IPv4Address | IPv6Address]:
        """Return every address of *host* (absolute): from the cache, or A then AAAA.

        Raises:
            EgressDeniedError: RESOLUTION_FAILED (no address, timeout, server error) or
                TOO_MANY_ANSWERS.
        """
        key = host.lower().removesuffix(".")
        # Only ASCII text is cached: there, lower case is DNS's own case folding, so one
        # key always stands for one query name (IDNA mapping of other text may not be).
        cache = self._cache if host.isascii() else None
        if cache is not None:
            hit = cache.get(key)
            if hit is not None:  # a fresh Resolution: callers never share a mutable one
                return Resolution(hit.addresses, hit.aliases)
        try:
            qname = dns.name.from_text(host)  # absolute: never completed by search lists
        except dns.exception.DNSException:
            raise _failed(host, "not a DNS name") from None
        asked_at = None if cache is None else cache.clock()
        found: list[IPAddress] = []
        aliases: list[str] = []
        ttl: int | None = None  # the smallest TTL of every record and negative answer seen
        cacheable = True
        deadline = time.monotonic() + self._timeout  # one budget for both record types
        for rdtype in (dns.rdatatype.A, dns.rdatatype.AAAA):
            left = deadline - time.monotonic()
            if left <= 0:
                raise _failed(host, "lookup timed out")
            try:
                answer = self._resolver.resolve(
                    qname, rdtype, search=False, raise_on_no_answer=False, lifetime=left
                )
            except dns.resolver.NXDOMAIN:
                cacheable = False  # negative answers are never cached (0035)
                continue
            except dns.exception.DNSException as exc:
                raise _failed(host, f"lookup failed ({type(exc).__name__})") from exc
            chain = answer.chaining_result
            for rrset in chain.cnames:  # dnspython bounds the chain (16)
                aliases.extend(r.target.to_text(omit_final_dot=True).lower() for r in rrset)
            if answer.rrset is None and not _has_soa(answer.response, chain.canonical_name):
                cacheable = False  # RFC 2308 §5: no SOA, no negative caching
            ttl = chain.minimum_ttl if ttl is None else min(ttl, chain.minimum_ttl)
            if answer.rrset is None:
                continue
            if len(found) + len(answer.rrset) > self._max:
                raise EgressDeniedError(
                    f"resolve: more than {self._max} answers",
                    op="resolve",
                    target=host,
                    reason=EgressReason.TOO_MANY_ANSWERS,
                )
            found.extend(ip_address(rdata.address) for rdata in answer.rrset)
        if not found:
            raise _failed(host, "no A or AAAA record")
        result = Resolution(found, dict.fromkeys(aliases))
        if cache is not None and asked_at is not None:
            cache.put(
                key,
                tuple(result),
                result.aliases,
                ttl=ttl if cacheable else None,
                asked_at=asked_at,
            )
        return result


def _has_soa(response: dns.message.Message, owner: dns.name.Name) -> bool:
    """True when *response*'s authority section holds the SOA of a zone above *owner*."""
    return any(
        rrset.rdtype == dns.rdatatype.SOA and owner.is_subdomain(rrset.name)
        for rrset in response.authority
    )
