"""A real TLS server on loopback (trustme CA), reached through an explicit grant.

SNI and certificate verification use the guarded hostname, never the pinned IP; a
certificate for another name fails.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import trustme

from flux_system import EgressDeniedError, EgressReason
from flux_system.net import (
    PrivateNetAllow,
    StaticResolver,
    dial_tcp,
    guarded_async_client,
    guarded_client,
)
from tests.flux_system.net._servers import Handler, LoopbackHTTP

GRANT = PrivateNetAllow(hosts=["localhost", "*.localhost"], cidrs=["127.0.0.0/8"])
PINNED = StaticResolver(
    {
        "localhost": ["127.0.0.1"],
        "wrong.localhost": ["127.0.0.1"],
        "api.flux.example": ["127.0.0.1"],
    }
)


def _hello(h: Handler) -> None:
    h.reply(200, b"tls ok")


def _to_plain(h: Handler) -> None:
    h.reply(302, headers={"Location": f"http://localhost:{h.server.owner.port}/"})


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def server(ca: trustme.CA) -> Iterator[LoopbackHTTP]:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost", "api.flux.example").configure_cert(ctx)
    with LoopbackHTTP(tls=ctx, routes={"/": _hello, "/plain": _to_plain}) as srv:
        yield srv


def _causes(exc: BaseException) -> list[BaseException]:
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and len(chain) < 10:
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


def _client_ctx(ca: trustme.CA) -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ca.configure_trust(ctx)
    return ctx


@pytest.mark.parametrize("name", ["localhost", "api.flux.example"])
def test_sni_and_certificate_use_the_hostname(
    ca: trustme.CA, server: LoopbackHTTP, name: str
) -> None:
    client = guarded_client(
        allow=GRANT, resolver=PINNED, ports=[server.port], verify=_client_ctx(ca)
    )
    with client:
        response = client.get(f"https://{name}:{server.port}/")
    assert response.status_code == 200 and response.text == "tls ok"
    assert server.sni == [name]
    assert server.seen[0].headers["host"] == f"{name}:{server.port}"


def test_wrong_hostname_fails_verification(ca: trustme.CA, server: LoopbackHTTP) -> None:
    client = guarded_client(
        allow=GRANT, resolver=PINNED, ports=[server.port], verify=_client_ctx(ca)
    )
    with client, pytest.raises(httpx.ConnectError) as info:
        client.get(f"https://wrong.localhost:{server.port}/")
    assert any(isinstance(e, ssl.SSLCertVerificationError) for e in _causes(info.value))
    assert server.sni == ["wrong.localhost"]  # the name, not 127.0.0.1, went out as SNI
    assert server.seen == []


def test_ip_literal_is_not_a_hostname_for_the_certificate(
    ca: trustme.CA, server: LoopbackHTTP
) -> None:
    client = guarded_client(allow=GRANT, ports=[server.port], verify=_client_ctx(ca))
    with client, pytest.raises(httpx.ConnectError):
        client.get(f"https://127.0.0.1:{server.port}/")
    assert server.seen == []


def test_untrusted_ca_fails(server: LoopbackHTTP) -> None:
    # Default trust (certifi) does not know the test CA: fail, never fall back.
    with guarded_client(allow=GRANT, resolver=PINNED, ports=[server.port]) as client:
        with pytest.raises(httpx.ConnectError) as info:
            client.get(f"https://localhost:{server.port}/")
    assert any(isinstance(e, ssl.SSLCertVerificationError) for e in _causes(info.value))


def test_https_to_http_redirect_is_refused(ca: trustme.CA, server: LoopbackHTTP) -> None:
    client = guarded_client(
        allow=GRANT, resolver=PINNED, ports=[server.port], verify=_client_ctx(ca)
    )
    with client, pytest.raises(EgressDeniedError) as info:
        client.get(f"https://localhost:{server.port}/plain")
    assert info.value.reason is EgressReason.REDIRECT
    assert [s.path for s in server.seen] == ["/plain"]


def test_verification_cannot_be_turned_off() -> None:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    with pytest.raises(ValueError, match="verify"):
        guarded_client(verify=ctx)
    ctx.verify_mode = ssl.CERT_NONE
    with pytest.raises(ValueError, match="verify"):
        guarded_client(verify=ctx)


def test_async_client_same_tls_guarantees(ca: trustme.CA, server: LoopbackHTTP) -> None:
    import anyio

    async def main() -> tuple[int, str]:
        client = guarded_async_client(
            allow=GRANT, resolver=PINNED, ports=[server.port], verify=_client_ctx(ca)
        )
        async with client:
            response = await client.get(f"https://api.flux.example:{server.port}/")
            with pytest.raises(httpx.ConnectError):
                await client.get(f"https://wrong.localhost:{server.port}/")
        return response.status_code, response.text

    assert anyio.run(main) == (200, "tls ok")
    assert server.sni == ["api.flux.example", "wrong.localhost"]


def test_dial_tcp_then_tls_with_the_hostname(ca: trustme.CA, server: LoopbackHTTP) -> None:
    sock = dial_tcp("localhost", server.port, allow=GRANT, resolver=PINNED, ports=[server.port])
    with _client_ctx(ca).wrap_socket(sock, server_hostname="localhost") as tls:
        tls.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        data = b""
        while chunk := tls.recv(4096):
            data += chunk
    assert data.startswith(b"HTTP/1.1 200") and data.endswith(b"tls ok")


def test_default_context_ignores_sslkeylogfile(
    server: LoopbackHTTP, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CPython's default context writes TLS secrets to the file SSLKEYLOGFILE names; the
    guarded client's default context takes nothing from the environment, so a real
    handshake (here failing verification: certifi does not trust the test CA, after the
    handshake secrets exist) leaves no key log."""
    keylog = tmp_path / "keys.log"
    monkeypatch.setenv("SSLKEYLOGFILE", str(keylog))
    assert ssl.create_default_context().keylog_filename == str(keylog)  # the hazard
    with (
        guarded_client(allow=GRANT, resolver=PINNED, ports=[server.port]) as client,
        pytest.raises(httpx.HTTPError),
    ):
        client.get(f"https://localhost:{server.port}/")
    # (setting the variable alone makes the default context create the file with a
    # comment header; no secret may follow)
    written = keylog.read_text().splitlines() if keylog.exists() else []
    assert [line for line in written if not line.startswith("#")] == []
