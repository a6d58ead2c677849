"""Byte channels a client speaks over: a connected socket (Unix, TCP, TLS)."""

from __future__ import annotations

import contextlib
import os
import socket
import ssl
import threading
import typing
from urllib.parse import urlsplit

from flux_system._exceptions import PortError, PortReason, UnreachableError

__all__ = ["Channel", "FdChannel", "SocketChannel", "TlsChannel", "open_socket_channel"]


class Channel(typing.Protocol):
    """What the client needs of a transport.

    ``send_all`` may be called from several threads (the client serializes them);
    ``recv`` from one reader thread at a time, concurrently with sends. ``shutdown``
    wakes a blocked ``recv`` (it then returns ``b""``) without releasing the fd;
    ``close`` releases it and is called only once no thread uses the channel — so an
    fd number is never reused by another connection while a reader still holds it.
    """

    def send_all(self, data: bytes) -> None: ...

    def recv(self, size: int) -> bytes: ...

    def shutdown(self) -> None: ...

    def close(self) -> None: ...


@typing.final
class SocketChannel:
    """A connected stream socket (Unix or TCP)."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    def send_all(self, data: bytes) -> None:
        self._sock.sendall(data)

    def recv(self, size: int) -> bytes:
        return self._sock.recv(size)

    def shutdown(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.shutdown()
        self._sock.close()


@typing.final
class TlsChannel:
    """TLS over a connected socket through a memory BIO.

    An OpenSSL connection must not be used by two threads at once, but a client reads
    on one thread while others send. So the TLS state is touched only under a lock
    and only in memory; socket reads and writes happen outside it. Lock order:
    ``_send_lock`` (orders records on the wire), then ``_lock`` (the TLS state).
    """

    def __init__(
        self,
        sock: socket.socket,
        ctx: ssl.SSLContext,
        hostname: str | None,
        *,
        server_side: bool = False,
    ) -> None:
        self._sock = sock
        self._in = ssl.MemoryBIO()
        self._out = ssl.MemoryBIO()
        self._tls = ctx.wrap_bio(
            self._in, self._out, server_side=server_side, server_hostname=hostname
        )
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        while True:
            try:
                self._tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                self._flush()
                data = self._sock.recv(_RAW)
                if not data:
                    raise ConnectionError("the server closed the connection during TLS") from None
                self._in.write(data)
        self._flush()

    def _flush(self) -> None:
        pending = self._out.read()
        if pending:
            self._sock.sendall(pending)

    def send_all(self, data: bytes) -> None:
        with self._send_lock:
            with self._lock:
                self._tls.write(data)
                pending = self._out.read()
            self._sock.sendall(pending)

    def recv(self, size: int) -> bytes:
        while True:
            with self._lock:
                try:
                    return self._tls.read(size)
                except ssl.SSLWantReadError:
                    pass
                except ssl.SSLZeroReturnError:
                    return b""
            data = self._sock.recv(_RAW)
            if not data:
                return b""
            with self._send_lock, self._lock:
                self._in.write(data)
                pending = self._out.read()  # post-handshake records the peer awaits
                if pending:
                    self._sock.sendall(pending)

    def shutdown(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.shutdown()
        self._sock.close()


@typing.final
class FdChannel:
    """A pair of pipe fds: read from one, write to the other (stdio transports)."""

    def __init__(
        self, read_fd: int, write_fd: int, *, on_close: typing.Callable[[], None] | None = None
    ) -> None:
        self._r = read_fd
        self._w = write_fd
        self._on_close = on_close
        self._closed = False

    def send_all(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            n = os.write(self._w, view)
            view = view[n:]

    def recv(self, size: int) -> bytes:
        return os.read(self._r, size)

    def shutdown(self) -> None:
        if self._on_close is not None:
            self._on_close()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.shutdown()
        for fd in {self._r, self._w}:
            with contextlib.suppress(OSError):
                os.close(fd)


def open_socket_channel(
    target: str, *, ssl_context: ssl.SSLContext | None, timeout: float
) -> SocketChannel | TlsChannel:
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
                    channel = TlsChannel(sock, ssl_context, parts.hostname)
                except BaseException:
                    sock.close()
                    raise
                sock.settimeout(None)
                return channel
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


_RAW = 64 * 1024
