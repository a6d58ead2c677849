"""dial_tcp / dial_udp against real loopback sockets."""

from __future__ import annotations

import socket

import pytest

from flux_system import EgressDeniedError, EgressReason
from flux_system.net import PrivateNetAllow, StaticResolver, dial_tcp, dial_udp
from tests.flux_system.net._servers import free_port_on, tcp_echo

GRANT = PrivateNetAllow(cidrs=["127.0.0.1/32"])
NAMES = StaticResolver({"echo.flux.example": ["127.0.0.1"], "two.flux.example": ["127.0.0.1"]})


def test_dial_tcp_reaches_a_granted_echo_server() -> None:
    with tcp_echo() as port:
        sock = dial_tcp("echo.flux.example", port, allow=GRANT, resolver=NAMES, ports=[port])
        with sock:
            sock.sendall(b"ping")
            assert sock.recv(16) == b"ping"
            assert sock.getpeername() == ("127.0.0.1", port)


def test_dial_tcp_without_grant_is_denied_before_connecting() -> None:
    with tcp_echo() as port, pytest.raises(EgressDeniedError) as info:
        dial_tcp("echo.flux.example", port, resolver=NAMES, ports=[port])
    assert info.value.reason is EgressReason.BLOCKED_ADDRESS


def test_dial_tcp_port_set() -> None:
    with pytest.raises(EgressDeniedError) as info:
        dial_tcp("echo.flux.example", 22, allow=GRANT, resolver=NAMES)
    assert info.value.reason is EgressReason.PORT


def test_dial_tcp_refused_is_unreachable() -> None:
    port = free_port_on(["127.0.0.1"])
    with pytest.raises(EgressDeniedError) as info:
        dial_tcp("echo.flux.example", port, allow=GRANT, resolver=NAMES, ports=[port])
    assert info.value.reason is EgressReason.UNREACHABLE
    assert isinstance(info.value.__cause__, OSError)


def test_dial_udp_is_connected_to_the_vetted_address() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as server:
        server.bind(("127.0.0.1", 0))
        server.settimeout(2)
        port = server.getsockname()[1]
        sock = dial_udp("echo.flux.example", port, allow=GRANT, resolver=NAMES, ports=[port])
        with sock:
            assert sock.getpeername() == ("127.0.0.1", port)
            sock.send(b"hello")
            data, peer = server.recvfrom(16)
            assert data == b"hello"
            server.sendto(b"back", peer)
            assert sock.recv(16) == b"back"


def test_dial_udp_denied() -> None:
    with pytest.raises(EgressDeniedError) as info:
        dial_udp("169.254.169.254", 53, ports=[53])
    assert info.value.reason is EgressReason.BLOCKED_ADDRESS


def test_dial_rejects_bad_timeout() -> None:
    with pytest.raises(ValueError):
        dial_tcp("echo.flux.example", 80, resolver=NAMES, timeout=0)
