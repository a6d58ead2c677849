"""Listeners for the port server: Unix socket, TCP (TLS + token off loopback), stdio.

One accept thread per listener; one thread per connection, which does the TLS
handshake (so a slow client never holds up accepts) and then serves the connection.
Guarantee: a Unix socket is created mode 0600 and a peer whose uid (``SO_PEERCRED``)
is neither the server's nor root is refused before the handshake; a TCP listener on a
non-loopback address refuses to start without both TLS and a token; :meth:`close`
ends every connection (killing its children) before it returns; one line per
connection is logged (peer, requests, peak in flight, how it ended). Not guaranteed:
secrecy of a token sent over plain TCP on loopback from other local users (use the
Unix socket or TLS for that).
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import os
import socket
import ssl
import stat
import struct
import sys
import threading
import typing
from collections.abc import Callable

from flux_system._exceptions import PortError, PortReason
from flux_system.remote._channel import Channel, FdChannel, SocketChannel, TlsChannel
from flux_system.remote._config import ServerConfig
from flux_system.remote._connection import Connection
from flux_system.remote._frame import encode_frame
from flux_system.remote._socket_path import check_socket_dir, check_socket_outside

__all__ = ["PortServer"]

Log = Callable[[str], None]
_STARVED = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
_STARVED_WAIT_S = 0.1
"""Out of descriptors or memory, accept() fails at once for as long as a connection
waits: retrying at once would spin a core until one is freed."""
_BUSY = encode_frame(
    {"type": "goodbye", "reason": "limit", "message": "too many connections in their handshake"}
)


def _stderr_log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _peer_uid(sock: socket.socket) -> int | None:
    try:
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return None
    _pid, uid, _gid = struct.unpack("3i", creds)
    return int(uid)


def _kernel_timeout(sock: socket.socket, seconds: float) -> None:
    whole = int(seconds)
    timeval = struct.pack("ll", whole, int((seconds - whole) * 1e6))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, timeval)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, timeval)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@typing.final
class PortServer:
    """Serve *config* over listeners started with :meth:`start_unix`, :meth:`start_tcp`
    or over stdio with :meth:`serve_stdio`; :meth:`close` ends it all."""

    def __init__(self, config: ServerConfig, *, log: Log | None = None) -> None:
        self._cfg = config
        self._log = log or _stderr_log
        self._lock = threading.Lock()
        self._listeners: list[socket.socket] = []
        self._threads: set[threading.Thread] = set()
        self._connections: set[Connection] = set()
        self._closed = threading.Event()
        self._handshaking = 0  # accepted connections before their hello (under _lock)
        self.address: str | None = None

    # -- connections -------------------------------------------------------------------

    def _serve(
        self, channel: Channel, peer: str, after_hello: Callable[[], None] | None = None
    ) -> None:
        conn = Connection(self._cfg, channel, peer, after_hello=after_hello)
        with self._lock:
            if self._closed.is_set():
                channel.close()
                return
            self._connections.add(conn)
        try:
            conn.serve()
        finally:
            with self._lock:
                self._connections.discard(conn)
            self._log(
                f"flux serve: {peer}: {conn.requests} requests, "
                f"peak {conn.in_flight_peak} in flight, {conn.ended}"
            )

    def _spawn_thread(self, target: Callable[..., None], *args: object) -> None:
        def run() -> None:
            try:
                target(*args)
            finally:
                with self._lock:
                    self._threads.discard(threading.current_thread())

        thread = threading.Thread(target=run, name="flux-serve", daemon=True)
        with self._lock:
            self._threads.add(thread)
        try:
            thread.start()
        except BaseException:
            with self._lock:
                self._threads.discard(thread)
            raise

    def _handshake_slot(self) -> Callable[[], None] | None:
        """Take one of ``max_handshaking`` slots; return what gives it back (idempotent),
        or None when every slot is taken."""
        with self._lock:
            if self._handshaking >= self._cfg.limits.max_handshaking:
                return None
            self._handshaking += 1
        held = [True]

        def release() -> None:
            with self._lock:
                if held:
                    held.clear()
                    self._handshaking -= 1

        return release

    def _accept_loop(
        self,
        listener: socket.socket,
        accept: Callable[[socket.socket, object, Callable[[], None]], None],
    ) -> None:
        starved = False
        while not self._closed.is_set():
            try:
                sock, addr = listener.accept()
            except OSError as exc:
                if self._closed.is_set():
                    return
                if exc.errno in _STARVED:  # the connection stays queued: retry, not spin
                    if not starved:
                        self._log(f"flux serve: {self.address}: cannot accept: {exc.strerror}")
                    starved = True
                    self._closed.wait(_STARVED_WAIT_S)
                continue
            starved = False
            if self._closed.is_set():
                sock.close()
                return
            release = self._handshake_slot()
            if release is None:
                self._log(
                    f"flux serve: {self.address}: refused a connection: "
                    f"{self._cfg.limits.max_handshaking} are in their handshake"
                )
                with contextlib.suppress(OSError):
                    sock.send(_BUSY, socket.MSG_DONTWAIT)
                sock.close()
                continue
            try:
                self._spawn_thread(accept, sock, addr, release)
            except RuntimeError:  # no thread to be had: this connection, not the loop, ends
                release()
                sock.close()

    def _silence(self, sock: socket.socket, release: Callable[[], None]) -> Callable[[], None]:
        """Time the hello out after ``handshake_s``; return what, called after the
        handshake, closes a connection silent for three heartbeats instead (its
        children killed). The kernel keeps the time (SO_RCVTIMEO/SO_SNDTIMEO: the
        channel raises TimeoutError); a Python socket timeout would cost a poll() per
        recv and per send."""
        lim = self._cfg.limits
        sock.settimeout(None)
        _kernel_timeout(sock, min(lim.handshake_s, 3 * lim.heartbeat_s))

        def after_hello() -> None:
            release()
            _kernel_timeout(sock, 3 * lim.heartbeat_s)

        return after_hello

    # -- Unix socket ---------------------------------------------------------------------

    def start_unix(self, path: str) -> None:
        """Listen on the Unix socket *path* (created 0600; an old socket there is replaced).

        Raises:
            PortError: ``PROTOCOL`` when *path* exists and is not a socket, a directory
                on its way can be written by another user (:func:`check_socket_dir`),
                or it cannot be bound (its directory is missing or not writable, an
                old socket there cannot be removed); ``AUTH`` when it lies inside a
                root of the served workspace (:func:`check_socket_outside`).
        """
        check_socket_outside(path, self._cfg.workspace)

        def refuse(why: str) -> PortError:
            return PortError(why, op="serve", target=path, reason=PortReason.PROTOCOL)

        check_socket_dir(path)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            with contextlib.suppress(FileNotFoundError):
                if not stat.S_ISSOCK(os.lstat(path).st_mode):
                    raise refuse(f"{path} exists and is not a socket")
                os.unlink(path)
            # bind() gives the new file the socket's own mode (less the umask), so it is
            # 0600 from its first moment. Not a umask change (it is the whole process's:
            # files other threads made meanwhile would be 0600 too) and no chmod after (a
            # chmod by path follows a symlink someone who can write the directory put
            # in its place).
            os.fchmod(listener.fileno(), 0o600)
            listener.bind(path)
            st = os.lstat(path)
            if not stat.S_ISSOCK(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
                raise refuse(f"{path} was replaced while it was being created")
            listener.listen(128)
        except PortError:
            listener.close()
            raise
        except OSError as exc:
            listener.close()
            raise refuse(f"cannot listen on {path}: {exc.strerror or exc}") from exc
        me = os.getuid()

        def accept(sock: socket.socket, _addr: object, release: Callable[[], None]) -> None:
            try:
                serve(sock, release)
            finally:
                release()

        def serve(sock: socket.socket, release: Callable[[], None]) -> None:
            uid = _peer_uid(sock)
            if uid is None or uid not in (me, 0):
                self._log(f"flux serve: unix peer uid {uid} refused (server uid {me})")
                with contextlib.suppress(OSError):
                    sock.sendall(
                        encode_frame(
                            {"type": "goodbye", "reason": "auth", "message": "peer uid not allowed"}
                        )
                    )
                sock.close()
                return
            after_hello = self._silence(sock, release)
            self._serve(SocketChannel(sock), f"unix:{path} uid={uid}", after_hello)

        with self._lock:
            self._listeners.append(listener)
        self.address = f"unix:{path}"
        self._spawn_thread(self._accept_loop, listener, accept)

    # -- TCP -----------------------------------------------------------------------------

    def start_tcp(self, host: str, port: int, *, ssl_context: ssl.SSLContext | None = None) -> int:
        """Listen on TCP *host*:*port* (0 picks a free port); return the port.

        Raises:
            PortError: ``AUTH`` when *host* is not loopback and TLS or the token is missing.
        """
        if not _is_loopback(host) and (ssl_context is None or self._cfg.token is None):
            raise PortError(
                f"refusing to listen on {host}: off loopback, TLS and a token are required",
                op="serve",
                target=host,
                reason=PortReason.AUTH,
            )
        bare = host.strip("[]")
        family = socket.AF_INET6 if ":" in bare else socket.AF_INET
        listener = socket.socket(family, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((bare, port))
        listener.listen(128)
        bound = int(listener.getsockname()[1])

        def accept(sock: socket.socket, addr: object, release: Callable[[], None]) -> None:
            try:
                serve(sock, addr, release)
            finally:
                release()

        def serve(sock: socket.socket, addr: object, release: Callable[[], None]) -> None:
            where = f"tcp://{addr[0]}:{addr[1]}" if isinstance(addr, tuple) else "tcp"
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            channel: Channel
            if ssl_context is not None:
                handshake_s = self._cfg.limits.handshake_s  # TLS's, then the hello's
                sock.settimeout(handshake_s)
                try:
                    channel = TlsChannel(
                        sock, ssl_context, None, server_side=True, handshake_s=handshake_s
                    )
                except (OSError, ssl.SSLError, ConnectionError) as exc:
                    self._log(f"flux serve: {where}: TLS handshake failed: {type(exc).__name__}")
                    sock.close()
                    return
            else:
                channel = SocketChannel(sock)
            after_hello = self._silence(sock, release)
            self._serve(channel, where, after_hello)

        with self._lock:
            self._listeners.append(listener)
        shown = f"[{bare}]" if ":" in bare else bare
        self.address = f"tcp://{shown}:{bound}"
        self._spawn_thread(self._accept_loop, listener, accept)
        return bound

    # -- stdio ---------------------------------------------------------------------------

    def serve_stdio(self, read_fd: int = 0, write_fd: int = 1) -> None:
        """Serve one connection over *read_fd*/*write_fd* until it ends (blocking)."""
        self.address = "stdio"
        lim = self._cfg.limits
        # A pipe has no kernel timeout: the channel polls, so a silent peer (ssh whose
        # network went away) ends the connection as on a socket, its children killed.
        channel = FdChannel(read_fd, write_fd, timeout=min(lim.handshake_s, 3 * lim.heartbeat_s))

        def after_hello() -> None:
            channel.timeout = 3 * lim.heartbeat_s

        self._serve(channel, "stdio", after_hello)

    # -- lifetime ------------------------------------------------------------------------

    def close(self) -> None:
        """Stop listening and end every connection (their children are killed). Idempotent."""
        self._closed.set()
        with self._lock:
            listeners, self._listeners = self._listeners, []
            connections = list(self._connections)
        for listener in listeners:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        for conn in connections:
            conn.abort()
        while True:
            with self._lock:
                threads = list(self._threads)
            if not threads:
                return
            for thread in threads:
                thread.join()

    def wait_closed(self) -> None:
        """Block until :meth:`close` is called (from another thread or a signal handler)."""
        self._closed.wait()
