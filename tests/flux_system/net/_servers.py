"""Real servers on loopback for the egress tests: HTTP(S), DNS (UDP+TCP), echo.

Nothing here is a mock: the guard talks to real sockets, a real TLS stack and a real
DNS server built with dnspython. Every server runs in daemon threads, records what
it saw, and is closed by its context manager.
"""

from __future__ import annotations

import contextlib
import http.server
import socket
import socketserver
import ssl
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import dns.exception
import dns.flags
import dns.message
import dns.name
import dns.rcode
import dns.rdatatype
import dns.rrset


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


Route = Callable[["Handler"], None]


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _HTTPServer

    def _dispatch(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        path = self.path.split("?", 1)[0]
        self.server.owner.seen.append(
            Seen(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body)
        )
        route = self.server.owner.routes.get(path)
        if route is None:
            self.reply(404, b"no route")
        else:
            route(self)

    do_GET = do_POST = do_HEAD = do_PUT = do_PATCH = do_DELETE = _dispatch

    def reply(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


class _HTTPServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    owner: LoopbackHTTP

    def handle_error(self, request: object, client_address: object) -> None:
        self.owner.errors += 1

    def server_bind(self) -> None:
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.socket.bind(self.server_address)
        self.server_address = self.socket.getsockname()


class _TLSServer(_HTTPServer):
    tls: ssl.SSLContext

    def get_request(self) -> tuple[socket.socket, object]:
        sock, addr = self.socket.accept()
        return self.tls.wrap_socket(sock, server_side=True), addr


@dataclass
class LoopbackHTTP:
    """An HTTP/1.1 server on *host* (a loopback address), port chosen by the kernel."""

    host: str = "127.0.0.1"
    port: int = 0
    routes: dict[str, Route] = field(default_factory=dict)
    seen: list[Seen] = field(default_factory=list)
    errors: int = 0
    tls: ssl.SSLContext | None = None
    sni: list[str | None] = field(default_factory=list)

    def __enter__(self) -> LoopbackHTTP:
        base = _HTTPServer if self.tls is None else _TLSServer
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        cls = type("_Server", (base,), {"address_family": family})
        self._server = cls((self.host, self.port), Handler)
        self._server.owner = self
        if self.tls is not None:
            assert isinstance(self._server, _TLSServer)

            def record(sslobj: ssl.SSLObject, name: str | None, ctx: ssl.SSLContext) -> None:
                self.sni.append(name)

            self.tls.sni_callback = record
            self._server.tls = self.tls
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def paths(self) -> list[str]:
        return [s.path for s in self.seen]


def http_server_on(host: str, port: int, **routes: Route) -> LoopbackHTTP:
    """An HTTP server bound to *host*:*port* (``port=0``: any)."""
    return LoopbackHTTP(host=host, port=port, routes=dict(routes))


def free_port_on(hosts: list[str]) -> int:
    """A TCP port free on every address in *hosts* (bind-tested, then released)."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind((hosts[0], 0))
            port = int(probe.getsockname()[1])
        ok = True
        for h in hosts[1:]:
            with socket.socket() as s:
                try:
                    s.bind((h, port))
                except OSError:
                    ok = False
                    break
        if ok:
            return port
    raise RuntimeError("no common free port")


# --------------------------------------------------------------------------- DNS


@dataclass
class DnsLog:
    name: str
    rdtype: str
    transport: str


class FlipDnsServer:
    """A DNS server (UDP and TCP on one loopback port) whose answers flip.

    The first query for a (name, type) is answered from *first*, every later one from
    *then*; :meth:`answer_with` replaces both for every later query. Address records
    carry *ttl* (default 0), CNAME records *cname_ttl* (default: *ttl*). ``cname`` maps
    a name to its CNAME target (answered with the chain). Unknown names get NXDOMAIN.
    With *soa_minimum*, every negative answer (NXDOMAIN, or no record of the asked
    type) carries the SOA of *zone* in its authority section (RFC 2308), with
    *soa_minimum* as both the SOA record's TTL and its MINIMUM field. *on_query* is
    called before each answer is sent. ``log`` records queries.
    """

    def __init__(
        self,
        first: dict[str, list[str]],
        then: dict[str, list[str]] | None = None,
        cname: dict[str, str] | None = None,
        delay: float = 0.0,
        *,
        ttl: int = 0,
        cname_ttl: int | None = None,
        soa_minimum: int | None = None,
        zone: str = "flux.example",
        on_query: Callable[[], None] | None = None,
    ) -> None:
        self.delay = delay  # seconds before each answer (a slow resolver)
        self.first = first
        self.then = first if then is None else then
        self.cname = cname or {}
        self.ttl = ttl
        self.cname_ttl = ttl if cname_ttl is None else cname_ttl
        self.soa_minimum = soa_minimum
        self.zone = zone
        self.on_query = on_query  # called before each answer (e.g. to move a test clock)
        self.log: list[DnsLog] = []
        self._asked: set[tuple[str, str]] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()

    def answer_with(self, table: dict[str, list[str]]) -> None:
        """From now on, answer every query from *table* (the server "changes its answer")."""
        with self._lock:
            self.first = self.then = table

    def __enter__(self) -> FlipDnsServer:
        for _ in range(50):
            udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            udp.bind(("127.0.0.1", 0))
            port = udp.getsockname()[1]
            tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                tcp.bind(("127.0.0.1", port))
            except OSError:
                udp.close()
                tcp.close()
                continue
            break
        else:
            raise RuntimeError("no free UDP+TCP port pair")
        tcp.listen(8)
        udp.settimeout(0.05)
        tcp.settimeout(0.05)
        self.port = port
        self._udp, self._tcp = udp, tcp
        self._threads = [
            threading.Thread(target=self._serve_udp, daemon=True),
            threading.Thread(target=self._serve_tcp, daemon=True),
        ]
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(5)
        self._udp.close()
        self._tcp.close()

    def queries(self) -> list[tuple[str, str]]:
        return [(e.name, e.rdtype) for e in self.log]

    def _answer(self, wire: bytes, transport: str) -> bytes:
        query = dns.message.from_wire(wire)
        response = dns.message.make_response(query)
        question = query.question[0]
        name = question.name.to_text().rstrip(".").lower()
        rdtype = dns.rdatatype.to_text(question.rdtype)
        with self._lock:
            self.log.append(DnsLog(name, rdtype, transport))
            if self.on_query is not None:
                self.on_query()
            key = (name, rdtype)
            table = self.then if key in self._asked else self.first
            self._asked.add(key)
        owner = question.name
        target = name
        hops = 0
        while target in self.cname and hops < 8:
            nxt = self.cname[target]
            response.answer.append(
                dns.rrset.from_text(owner, self.cname_ttl, "IN", "CNAME", nxt + ".")
            )
            owner = dns.name.from_text(nxt)
            target = nxt
            hops += 1
        if target not in self.first and target not in self.then:
            response.set_rcode(dns.rcode.NXDOMAIN)
            self._add_soa(response)
            return response.to_wire()
        wanted = 4 if rdtype == "A" else 6
        addresses = [a for a in table.get(target, []) if (":" in a) == (wanted == 6)]
        if addresses and rdtype in ("A", "AAAA"):
            response.answer.append(
                dns.rrset.from_text_list(owner, self.ttl, "IN", rdtype, addresses)
            )
        else:
            self._add_soa(response)
        if transport == "udp":
            try:
                return response.to_wire(max_size=512)  # RFC 1035 UDP limit (no EDNS here)
            except dns.exception.TooBig:
                response.answer.clear()
                response.flags |= dns.flags.TC  # the client must retry over TCP
        return response.to_wire()

    def _add_soa(self, response: dns.message.Message) -> None:
        if self.soa_minimum is None:
            return
        minimum = self.soa_minimum
        soa = f"ns.{self.zone}. hostmaster.{self.zone}. 1 3600 600 86400 {minimum}"
        response.authority.append(dns.rrset.from_text(self.zone + ".", minimum, "IN", "SOA", soa))

    def _serve_udp(self) -> None:
        while not self._stop.is_set():
            try:
                wire, peer = self._udp.recvfrom(4096)
            except (TimeoutError, OSError):
                continue
            with contextlib.suppress(Exception):
                reply = self._answer(wire, "udp")
                if self.delay:
                    time.sleep(self.delay)
                self._udp.sendto(reply, peer)

    def _serve_tcp(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._tcp.accept()
            except (TimeoutError, OSError):
                continue
            with conn, contextlib.suppress(Exception):
                conn.settimeout(2)
                (length,) = struct.unpack("!H", _recv_exact(conn, 2))
                reply = self._answer(_recv_exact(conn, length), "tcp")
                conn.sendall(struct.pack("!H", len(reply)) + reply)


def _recv_exact(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise ConnectionError("short read")
        data += chunk
    return data


@contextlib.contextmanager
def tcp_echo(host: str = "127.0.0.1") -> Iterator[int]:
    """A one-shot-per-connection TCP echo server; yields its port."""
    srv = socket.socket()
    srv.bind((host, 0))
    srv.listen(4)
    srv.settimeout(0.05)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except (TimeoutError, OSError):
                continue
            with conn, contextlib.suppress(OSError):
                conn.settimeout(2)
                conn.sendall(conn.recv(1024))

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        yield int(srv.getsockname()[1])
    finally:
        stop.set()
        t.join(5)
        srv.close()
