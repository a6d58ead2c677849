"""``flux serve`` — serve this host's workspace, processes and egress over the port protocol.

``flux serve (--listen unix:PATH | --listen tcp://HOST:PORT | --stdio) --workspace DIR
[--sandbox off|on|require] [--profile P] [--backend ...] [--net none|proxy|host]
[--token-env VAR | --token-file F] [--tls-cert F --tls-key F] [--allow-host H]
[--allow-private CIDR]`` — the sandbox options are ``flux exec``'s, with the same
default (``--sandbox require --profile default``).
The server enforces its own workspace, sandbox and egress grants: a client widens none
of them. TCP off loopback needs TLS and a token; a token is read from an environment
variable or a 0600 file, never from argv. One line per connection is logged to stderr.
See ports/PROTOCOL.md and docs/remote.md.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from typing import Any

__all__ = ["EXIT_CODES", "register"]

EXIT_ERROR = 125

EXIT_CODES = """exit codes (flux serve):
  0      stopped by SIGINT or SIGTERM after serving
  2      usage error
  125    cannot serve: workspace, listener, token, TLS or sandbox (the reason is printed)"""


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="serve a workspace over the port protocol",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument(
        "--listen", metavar="unix:PATH|tcp://HOST:PORT", help="where to listen for clients"
    )
    where.add_argument(
        "--stdio", action="store_true", help="serve one client over stdin/stdout (ssh)"
    )
    parser.add_argument("--workspace", required=True, metavar="DIR", help="the root served")
    token = parser.add_mutually_exclusive_group()
    token.add_argument("--token-env", metavar="VAR", help="read the bearer token from $VAR")
    token.add_argument(
        "--token-file", metavar="FILE", help="read the bearer token from FILE (0600)"
    )
    parser.add_argument("--tls-cert", metavar="FILE", help="TLS certificate chain (PEM)")
    parser.add_argument("--tls-key", metavar="FILE", help="TLS private key (PEM)")
    from flux_runtime.cli._sandbox_opts import add_sandbox_options

    # The sandbox of the processes served; --allow-host / --allow-private also grant the
    # served HTTP requests (none by default: no egress).
    add_sandbox_options(parser)
    parser.set_defaults(func=_serve)


def _fail(message: str) -> int:
    print(f"flux serve: {message}", file=sys.stderr)
    return EXIT_ERROR


def _system(args: argparse.Namespace, ws: Any) -> tuple[Any, tuple[str, ...]]:
    """The System whose processes are served, confined as asked, and its active layers."""
    from flux_system import System

    if args.sandbox == "off":
        return System(ws), ()
    from flux_runtime.cli import _serve_sandbox

    return _serve_sandbox.confined_system(args, ws)


def _serve(args: argparse.Namespace) -> int:
    from flux_system import FluxSystemError, Workspace
    from flux_system.remote import (
        PortServer,
        ServerConfig,
        server_tls_context,
        token_from_env,
        token_from_file,
    )

    try:
        token = None
        if args.token_env:
            token = token_from_env(args.token_env)
        elif args.token_file:
            token = token_from_file(args.token_file)
        if bool(args.tls_cert) != bool(args.tls_key):
            return _fail("--tls-cert and --tls-key go together")
        tls = server_tls_context(args.tls_cert, args.tls_key) if args.tls_cert else None
        ws = Workspace(os.path.abspath(args.workspace))
    except FluxSystemError as exc:
        return _fail(str(exc))
    from flux_runtime.cli._sandbox_opts import SandboxRefused

    try:
        system, layers = _system(args, ws)
    except (FluxSystemError, SandboxRefused) as exc:
        ws.close()
        return _fail(f"{exc} (see flux doctor)")
    http = None
    if args.allow_host or args.allow_private:
        from flux_runtime._builtins_system import HTTP_BODY_CAP
        from flux_system.net import PrivateNetAllow, RequestLimits, guarded_client
        from flux_system.port import GuardedHttp

        grants = PrivateNetAllow(hosts=tuple(args.allow_host), cidrs=tuple(args.allow_private))
        # The cap keeps a body inside one reply frame (base64: 4/3 of it, under 8 MiB).
        limits = RequestLimits(max_body=HTTP_BODY_CAP)
        # No redirect followed: the client's policy decides on each host (a new request).
        http = GuardedHttp(guarded_client(allow=grants, limits=limits, follow_redirects=False))
    from flux_system.port import local_identity

    config = ServerConfig(
        ws, system=system, http=http, token=token, identity=local_identity(layers)
    )
    server = PortServer(config)
    stop = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stop.set()
        server.close()

    try:
        if args.stdio:
            server.serve_stdio()
            return 0
        signal.signal(signal.SIGINT, on_signal)
        signal.signal(signal.SIGTERM, on_signal)
        listen: str = args.listen
        if listen.startswith("unix:"):
            server.start_unix(listen[len("unix:") :])
        elif listen.startswith("tcp://"):
            from urllib.parse import urlsplit

            parts = urlsplit(listen)
            if parts.hostname is None or parts.port is None:
                return _fail(f"--listen {listen!r}: expected tcp://HOST:PORT")
            server.start_tcp(parts.hostname, parts.port, ssl_context=tls)
        else:
            return _fail(f"--listen {listen!r}: expected unix:PATH or tcp://HOST:PORT")
        print(
            f"flux serve: listening on {server.address} (workspace {ws.root})",
            file=sys.stderr,
            flush=True,
        )
        while not stop.wait(3600):
            pass
        return 0
    except FluxSystemError as exc:
        return _fail(str(exc))
    except OSError as exc:
        return _fail(f"cannot listen on {args.listen}: {exc.strerror or exc}")
    finally:
        server.close()
        system.close()
        ws.close()
