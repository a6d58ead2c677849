"""A bounded cache of raw DNS answers, owned by one :class:`DnsResolver` (decision 0035).

What is cached is what the nameserver said — the addresses and the CNAME targets of a
name, until the answer's TTL runs out — never what the guard decided about it. Every
hit goes back through the guard, which classifies the addresses against the block
table and the *calling* client's grants and checks the CNAME targets against its host
grants, exactly as for a fresh answer. A cache shared by clients with different grants
therefore cannot hand one client a decision made under another's: there is none in it.

Lifetimes follow RFC 1035 / RFC 2181 §8 with two project bounds:

- TTL 0 (and a negative or unparsable TTL) is never cached: the owner asked for a
  fresh lookup every time, and rebinding tricks rely on exactly that.
- A TTL of 1 … :data:`MIN_TTL` - 1 seconds is raised to :data:`MIN_TTL`; one above
  :data:`MAX_TTL` is cut to it. The floor is small enough that an address keeps being
  used at most a few seconds longer than its owner said; the ceiling bounds how long a
  moved (or withdrawn) address keeps being dialled.
- An answer's clock starts when its query was *sent* (the conservative end).
- Negative answers (NXDOMAIN, no address at all, server failures, timeouts) are not
  cached. A name that has one address family only is cached when the empty family's
  response carries the zone's SOA (RFC 2308 §5: the negative TTL is
  ``min(SOA TTL, SOA MINIMUM)``, and a negative answer without SOA SHOULD NOT be
  cached); without it, the whole answer is not cached.

Bounds: at most :data:`MAX_ENTRIES` names (least recently used evicted first), each
holding at most :data:`MAX_ENTRY_ADDRESSES` addresses and :data:`MAX_ENTRY_ALIASES`
CNAME targets of at most :data:`MAX_NAME_LENGTH` characters; an answer beyond those is
answered but not stored.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv6Address
from typing import Final, final

__all__ = [
    "MAX_ENTRIES",
    "MAX_ENTRY_ADDRESSES",
    "MAX_ENTRY_ALIASES",
    "MAX_NAME_LENGTH",
    "MAX_TTL",
    "MIN_TTL",
    "AnswerCache",
    "CachedAnswer",
    "cache_lifetime",
]

#: Seconds: a positive TTL below this is raised to it (a 1-second TTL costs a lookup
#: every 5 s, not every second; the answer outlives its TTL by at most 4 s).
MIN_TTL: Final = 5
#: Seconds: a longer TTL is cut to this (a moved address is dialled at most 5 minutes).
MAX_TTL: Final = 300
#: Names kept per resolver. A worst-case entry (32 IPv6 addresses, 32 CNAME targets of
#: 253 characters) takes about 13 KiB, so a full cache stays below ~14 MiB; typical
#: entries (a few addresses, no alias) take under 1 KiB.
MAX_ENTRIES: Final = 1024
#: Addresses stored per name (``DnsResolver``'s own answer cap, ``MAX_ANSWERS``).
MAX_ENTRY_ADDRESSES: Final = 32
#: CNAME targets stored per name (dnspython follows at most 16 per record type).
MAX_ENTRY_ALIASES: Final = 32
#: Characters of a name (the cache key or a CNAME target): RFC 1035 §2.3.4 in text.
MAX_NAME_LENGTH: Final = 253

IPAddress = IPv4Address | IPv6Address


@final
@dataclass(frozen=True, slots=True)
class CachedAnswer:
    """One name's addresses and CNAME targets, valid while ``clock() < expires``."""

    addresses: tuple[IPAddress, ...]
    aliases: tuple[str, ...]
    expires: float


def cache_lifetime(ttl: object) -> int | None:
    """Seconds to keep an answer whose (smallest) TTL is *ttl*; ``None``: do not cache.

    ``0``, negative numbers and anything that is not an ``int`` are not cached; other
    values are clamped to ``MIN_TTL..MAX_TTL``.
    """
    if isinstance(ttl, bool) or not isinstance(ttl, int) or ttl <= 0:
        return None
    return min(max(ttl, MIN_TTL), MAX_TTL)


_live_caches: weakref.WeakSet[AnswerCache] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    """A cache lock another thread held at the fork would stay held in the child."""
    for cache in list(_live_caches):
        cache._lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


@final
class AnswerCache:
    """A thread-safe, bounded LRU map from a normalized name to its raw answer.

    Guarantee: at most ``max_entries`` names, each within the per-entry bounds of
    this module; an entry is returned only while ``clock()`` is before its expiry,
    and an expired entry is dropped when looked up. Never holds a decision.
    Not guaranteed: single flight — two threads missing the same name at once both
    query (each answer is stored; the later one wins).

    Args:
        max_entries: names kept (``1..MAX_ENTRIES``).
        clock: monotonic seconds; a parameter so tests can expire entries.

    Raises:
        ValueError: *max_entries* out of range.
    """

    __slots__ = ("__weakref__", "_clock", "_entries", "_lock", "_max")

    def __init__(
        self, *, max_entries: int = MAX_ENTRIES, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if isinstance(max_entries, bool) or not isinstance(max_entries, int):
            raise ValueError(f"max_entries must be an int in 1..{MAX_ENTRIES}")
        if not 1 <= max_entries <= MAX_ENTRIES:
            raise ValueError(f"max_entries must be an int in 1..{MAX_ENTRIES}")
        self._max = max_entries
        self._clock = clock
        self._entries: OrderedDict[str, CachedAnswer] = OrderedDict()
        self._lock = threading.Lock()
        _live_caches.add(self)

    @property
    def clock(self) -> Callable[[], float]:
        return self._clock

    def get(self, name: str) -> CachedAnswer | None:
        """The live entry for *name* (refreshing its LRU place), or ``None``."""
        now = self._clock()
        with self._lock:
            entry = self._entries.get(name)
            if entry is None:
                return None
            if now >= entry.expires:
                del self._entries[name]
                return None
            self._entries.move_to_end(name)
            return entry

    def put(
        self,
        name: str,
        addresses: tuple[IPAddress, ...],
        aliases: tuple[str, ...],
        *,
        ttl: object,
        asked_at: float,
    ) -> bool:
        """Store *name*'s answer for ``cache_lifetime(ttl)`` seconds from *asked_at*.

        Returns whether it was stored: not for an uncacheable TTL, no address, or an
        answer beyond the per-entry bounds (then an older entry for *name* is dropped
        too, so a lookup never answers from a superseded answer).
        """
        lifetime = cache_lifetime(ttl)
        fits = (
            lifetime is not None
            and 0 < len(addresses) <= MAX_ENTRY_ADDRESSES
            and len(aliases) <= MAX_ENTRY_ALIASES
            and len(name) <= MAX_NAME_LENGTH
            and all(len(alias) <= MAX_NAME_LENGTH for alias in aliases)
        )
        with self._lock:
            if not fits or lifetime is None:
                self._entries.pop(name, None)
                return False
            self._entries[name] = CachedAnswer(addresses, aliases, asked_at + lifetime)
            self._entries.move_to_end(name)
            while len(self._entries) > self._max:
                self._entries.popitem(last=False)
            return True

    def clear(self) -> None:
        """Forget every entry."""
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)
