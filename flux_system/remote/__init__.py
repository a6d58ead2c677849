"""flux_system.remote — the port protocol's server and client (DESIGN §2.6).

:func:`connect` returns a :class:`~flux_system.port.Substrate` served by a
``flux serve`` over a Unix socket, TCP (TLS and a token off loopback) or stdio.
:class:`PortServer` serves a :class:`ServerConfig` — the server's *own* workspace,
``System`` (with its sandbox) and egress guard. The wire format is in
``ports/PROTOCOL.md``; its JSON Schemas are generated from :mod:`._wire`.
"""

from __future__ import annotations

from flux_system.remote._config import ServerConfig, ServerLimits
from flux_system.remote._connect import connect
from flux_system.remote._credentials import server_tls_context, token_from_env, token_from_file
from flux_system.remote._parts import RemoteChild
from flux_system.remote._server import PortServer

__all__ = [
    "PortServer",
    "RemoteChild",
    "ServerConfig",
    "ServerLimits",
    "connect",
    "server_tls_context",
    "token_from_env",
    "token_from_file",
]
