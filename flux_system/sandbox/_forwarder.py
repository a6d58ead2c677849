"""The in-sandbox forwarder of network mode ``proxy``: 127.0.0.1:PORT → the proxy socket.

An unprivileged host process cannot put a socket into the sandbox's network
namespace, and the namespace holds nothing but ``lo``. So the launcher starts this
forwarder inside it before the command (``_launcher.start_forwarder``): it listens on
``127.0.0.1:FORWARDER_PORT`` and carries each connection, byte for byte, to the host
proxy's Unix socket bound in at :data:`SANDBOX_SOCKET`. It decides nothing — every
decision is the host proxy's — and it dies with the sandbox's process tree (it lives
in the sandbox's pid namespace, whose init takes it down).

This module creates no process: the launcher forks, then calls :func:`serve`. Like
the launcher it imports nothing from flux, so it can be loaded by file path inside the
sandbox; its one sibling, ``_proxy_relay.py`` (standard library only), is loaded the
same way when the package is not importable there.
"""

from __future__ import annotations

import contextlib
import errno
import importlib.util
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any, Final

__all__ = [
    "FORWARDER_PORT",
    "SANDBOX_SOCKET",
    "bind_listener",
    "open_lifeline",
    "preload",
    "proxy_environment",
    "serve",
]

#: The port the forwarder listens on inside the sandbox (its netns is private: no clash).
FORWARDER_PORT: Final = 3128
#: Where the host proxy's socket is bound inside the sandbox.
SANDBOX_SOCKET: Final = "/run/flux-proxy/egress.sock"
_MAX_CONNECTIONS: Final = 64  # concurrent relays; the host proxy bounds them again
_IDLE_TIMEOUT: Final = 600.0  # generous: the host proxy's idle timeout is the real bound
_PROXY_VARS: Final = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")
_FATAL: Final = frozenset({errno.EBADF, errno.EINVAL, errno.ENOTSOCK})


_LOADED: list[Callable[..., None]] = []  # the relay, once loaded


def _relay() -> Callable[..., None]:
    """``_proxy_relay.relay``: from the package when importable, else the sibling file.

    Loaded once (a launcher that starts the forwarder after restricting itself calls
    :func:`preload` first: Landlock may forbid reading the file afterwards).
    """
    if _LOADED:
        return _LOADED[0]
    try:
        from flux_system.sandbox import _proxy_relay

        _LOADED.append(_proxy_relay.relay)
        return _LOADED[0]
    except ImportError:
        pass
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_proxy_relay.py")
    spec = importlib.util.spec_from_file_location("_flux_proxy_relay", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module: Any = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    _LOADED.append(module.relay)
    return _LOADED[0]


def preload() -> None:
    """Load everything :func:`serve` needs now, before the launcher restricts itself."""
    _relay()


def proxy_environment(port: int = FORWARDER_PORT) -> dict[str, str]:
    """The variables that send the command's HTTP(S) clients to the forwarder.

    Upper- and lower-case forms (curl reads only ``http_proxy`` lower-case), and
    ``NO_PROXY``/``no_proxy`` empty so nothing bypasses it (a bypass has no route
    anyway: the namespace holds only ``lo``).
    """
    url = f"http://127.0.0.1:{port}"
    env = {name: url for name in _PROXY_VARS}
    env.update({name.lower(): url for name in _PROXY_VARS})
    env["NO_PROXY"] = env["no_proxy"] = ""
    return env


def bind_listener(port: int = FORWARDER_PORT) -> socket.socket:
    """Bind and listen on ``127.0.0.1:port`` (before the command starts: no race).

    Raises:
        OSError: the port cannot be bound (the launcher reports it and stops).
    """
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen(128)
    except BaseException:
        listener.close()
        raise
    return listener


def _carry(
    client: socket.socket,
    upstream_path: str,
    slots: threading.Semaphore,
    relay: Callable[..., None],
) -> None:
    try:
        with client, socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as upstream:
            upstream.connect(upstream_path)
            relay(client, upstream, idle_timeout=_IDLE_TIMEOUT)
    except OSError:
        pass  # the proxy is gone or refused: the client sees its connection close
    finally:
        slots.release()


def open_lifeline(upstream_path: str = SANDBOX_SOCKET) -> socket.socket:
    """Connect the run's lifeline to the proxy (the launcher does, before the command).

    The proxy closes itself when this connection ends: the forwarder holds it, and the
    kernel closes it when the sandbox's pid namespace goes, however the run ended.

    Raises:
        OSError: the proxy socket cannot be reached.
    """
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(10)
        sock.connect(upstream_path)
        sock.sendall(b"LIFELINE flux HTTP/1.1\r\n\r\n")
    except BaseException:
        sock.close()
        raise
    return sock


def serve(
    listener: socket.socket,
    upstream_path: str = SANDBOX_SOCKET,
    lifeline: socket.socket | None = None,
) -> None:
    """Accept on *listener*, carrying each connection to *upstream_path*.

    Guarantee: at most :data:`_MAX_CONNECTIONS` connections carried at once (more
    wait in the listen backlog); bytes are relayed unchanged in both directions.
    Returns only when the listener itself is unusable; otherwise the forwarder ends
    when its pid namespace does. *lifeline* (from :func:`open_lifeline`) is held open
    for as long as this process lives.
    """
    relay = _relay()
    held = [lifeline]  # noqa: F841 - kept referenced (and so open) until the process ends
    slots = threading.BoundedSemaphore(_MAX_CONNECTIONS)
    while True:
        slots.acquire()
        try:
            client, _ = listener.accept()
        except OSError as exc:
            slots.release()
            if exc.errno in _FATAL:
                return
            time.sleep(0.05)  # out of descriptors or a transient error: do not spin
            continue
        thread = threading.Thread(
            target=_carry, args=(client, upstream_path, slots, relay), daemon=True
        )
        try:
            thread.start()
        except RuntimeError:  # cannot start a thread (limits): drop this one
            with contextlib.suppress(OSError):
                client.close()
            slots.release()
