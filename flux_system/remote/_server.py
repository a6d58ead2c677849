"""Listeners for the port server: Unix socket, TCP (TLS + token off loopback), stdio.

Guarantee: a Unix socket is created mode 0600 and a peer whose uid (``SO_PEERCRED``)
is neither the server's nor root is refused before the handshake; a TCP listener on a
non-loopback address refuses to start without both TLS and a token; every connection
is served by its own :class:`~flux_system.remote._connection.Connection`, and one line
per connection is logged (peer, requests served, how it ended). Not guaranteed:
protection of a token sent over plain TCP on loopback from other local users (use the
Unix socket or TLS for that).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import socket
import ssl
import stat
import struct
import sys
import typing
from collections.abc import Callable

from flux_system._exceptions import PortError, PortReason
from flux_system.remote._config import ServerConfig
from flux_system.remote._connection import Connection
from flux_system.remote._frame import encode_frame

__all__ = ["PortServer"]

Log = Callable[[str], None]


def _stderr_log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _peer_uid(sock: socket.socket) -> int | None:
    try:
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return None
    _pid, uid, _gid = struct.unpack("3i", creds)
    return int(uid)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@typing.final
class PortServer:
    """Serve *config* over one listener until :meth:`close`.

    Use :meth:`start_unix`, :meth:`start_tcp` or :meth:`serve_stdio` inside a running
    asyncio loop; :meth:`wait_closed` returns when the listener is closed.
    """

    def __init__(self, config: ServerConfig, *, log: Log | None = None) -> None:
        self._cfg = config
        self._log = log or _stderr_log
        self._server: asyncio.base_events.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self.address: str | None = None

    async def _serve(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: str
    ) -> None:
        conn = Connection(self._cfg, reader, writer, peer)
        task = asyncio.current_task()
        if task is not None:
            self._connections.add(task)
        try:
            await conn.serve()
        finally:
            self._log(
                f"flux serve: {peer}: {conn.requests} requests, "
                f"peak {conn.in_flight_peak} in flight, closed"
            )
            if task is not None:
                self._connections.discard(task)

    # -- Unix socket ---------------------------------------------------------------------

    async def start_unix(self, path: str) -> None:
        """Listen on the Unix socket *path* (created 0600; an existing socket is replaced).

        Raises:
            PortError: ``PROTOCOL`` when *path* exists and is not a socket.
        """
        with contextlib.suppress(FileNotFoundError):
            st = os.lstat(path)
            if not stat.S_ISSOCK(st.st_mode):
                raise PortError(
                    f"{path} exists and is not a socket",
                    op="serve",
                    target=path,
                    reason=PortReason.PROTOCOL,
                )
            os.unlink(path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            sock.bind(path)
        finally:
            os.umask(old)
        os.chmod(path, 0o600)
        me = os.getuid()

        async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            raw = writer.get_extra_info("socket")
            uid = _peer_uid(raw) if raw is not None else None
            if uid is None or uid not in (me, 0):
                self._log(f"flux serve: unix peer uid {uid} refused (server uid {me})")
                with contextlib.suppress(ConnectionError, OSError):
                    writer.write(
                        encode_frame(
                            {"type": "goodbye", "reason": "auth", "message": "peer uid not allowed"}
                        )
                    )
                    await writer.drain()
                writer.close()
                return
            await self._serve(reader, writer, f"unix:{path} uid={uid}")

        self._server = await asyncio.start_unix_server(accept, sock=sock, limit=1 << 16)
        self.address = f"unix:{path}"

    # -- TCP -----------------------------------------------------------------------------

    async def start_tcp(
        self, host: str, port: int, *, ssl_context: ssl.SSLContext | None = None
    ) -> int:
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

        async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            peer = writer.get_extra_info("peername")
            where = f"tcp://{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else "tcp"
            await self._serve(reader, writer, where)

        self._server = await asyncio.start_server(
            accept, host.strip("[]"), port, ssl=ssl_context, limit=1 << 16
        )
        bound = self._server.sockets[0].getsockname()[1]
        shown = f"[{host.strip('[]')}]" if ":" in host else host
        self.address = f"tcp://{shown}:{bound}"
        return int(bound)

    # -- stdio ---------------------------------------------------------------------------

    async def serve_stdio(self, read_fd: int = 0, write_fd: int = 1) -> None:
        """Serve one connection over *read_fd*/*write_fd* (``ssh host flux serve --stdio``)."""
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=1 << 16)
        await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(read_fd, "rb", 0)
        )
        transport, protocol = await loop.connect_write_pipe(
            asyncio.streams.FlowControlMixin, os.fdopen(write_fd, "wb", 0)
        )
        writer = asyncio.StreamWriter(transport, protocol, reader, loop)
        self.address = "stdio"
        await self._serve(reader, writer, "stdio")

    # -- lifetime ------------------------------------------------------------------------

    async def wait_closed(self) -> None:
        if self._server is not None:
            await self._server.serve_forever()

    async def close(self) -> None:
        """Stop listening and end every connection (their children are killed)."""
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
