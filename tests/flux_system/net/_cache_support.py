"""What the DNS answer cache tests share: the name, a settable clock, the resolver."""

from __future__ import annotations

from flux_system.net import DnsResolver
from tests.flux_system.net._servers import FlipDnsServer, Handler

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


def resolver_for(server: FlipDnsServer, clock: Clock, **kwargs: int) -> DnsResolver:
    """A ``DnsResolver`` asking only *server*, its cache on *clock*."""
    return DnsResolver(["127.0.0.1"], port=server.port, timeout=2.0, clock=clock, **kwargs)


def served_by(h: Handler) -> None:
    """Reply with the address the server listens on (which server a request reached)."""
    h.reply(200, h.server.owner.host.encode())


def served_by_then_close(h: Handler) -> None:
    """As :func:`served_by`, closing the connection: every request dials anew."""
    h.close_connection = True
    h.reply(200, h.server.owner.host.encode(), {"Connection": "close"})
