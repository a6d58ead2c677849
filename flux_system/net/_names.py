"""Internal names, refused before any lookup (a denied name never reaches a resolver).

Names are compared in their normalized form: ASCII (A-labels), lower case, no
trailing dot — as produced by :func:`flux_system.net._url.normalize_host`.
"""

from __future__ import annotations

import functools
from typing import Final

__all__ = ["INTERNAL_NAMES", "INTERNAL_SUFFIXES", "is_internal_name", "matches_pattern"]

#: Exact names that always mean "this machine" or "the platform's metadata service".
INTERNAL_NAMES: Final = frozenset(
    {
        "localhost",
        "metadata.google.internal",  # GCP metadata
        "metadata.goog",  # GCP metadata alias
        "metadata.azure.internal",
        "instance-data.ec2.internal",  # AWS metadata alias
    }
)

#: Suffixes (matched at a label boundary, apex included) of names that are local by
#: definition or by wide convention: RFC 6761/6762/8375/7686/9476 special-use names,
#: reverse-lookup zones and the usual private TLDs (ICANN SAC113).
INTERNAL_SUFFIXES: Final = (
    "localhost",  # RFC 6761 §6.3
    "local",  # RFC 6762 mDNS
    "internal",  # ICANN-reserved private TLD (2024)
    "localdomain",
    "home.arpa",  # RFC 8375
    "lan",
    "home",
    "corp",
    "intranet",
    "private",
    "invalid",  # RFC 6761 §6.4: never resolves
    "onion",  # RFC 7686: must not be resolved through DNS
    "alt",  # RFC 9476: not DNS
    "in-addr.arpa",  # a reverse zone is not a host
    "ip6.arpa",
)


_SUFFIX_SET: Final = frozenset(INTERNAL_SUFFIXES)
_MAX_SUFFIX_LABELS: Final = max(s.count(".") + 1 for s in INTERNAL_SUFFIXES)


def matches_pattern(host: str, pattern: str) -> bool:
    """True when *host* matches *pattern* (``name`` exactly, ``*.suffix`` at a label boundary).

    ``*.corp.example`` matches ``a.corp.example`` and ``a.b.corp.example`` but neither
    ``corp.example`` nor ``evilcorp.example``. Both sides must be normalized already.
    """
    if pattern.startswith("*."):
        return host.endswith(pattern[1:]) and len(host) > len(pattern) - 1
    return host == pattern


@functools.lru_cache(maxsize=1024)
def is_internal_name(host: str) -> bool:
    """True for names refused before lookup: listed names, listed suffixes, single labels.

    A single-label name (``intranet``, ``instance-data``) is internal: on real hosts it is
    completed by search domains and resolves inside the network. Memoized (a pure
    function of the name; at most 1024 names of at most 253 bytes kept).
    """
    if "." not in host or host in INTERNAL_NAMES or host in _SUFFIX_SET:
        return True
    tail = host.rsplit(".", _MAX_SUFFIX_LABELS)
    return any(".".join(tail[i:]) in _SUFFIX_SET for i in range(1, len(tail)))
