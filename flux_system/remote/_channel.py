"""Byte channels a client speaks over: a connected socket (Unix, TCP, TLS)."""

from __future__ import annotations

import contextlib
import socket
import ssl
import typing
from urllib.parse import urlsplit

from flux_system._exceptions import PortError, PortReason, UnreachableError

__all__ = ["Channel", "SocketChannel", "open_socket_channel"]


class Channel(typing.Protocol):
    """What the client needs of a transport: blocking send, recv, close."""

    def send_all(self, data: bytes) -> None: ...

    def recv(self, size: int) -> bytes: ...

    def close(self) -> None: ...


@typing.final
class SocketChannel:
    """A connected (possibly TLS-wrapped) stream socket."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    def send_all(self, data: bytes) -> None:
        self._sock.sendall(data)

    def recv(self, size: int) -> bytes:
        return self._sock.recv(size)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()


def open_socket_channel(
    target: str, *, ssl_context: ssl.SSLContext | None, timeout: float
) -> SocketChannel:
    """Connect to ``unix:PATH`` or ``tcp://HOST:PORT`` (IPv6 as ``tcp://[::1]:PORT``).

    Raises:
        PortError: ``PROTOCOL`` for a target that is neither.
        UnreachableError: the connection (or the TLS handshake) failed.
    """
    try:
        if target.startswith("unix:"):
            path = target[len("unix:") :]
            if not path:
                raise PortError(
                    "unix: target needs a path",
                    op="connect",
                    target=target,
                    reason=PortReason.PROTOCOL,
                )
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.settimeout(timeout)
                sock.connect(path)
            except BaseException:
                sock.close()
                raise
        elif target.startswith("tcp://"):
            parts = urlsplit(target)
            if parts.hostname is None or parts.port is None or parts.path not in ("", "/"):
                raise PortError(
                    "tcp target must be tcp://HOST:PORT",
                    op="connect",
                    target=target,
                    reason=PortReason.PROTOCOL,
                )
            sock = socket.create_connection((parts.hostname, parts.port), timeout=timeout)
            if ssl_context is not None:
                try:
                    sock = ssl_context.wrap_socket(sock, server_hostname=parts.hostname)
                except BaseException:
                    sock.close()
                    raise
        else:
            raise PortError(
                "target must be unix:PATH, tcp://HOST:PORT or an argv",
                op="connect",
                target=target,
                reason=PortReason.PROTOCOL,
            )
    except PortError:
        raise
    except (OSError, ValueError) as exc:
        raise UnreachableError(
            f"cannot connect to {target}: {exc}", op="connect", target=target
        ) from exc
    sock.settimeout(None)
    return SocketChannel(sock)
