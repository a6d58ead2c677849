"""Byte channels a client speaks over: a connected socket (Unix, TCP, TLS)."""

from __future__ import annotations

import contextlib
import os
import select
import socket
import ssl
import threading
import typing
from urllib.parse import urlsplit

from flux_system._exceptions import PortError, PortReason, UnreachableError
from flux_system.remote._spin import SpinBudget

__all__ = ["Channel", "FdChannel", "SocketChannel", "TlsChannel", "open_socket_channel"]


class Channel(typing.Protocol):
    """What the client needs of a transport.

    ``send_all`` may be called from several threads (the client serializes them);
    ``recv`` from one reader thread at a time, concurrently with sends. ``shutdown``
    wakes a blocked ``recv`` (it then returns ``b""``) without releasing the fd;
    ``close`` releases it and is called only once no thread uses the channel — so an
    fd number is never reused by another connection while a reader still holds it.
    ``ready`` (by the thread that would ``recv``) is True only when ``recv`` would
    return at once (data or EOF); False when it would block — or cannot tell.
    ``hung_up`` is True once the peer closed its side (data may still be buffered);
    False while it is connected — or when the channel cannot tell.
    """

    def send_all(self, data: bytes) -> None: ...

    def recv(self, size: int) -> bytes: ...

    def ready(self) -> bool: ...

    def hung_up(self) -> bool: ...

    def shutdown(self) -> None: ...

    def close(self) -> None: ...


def _timed_out(exc: BlockingIOError) -> TimeoutError:
    # A blocking socket with SO_RCVTIMEO/SO_SNDTIMEO (the server's silence limit).
    return TimeoutError(f"the socket timed out ({exc.strerror})")


@typing.final
class SocketChannel:
    """A connected stream socket (Unix or TCP). A kernel timeout on the socket
    (``SO_RCVTIMEO``/``SO_SNDTIMEO``) raises :class:`TimeoutError`."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._poll = _poller(sock.fileno())
        self._buf = _RecvBuffer()
        self._spin = SpinBudget()

    def send_all(self, data: bytes) -> None:
        try:
            self._sock.sendall(data)
        except BlockingIOError as exc:
            raise _timed_out(exc) from exc

    def recv(self, size: int) -> bytes:
        view = self._buf.view(size)
        try:
            return bytes(view[: self._spin.recv_into(self._sock, view)])
        except BlockingIOError as exc:
            raise _timed_out(exc) from exc

    def ready(self) -> bool:
        return bool(self._poll.poll(0))

    def hung_up(self) -> bool:
        return _hung_up(self._sock.fileno())

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
        self._poll = _poller(sock.fileno())
        self._stash = b""  # plaintext ready() decrypted ahead of recv (reader only)
        self._eof = False
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
            self._raw_send(pending)

    def _raw_send(self, data: bytes) -> None:
        try:
            self._sock.sendall(data)
        except BlockingIOError as exc:
            raise _timed_out(exc) from exc

    def send_all(self, data: bytes) -> None:
        with self._send_lock:
            with self._lock:
                self._tls.write(data)
                pending = self._out.read()
            self._raw_send(pending)

    def recv(self, size: int) -> bytes:
        if self._stash:
            data, self._stash = self._stash[:size], self._stash[size:]
            return data
        while not self._eof:
            got = self._decrypt(size)
            if got is not None:
                return got
            self._take_raw()
        return b""

    def ready(self) -> bool:
        """Whether :meth:`recv` would return at once. Reads and decrypts what the
        socket already holds (a session ticket alone is not data: still not ready)."""
        while not (self._stash or self._eof):
            got = self._decrypt(_RAW)
            if got is not None:
                self._stash = got
                break
            if not self._poll.poll(0):
                return False
            self._take_raw()
        return True

    def hung_up(self) -> bool:
        return _hung_up(self._sock.fileno())

    def _decrypt(self, size: int) -> bytes | None:
        """Plaintext the TLS state holds (``b""``: the peer closed), or None."""
        with self._lock:
            try:
                got = self._tls.read(size)
            except ssl.SSLWantReadError:
                return None
            except ssl.SSLZeroReturnError:
                got = b""
        if not got:
            self._eof = True
        return got

    def _take_raw(self) -> None:
        try:
            data = self._sock.recv(_RAW)
        except BlockingIOError as exc:
            raise _timed_out(exc) from exc
        if not data:
            self._eof = True
            return
        with self._send_lock, self._lock:
            self._in.write(data)
            pending = self._out.read()  # post-handshake records the peer awaits
            if pending:
                self._raw_send(pending)

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
        self._buf = _RecvBuffer()

    def send_all(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            n = os.write(self._w, view)
            view = view[n:]

    def recv(self, size: int) -> bytes:
        view = self._buf.view(size)
        return bytes(view[: os.readv(self._r, [view])])

    def ready(self) -> bool:
        return bool(_poller(self._r).poll(0))

    def hung_up(self) -> bool:
        return _hung_up(self._r)

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


@typing.final
class _RecvBuffer:
    """One reusable receive buffer (for the one thread that reads a channel).

    ``sock.recv(n)`` allocates *n* bytes and shrinks them to what arrived: for the
    large *n* a reader asks for, glibc serves that with ``mmap``, ``mremap`` and
    ``munmap`` on every call (measured: three extra syscalls and fresh zeroed pages per
    4 KiB answer). Reading into this buffer allocates only what arrived.
    """

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = memoryview(bytearray(0))

    def view(self, size: int) -> memoryview:
        if len(self._buf) < size:
            self._buf = memoryview(bytearray(size))
        return self._buf[:size]


def _poller(fd: int) -> select.poll:
    poll = select.poll()
    poll.register(fd, select.POLLIN)
    return poll


_GONE = select.POLLHUP | select.POLLERR | select.POLLNVAL | getattr(select, "POLLRDHUP", 0)


def _hung_up(fd: int) -> bool:
    """Whether the far end of *fd* closed (a socket's peer shut down its writing
    side, a pipe's writer closed), without reading anything."""
    if fd < 0:
        return True
    poll = select.poll()
    poll.register(fd, _GONE)
    return any(events & _GONE for _, events in poll.poll(0))
