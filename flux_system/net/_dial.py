"""Guarded raw sockets: :func:`dial_tcp` and :func:`dial_udp`."""

from __future__ import annotations

import socket
import time
from collections.abc import Collection
from typing import Final

from flux_system._exceptions import EgressDeniedError, EgressReason
from flux_system.net._allow import EgressPolicy, PrivateNetAllow
from flux_system.net._guard import guard_host
from flux_system.net._pins import sockaddr
from flux_system.net._resolver import Resolver

__all__ = ["dial_tcp", "dial_udp"]

_MAX_TIMEOUT: Final = 86400.0  # a day: beyond that the number is a mistake, not a timeout


def _dial(
    kind: socket.SocketKind,
    op: str,
    host: str,
    port: int,
    *,
    allow: PrivateNetAllow | None,
    resolver: Resolver | None,
    ports: Collection[int] | None,
    policy: EgressPolicy | None,
    timeout: float,
) -> socket.socket:
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise ValueError("timeout must be a positive, finite number of seconds")
    if not 0 < timeout < _MAX_TIMEOUT:  # also refuses NaN and infinity
        raise ValueError("timeout must be a positive, finite number of seconds")
    target = guard_host(host, port, allow=allow, resolver=resolver, ports=ports, policy=policy)
    deadline = time.monotonic() + timeout
    last: OSError | None = None
    for address in target.addresses:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        family, addr = sockaddr(address, port)
        try:
            sock = socket.socket(family, kind)
        except OSError as exc:  # out of descriptors, family not supported...
            last = exc
            continue
        try:
            sock.settimeout(left)
            sock.connect(addr)
        except OSError as exc:
            sock.close()
            last = exc
            continue
        sock.settimeout(None)
        return sock
    raise EgressDeniedError(
        f"{op}: no vetted address answered",
        op=op,
        target=target.host,
        reason=EgressReason.UNREACHABLE,
        address=str(target.addresses[-1]),
    ) from last


def dial_tcp(
    host: str,
    port: int,
    *,
    allow: PrivateNetAllow | None = None,
    resolver: Resolver | None = None,
    ports: Collection[int] | None = None,
    policy: EgressPolicy | None = None,
    timeout: float = 10.0,
) -> socket.socket:
    """Connect a TCP socket to *host*:*port* through the egress guard.

    Guarantee: the guard of :func:`guard_host` runs first (one resolution, every
    answer classified); the socket connects only to a vetted address, tried in
    resolver order within *timeout* in total; the returned socket is blocking.
    Not guaranteed: TLS (wrap it yourself with ``server_hostname=host``).

    Raises:
        EgressDeniedError: the guard refused (its reason) or no vetted address
            accepted the connection (UNREACHABLE; the OS error is the cause).
        TypeError, ValueError: bad arguments.
    """
    return _dial(
        socket.SOCK_STREAM,
        "dial_tcp",
        host,
        port,
        allow=allow,
        resolver=resolver,
        ports=ports,
        policy=policy,
        timeout=timeout,
    )


def dial_udp(
    host: str,
    port: int,
    *,
    allow: PrivateNetAllow | None = None,
    resolver: Resolver | None = None,
    ports: Collection[int] | None = None,
    policy: EgressPolicy | None = None,
    timeout: float = 10.0,
) -> socket.socket:
    """A UDP socket *connected* to a vetted address of *host*:*port*.

    Guarantee: as :func:`dial_tcp` for the choice of address; the kernel drops
    datagrams from other sources and ``send`` goes only to that address.
    Not guaranteed: that the peer exists (UDP connect sends nothing); code holding the
    socket could still ``sendto`` another address — hand out ``send``/``recv`` only.

    Raises:
        EgressDeniedError, TypeError, ValueError: as :func:`dial_tcp`.
    """
    return _dial(
        socket.SOCK_DGRAM,
        "dial_udp",
        host,
        port,
        allow=allow,
        resolver=resolver,
        ports=ports,
        policy=policy,
        timeout=timeout,
    )
