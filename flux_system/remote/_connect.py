"""``connect``: a :class:`~flux_system.port.Substrate` served by a far side."""

from __future__ import annotations

import ssl
from collections.abc import Mapping, Sequence

from flux_system._exceptions import PortError, PortReason
from flux_system.port import Substrate, Unserved
from flux_system.remote._channel import Channel, open_socket_channel
from flux_system.remote._client import Client
from flux_system.remote._ops import FILE_OPS
from flux_system.remote._parts import (
    RemoteFiles,
    RemoteHttp,
    RemoteIdentity,
    RemoteMetrics,
    RemoteProcesses,
)

__all__ = ["connect"]


def connect(
    target: str | Sequence[str],
    *,
    token: str | None = None,
    ssl_context: ssl.SSLContext | None = None,
    timeout: float = 10.0,
    env: Mapping[str, str] | None = None,
) -> Substrate:
    """Connect to a ``flux serve`` and return the :class:`Substrate` it serves.

    *target* is ``"unix:PATH"``, ``"tcp://HOST:PORT"`` (IPv6 as ``tcp://[::1]:PORT``),
    or an argv (a sequence of str, e.g. ``["ssh", "host", "flux", "serve", "--stdio"]``)
    spawned and spoken to over its stdin/stdout (through :class:`~flux_system.System`,
    in a private empty directory, with the allow-listed environment, ``SSH_AUTH_SOCK``
    and *env*; its stderr is relayed to ours).

    Guarantee: the families the server announced are served through the connection;
    every other family is :class:`~flux_system.port.Unserved`. Everything the server
    says about itself is marked ``remotely_reported``; nothing here claims a sandbox or
    a guard the far side did not report. Close the substrate (or use ``with``) to close
    the connection; the server then kills every child this connection spawned.

    Raises:
        UnreachableError: the target could not be reached or stopped answering.
        PortError: ``AUTH`` (bad or missing token), ``PROTOCOL`` (version mismatch,
            not a flux server, bad target).
    """
    channel: Channel
    if isinstance(target, str):
        channel = open_socket_channel(target, ssl_context=ssl_context, timeout=timeout)
        shown = target
    elif isinstance(target, Sequence) and target and all(isinstance(a, str) for a in target):
        from flux_system.remote._stdio import open_stdio_channel

        channel = open_stdio_channel(list(target), env)
        shown = f"stdio:{target[0]}"
    else:
        raise PortError(
            "target must be unix:PATH, tcp://HOST:PORT or a non-empty argv",
            op="connect",
            reason=PortReason.PROTOCOL,
        )
    try:
        client = Client(channel, target=shown, token=token, timeout=timeout)
    except BaseException:
        channel.close()
        raise
    ops = client.operations
    none = Unserved(shown)
    return Substrate(
        files=RemoteFiles(client) if ops >= FILE_OPS else none,
        processes=RemoteProcesses(client) if {"run", "spawn"} <= ops else none,
        http=RemoteHttp(client) if "http_request" in ops else none,
        metrics=RemoteMetrics(client) if "metrics" in ops else none,
        identity=RemoteIdentity(client) if "identity" in ops else none,
        closer=client.close,
    )
