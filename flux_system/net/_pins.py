"""The pin table the transports hand to their network backends, and error mapping.

The transport guards a request, then sets :data:`PINS` (a context variable) to
``{(host, port): vetted addresses}`` for the duration of the pool call. The network
backend's ``connect_tcp(host, port)`` dials only those addresses; a host with no pin
in the current context is refused (fail closed). A context variable (not shared
state) means a dial can only use what *this* request vetted, in threads and tasks.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv6Address
from typing import Final, final

import httpcore
import httpx

from flux_system._exceptions import EgressDeniedError, EgressReason
from flux_system.net._deadline import MIN_TIMEOUT

__all__ = [
    "PINS",
    "DialAttempts",
    "Pins",
    "capped",
    "check_deadline",
    "connect_socket",
    "dial_attempts",
    "map_httpcore_errors",
    "pinned_addresses",
    "sockaddr",
]


@final
@dataclass(frozen=True, slots=True)
class Pins:
    """What one request may dial (one host and port), and the time left, if bounded."""

    host: str
    port: int
    addresses: tuple[IPv4Address | IPv6Address, ...]
    remaining: Callable[[], float] | None = None


PINS: Final[ContextVar[Pins | None]] = ContextVar("flux_egress_pins", default=None)


def pinned_addresses(host: str, port: int) -> tuple[Pins, tuple[IPv4Address | IPv6Address, ...]]:
    """The vetted addresses for *host*:*port* in the current context.

    Raises:
        httpcore.ConnectError: nothing was vetted for that destination here.
    """
    pins = PINS.get()
    if pins is None or pins.host != host.lower() or pins.port != port or not pins.addresses:
        raise httpcore.ConnectError(f"no vetted address for {host}:{port} (refused)")
    return pins, pins.addresses


@final
class DialAttempts:
    """The vetted addresses of one ``connect_tcp``, each with the time it may take.

    Iterate to get ``(address, timeout)`` pairs in resolver order: the timeout is the
    phase timeout capped by what is left of the request's deadline, recomputed before
    each address, so several addresses share one budget. Record each failure with
    :meth:`failed`; :meth:`error` is the last one (raise it when none connected).
    """

    __slots__ = ("_addresses", "_last", "_pins", "_timeout")

    def __init__(
        self,
        pins: Pins,
        addresses: tuple[IPv4Address | IPv6Address, ...],
        timeout: float | None,
    ) -> None:
        self._pins = pins
        self._addresses = addresses
        self._timeout = timeout
        self._last: Exception | None = None

    def __iter__(self) -> Iterator[tuple[IPv4Address | IPv6Address, float | None]]:
        for address in self._addresses:  # at most MAX_ANSWERS addresses
            left = self._timeout
            if self._pins.remaining is not None:
                budget = self._pins.remaining()
                left = budget if left is None else min(left, budget)
            yield address, left

    def failed(self, exc: Exception) -> None:
        self._last = exc

    def error(self) -> Exception:
        return self._last or httpcore.ConnectError("no vetted address to connect to")


def dial_attempts(
    host: str, port: int, timeout: float | None, local_address: str | None = None
) -> DialAttempts:
    """The :class:`DialAttempts` for *host*:*port* in the current context.

    Raises:
        httpcore.ConnectError: nothing vetted here, or a local address was asked for
            (binding one is not offered: the pool never asks).
    """
    if local_address is not None:
        raise httpcore.ConnectError("binding a local address is not offered")
    pins, addresses = pinned_addresses(host, port)
    return DialAttempts(pins, addresses, timeout)


def check_deadline(pins: Pins, host: str) -> None:
    """Raise ``EgressDeniedError(DEADLINE)`` when the request's total deadline is spent.

    A resolution in progress is not interrupted (bounded by the resolver's own timeout);
    this check stops the request right after it, before any connection.
    """
    if pins.remaining is not None and pins.remaining() <= MIN_TIMEOUT:
        raise EgressDeniedError(
            "request: total deadline expired",
            op="request",
            target=host,
            reason=EgressReason.DEADLINE,
        )


def capped(timeout: float | None) -> float | None:
    """*timeout* for one socket operation, capped by the current request's deadline.

    httpcore reads a phase timeout once and reuses it for every read of a response
    head, and loops over ``1xx`` responses without bound: a server dripping bytes or
    flooding ``100 Continue`` never trips a per-read timeout. The pinned streams call
    this before *every* read, write and handshake, so the deadline is total. Without
    pins in the current context, or pins without a deadline, *timeout* is unchanged.

    Raises:
        EgressDeniedError: DEADLINE, the request's total deadline is spent.
    """
    pins = PINS.get()
    if pins is None or pins.remaining is None:
        return timeout
    check_deadline(pins, pins.host)
    left = pins.remaining()
    return left if timeout is None or timeout > left else timeout


_ERROR_MAP: Final[tuple[tuple[type[Exception], type[httpx.TransportError]], ...]] = (
    (httpcore.ConnectTimeout, httpx.ConnectTimeout),
    (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout),
    (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.TimeoutException, httpx.TimeoutException),
    (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError),
    (httpcore.WriteError, httpx.WriteError),
    (httpcore.NetworkError, httpx.NetworkError),
    (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError),
    (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.ProtocolError, httpx.ProtocolError),
)


def sockaddr(
    address: IPv4Address | IPv6Address, port: int
) -> tuple[int, tuple[str, int] | tuple[str, int, int, int]]:
    """(address family, socket address) for a vetted *address*: no name to resolve."""
    if isinstance(address, IPv6Address):
        return socket.AF_INET6, (str(address), port, 0, 0)
    return socket.AF_INET, (str(address), port)


def connect_socket(
    address: IPv4Address | IPv6Address,
    port: int,
    timeout: float | None,
    socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
) -> socket.socket:
    """A blocking TCP socket connected to the vetted *address* (as httpcore's backend).

    ``socket.create_connection`` would pass the literal through ``getaddrinfo``; here
    the socket address is built from the parsed address, so no lookup of any kind runs.

    Raises:
        httpcore.ConnectTimeout, httpcore.ConnectError: the OS error is the cause.
    """
    family, addr = sockaddr(address, port)
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        for option in socket_options or ():
            sock.setsockopt(*option)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(timeout)
        sock.connect(addr)
    except TimeoutError as exc:
        sock.close()
        raise httpcore.ConnectTimeout(str(exc)) from exc
    except OSError as exc:
        sock.close()
        raise httpcore.ConnectError(str(exc)) from exc
    return sock


@final
class _MapErrors:
    """Translate httpcore's errors to httpx's, as httpx's own transport does.

    A plain class, not ``@contextlib.contextmanager``: it is entered twice per request
    and holds no state, so one instance serves every ``with``.
    """

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        if exc is None or not isinstance(exc, Exception):
            return
        for source, target in _ERROR_MAP:
            if isinstance(exc, source):
                raise target(str(exc)) from exc


_MAP_ERRORS: Final = _MapErrors()


def map_httpcore_errors() -> _MapErrors:
    """A context manager translating httpcore's errors to httpx's."""
    return _MAP_ERRORS
