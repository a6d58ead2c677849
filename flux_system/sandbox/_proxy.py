"""The host-side egress proxy of network mode ``proxy``: :class:`EgressProxy`.

An HTTP/1.x proxy listening on a Unix socket (the only way out of a sandbox whose
netns holds nothing but ``lo``; the in-sandbox forwarder carries TCP to it). Every
request — ``CONNECT host:port`` and plain-HTTP absolute-form alike — is decided by the
egress guard of :mod:`flux_system.net` and connected with its :func:`dial_tcp`: one
resolution on the host, every answer classified, a connection only to a vetted
address. Decision record: docs/decisions/0087-sandbox-egress-proxy.md.
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct
import tempfile
import threading
from collections.abc import Collection
from typing import Final, final

from flux_system._exceptions import (
    EgressDeniedError,
    EgressReason,
    SandboxReason,
    SandboxUnavailableError,
)
from flux_system.net import EgressPolicy, PrivateNetAllow, Resolver, dial_tcp
from flux_system.net._url import parse_url
from flux_system.sandbox._proxy_head import (
    FRAMING,
    HeadError,
    RequestHead,
    answer,
    authority_of,
    connection_names,
    origin_head,
    parse_head,
    read_head,
    split_authority,
)
from flux_system.sandbox._proxy_relay import relay
from flux_system.sandbox._proxy_values import LIFELINE, MAX_DENIALS, ProxyDenial, ProxySettings

__all__ = ["LIFELINE", "MAX_DENIALS", "EgressProxy", "ProxyDenial", "ProxySettings"]

_MAX_CONNECTIONS: Final = 1024  # the ceiling a caller may configure
_CLOSE_WAIT: Final = 10.0  # seconds close() waits for each thread (and for a close under way)


@final
class EgressProxy:
    """An egress-guarded HTTP/HTTPS proxy on a private Unix socket.

    ``start()`` (or ``with``) binds ``socket_path`` in a fresh 0700 directory; the
    sandbox gets that socket bound in. ``close()`` stops accepting, ends every live
    connection, joins the threads and removes the socket and its directory.

    Guarantee: a destination is reached only when the egress guard accepted it with
    this proxy's allow-list (an :class:`EgressPolicy` of ``allow_hosts``), grants
    (``PrivateNetAllow(hosts=allow_hosts, cidrs=allow_private)``), ports and
    resolver — name resolved once, here, every answer classified, the connection made
    only to a vetted address (:func:`dial_tcp`). Plain HTTP is held to the same rules
    as CONNECT, its ``Host`` header rewritten to the vetted URL's authority. Each
    refusal answers with a status and an ``X-Flux-Denied`` reason and is recorded
    (:meth:`denials`, at most :data:`MAX_DENIALS`). Only peers with this process's
    uid are served. Bounded: head bytes and fields, head-read time, concurrent
    connections, idle time per connection.
    Not guaranteed: anything about the bytes inside a CONNECT tunnel (TLS is the
    client's and server's business); HTTP keep-alive (one request per plain-HTTP
    connection: upstream is asked to close, and nothing the client sends after the
    declared body is forwarded, so a second request cannot ride along to the vetted
    host with another ``Host``); chunked request bodies on plain HTTP (refused: use
    HTTPS, i.e. CONNECT), and so is a ``Connection`` header naming ``Content-Length``
    or ``Transfer-Encoding`` (dropping that header would leave the body unframed).

    Raises (constructor): TypeError, ValueError for bad settings.
    """

    def __init__(self, settings: ProxySettings, *, resolver: Resolver | None = None) -> None:
        if not isinstance(settings, ProxySettings):
            raise TypeError(f"settings must be ProxySettings, not {type(settings).__name__}")
        if not 1 <= settings.max_connections <= _MAX_CONNECTIONS:
            raise ValueError(f"max_connections must be in 1..{_MAX_CONNECTIONS}")
        for name in ("idle_timeout", "head_timeout", "connect_timeout", "lifeline_deadline"):
            value = getattr(settings, name)
            if value is None and name == "lifeline_deadline":
                continue
            if not isinstance(value, int | float) or not 0 < value <= 86400:
                raise ValueError(f"{name} must be a positive number of seconds")
        if not 1024 <= settings.max_head_bytes <= 1 << 20:
            raise ValueError("max_head_bytes must be in 1024..1 MiB")
        self._settings = settings
        self._policy = EgressPolicy(allow_hosts=settings.allow_hosts)
        self._allow = PrivateNetAllow(hosts=settings.allow_hosts, cidrs=settings.allow_private)
        self._ports: Collection[int] | None = settings.ports
        self._resolver = resolver
        self._lock = threading.Lock()
        self._denials: list[ProxyDenial] = []
        self._dropped = 0
        self._live: set[socket.socket] = set()
        self._threads: set[threading.Thread] = set()
        self._slots = threading.BoundedSemaphore(settings.max_connections)
        self._listener: socket.socket | None = None
        self._acceptor: threading.Thread | None = None
        self._dir: str | None = None
        self._closed = False
        self._lifeline = False  # one lifeline per proxy: the launcher's, sent first
        self._close_done = threading.Event()
        self._closer: threading.Thread | None = None
        self._deadline: threading.Timer | None = None

    # -- lifetime ---------------------------------------------------------------------

    @property
    def socket_path(self) -> str:
        """The host path of the listening socket (after :meth:`start`)."""
        if self._dir is None:
            raise RuntimeError("EgressProxy.socket_path before start()")
        return os.path.join(self._dir, "proxy.sock")

    def start(self) -> EgressProxy:
        """Bind the socket and start accepting. Idempotent until :meth:`close`.

        Raises:
            SandboxUnavailableError: layer ``proxy`` (the socket could not be made).
        """
        with self._lock:
            if self._closed:
                raise RuntimeError("EgressProxy is closed")
            if self._listener is not None:
                return self
            try:
                self._dir = tempfile.mkdtemp(prefix="flux-proxy-")
                listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    listener.bind(self.socket_path)
                    listener.listen(128)
                except BaseException:
                    listener.close()
                    raise
            except OSError as exc:
                self._remove_dir()
                raise SandboxUnavailableError(
                    f"egress proxy: cannot listen ({exc.strerror})",
                    op="proxy.start",
                    layer="proxy",
                    reason=SandboxReason.LAYER_UNAVAILABLE,
                ) from exc
            self._listener = listener
            self._acceptor = threading.Thread(
                target=self._accept_loop, name="flux-egress-proxy", daemon=True
            )
            self._acceptor.start()
            if wait := self._settings.lifeline_deadline:
                self._deadline = threading.Timer(wait, self._no_lifeline)
                self._deadline.daemon = True
                self._deadline.start()
        return self

    def _no_lifeline(self) -> None:
        with self._lock:
            if self._lifeline:
                return
        self.close()

    def _hold_lifeline(self, client: socket.socket) -> None:
        """Wait for the launcher's connection to end, then close the whole proxy."""
        with contextlib.suppress(OSError):
            client.settimeout(None)
            while client.recv(4096):
                pass
        threading.Thread(target=self.close, name="flux-egress-proxy-close", daemon=True).start()

    def close(self) -> None:
        """Stop, end every connection, join the threads, remove the socket. Idempotent.

        A call while another close is under way (the lifeline's) returns once that one
        is done, so the socket is gone when any close() returns.
        """
        with self._lock:
            if self._closed:
                wait = True
            else:
                wait = False
                self._closed = True
        if wait:
            if threading.current_thread() is not self._closer:
                self._close_done.wait(_CLOSE_WAIT)
            return
        with self._lock:
            self._closer = threading.current_thread()
            listener, self._listener = self._listener, None
            live = list(self._live)
            deadline, self._deadline = self._deadline, None
        if deadline is not None:
            deadline.cancel()
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)  # wakes accept() on Linux
            listener.close()
        for sock in live:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        if self._acceptor is not None:
            self._acceptor.join(_CLOSE_WAIT)
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            if thread is not threading.current_thread():
                thread.join(_CLOSE_WAIT)
        self._remove_dir()
        self._close_done.set()

    def __enter__(self) -> EgressProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _remove_dir(self) -> None:
        if self._dir is None:
            return
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(self._dir, "proxy.sock"))
        with contextlib.suppress(OSError):
            os.rmdir(self._dir)

    # -- what it refused ----------------------------------------------------------------

    def denials(self) -> tuple[ProxyDenial, ...]:
        """The refusals so far, oldest first (at most :data:`MAX_DENIALS`)."""
        with self._lock:
            return tuple(self._denials)

    @property
    def dropped_denials(self) -> int:
        """Refusals beyond :data:`MAX_DENIALS`, counted but not kept."""
        with self._lock:
            return self._dropped

    def _record(self, denial: ProxyDenial) -> None:
        with self._lock:
            if len(self._denials) < MAX_DENIALS:
                self._denials.append(denial)
            else:
                self._dropped += 1

    def _refuse(self, client: socket.socket, denial: ProxyDenial) -> None:
        self._record(denial)
        with contextlib.suppress(OSError):
            client.settimeout(self._settings.head_timeout)
            client.sendall(answer(denial.status, denial.reason, denial.host))

    # -- serving ------------------------------------------------------------------------

    def _accept_loop(self) -> None:
        listener = self._listener
        assert listener is not None
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # shut down by close()
            if not self._peer_ok(client):
                self._refuse(client, ProxyDenial(None, None, None, "peer", 403))
                client.close()
                continue
            if not self._slots.acquire(blocking=False):
                self._refuse(client, ProxyDenial(None, None, None, "too_many_connections", 503))
                client.close()
                continue
            thread = threading.Thread(target=self._serve, args=(client,), daemon=True)
            with self._lock:
                if self._closed:
                    client.close()
                    self._slots.release()
                    return
                self._live.add(client)
                self._threads.add(thread)
            try:
                thread.start()
            except RuntimeError:  # no thread to be had (limits): refuse this one, go on
                with self._lock:
                    self._live.discard(client)
                    self._threads.discard(thread)
                self._refuse(client, ProxyDenial(None, None, None, "too_many_connections", 503))
                client.close()
                self._slots.release()

    @staticmethod
    def _peer_ok(client: socket.socket) -> bool:
        try:
            creds = client.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
        except OSError:
            return False
        _pid, uid, _gid = struct.unpack("3i", creds)
        return bool(uid == os.geteuid())

    def _serve(self, client: socket.socket) -> None:
        upstream: socket.socket | None = None
        try:
            upstream = self._handle(client)
        except Exception:  # noqa: S110 - one connection's failure never takes the proxy down
            pass
        finally:
            with self._lock:
                self._live.discard(client)
                if upstream is not None:
                    self._live.discard(upstream)
                self._threads.discard(threading.current_thread())
            client.close()
            if upstream is not None:
                upstream.close()
            self._slots.release()

    def _handle(self, client: socket.socket) -> socket.socket | None:
        settings = self._settings
        try:
            raw, rest = read_head(
                client, limit=settings.max_head_bytes, timeout=settings.head_timeout
            )
            head = parse_head(raw)
        except HeadError as exc:
            if exc.reason != "closed":
                self._refuse(client, ProxyDenial(None, None, None, exc.reason, exc.status))
            return None
        if raw + b"\r\n\r\n" == LIFELINE and self._settings.lifeline_deadline is not None:
            with self._lock:
                first, self._lifeline = not self._lifeline, True
            if first:
                self._hold_lifeline(client)
                return None
        if head.method == "CONNECT":
            return self._connect(client, head, rest)
        return self._forward(client, head, rest)

    def _dial(
        self, client: socket.socket, method: str, host: str, port: int
    ) -> socket.socket | None:
        try:
            upstream = dial_tcp(
                host,
                port,
                allow=self._allow,
                resolver=self._resolver,
                ports=self._ports,
                policy=self._policy,
                timeout=self._settings.connect_timeout,
            )
        except EgressDeniedError as exc:
            status = 502 if exc.reason is EgressReason.UNREACHABLE else 403
            name = exc.target or host
            self._refuse(
                client, ProxyDenial(method, name, port, exc.reason.value, status, exc.address)
            )
            return None
        with self._lock:
            if self._closed:
                upstream.close()
                return None
            self._live.add(upstream)
        return upstream

    def _connect(
        self, client: socket.socket, head: RequestHead, rest: bytes
    ) -> socket.socket | None:
        try:
            host, port = split_authority(head.target)
        except HeadError as exc:
            self._refuse(client, ProxyDenial("CONNECT", None, None, exc.reason, exc.status))
            return None
        upstream = self._dial(client, "CONNECT", host, port)
        if upstream is None:
            return None
        try:
            client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        except OSError:
            return upstream
        relay(client, upstream, idle_timeout=self._settings.idle_timeout, to_right=rest)
        return upstream

    def _forward(
        self, client: socket.socket, head: RequestHead, rest: bytes
    ) -> socket.socket | None:
        try:
            url = parse_url(head.target, op="proxy")
        except EgressDeniedError as exc:
            self._refuse(client, ProxyDenial(head.method, exc.target, None, exc.reason.value, 403))
            return None
        host = url.host.host
        if url.scheme != "http":
            self._refuse(
                client, ProxyDenial(head.method, host, url.port, "https_requires_connect", 400)
            )
            return None
        if head.values("transfer-encoding") or connection_names(head) & FRAMING:
            self._refuse(client, ProxyDenial(head.method, host, url.port, "bad_request", 400))
            return None  # unframed bodies are not carried: the body is relayed by length
        lengths = head.values("content-length")
        length = int(lengths[0]) if lengths else 0
        upstream = self._dial(client, head.method, host, url.port)
        if upstream is None:
            return None
        body = rest[:length]
        relay(
            client,
            upstream,
            idle_timeout=self._settings.idle_timeout,
            to_right=origin_head(head, url.target, authority_of(host, url.port)) + body,
            right_budget=length - len(body),
        )
        return upstream
