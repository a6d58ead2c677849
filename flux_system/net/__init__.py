"""flux_system.net — the DNS-pinned egress guard and guarded HTTP clients (DESIGN §2.4).

Decide with :func:`guard_url` / :func:`guard_host` (strict parsing, one resolution,
every answer classified against the project's dated block table, explicit grants
through :class:`PrivateNetAllow`, an optional allow-list :class:`EgressPolicy`);
connect with :func:`guarded_client`, :func:`guarded_async_client`, :func:`dial_tcp`
or :func:`dial_udp`, which reach only the addresses the guard vetted.
"""

from __future__ import annotations

from flux_system.net._allow import EgressPolicy, PrivateNetAllow
from flux_system.net._async_client import GuardedAsyncClient, guarded_async_client
from flux_system.net._async_transport import AsyncGuardedTransport
from flux_system.net._blocklist import BlockEntry
from flux_system.net._classify import classify_address
from flux_system.net._client import GuardedClient, guarded_client
from flux_system.net._dial import dial_tcp, dial_udp
from flux_system.net._guard import GuardedTarget, guard_host, guard_url
from flux_system.net._limits import GuardedResponse, RequestLimits
from flux_system.net._resolver import DnsResolver, Resolver, StaticResolver
from flux_system.net._transport import GuardedTransport

__all__ = [
    "AsyncGuardedTransport",
    "BlockEntry",
    "DnsResolver",
    "EgressPolicy",
    "GuardedAsyncClient",
    "GuardedClient",
    "GuardedResponse",
    "GuardedTarget",
    "GuardedTransport",
    "PrivateNetAllow",
    "RequestLimits",
    "Resolver",
    "StaticResolver",
    "classify_address",
    "dial_tcp",
    "dial_udp",
    "guard_host",
    "guard_url",
    "guarded_async_client",
    "guarded_client",
]
