"""``web.fetch`` through the envelope and a real guarded client on loopback servers."""

from __future__ import annotations

import contextlib
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

from flux_runtime import Call, Context, EnvelopeReason, Outcome, default_catalog, default_policy
from flux_runtime._web import MAX_MARKDOWN, MAX_PARSE, MAX_TITLE, html_to_markdown
from flux_system import Workspace
from flux_system.net import PrivateNetAllow, guarded_client
from flux_system.port import GuardedHttp, Substrate
from tests.flux_runtime._runtime import PERMISSIVE, rig

TOKEN = "tok-0123456789-abcdefgh"
PAGE = f"""<!doctype html><html><head><title>The  Page</title>
<style>body {{ color: red }}</style><script>var leaked = "SCRIPT-TEXT";</script></head>
<body><nav><a href="/">NAV-TEXT</a></nav>
<main><h1>Release notes</h1><p>Version <b>2.1</b> is out; key {TOKEN}.</p>
<div hidden>HIDDEN-TEXT</div><p style="display:none">STYLE-HIDDEN</p>
<ul><li>fast</li><li>safe</li></ul>



<img alt="diagram" src="data:image/png;base64,AAAA"></main>
<footer>FOOTER-TEXT</footer></body></html>"""
HUGE = "<html><body>" + ("<p>" + "word " * 200 + "</p>\n") * (MAX_PARSE // 1000 + 200)


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    hits: list[str]
    redirect_to: str


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        self.server.hits.append(self.path)
        routes: dict[str, tuple[str | None, bytes]] = {
            "/page": ("text/html; charset=utf-8", PAGE.encode()),
            "/latin": ("text/html; charset=iso-8859-1", "<p>caf\xe9</p>".encode("latin-1")),
            "/text": ("text/plain", f"plain {TOKEN}\n".encode()),
            "/json": ("application/problem+json", b'{"a": 1}'),
            "/png": ("image/png", b"\x89PNG\r\n\x1a\n" + bytes(64)),
            "/untyped": (None, b"\x00\x01\x02binary"),
            "/huge": ("text/html", HUGE.encode()),
        }
        if self.path == "/redirect":
            self.send_response(302)
            self.send_header("location", self.server.redirect_to)
            self.send_header("content-length", "0")
            self.end_headers()
            return
        kind, body = routes.get(self.path, ("text/plain", b"here"))
        self.send_response(200)
        if kind is not None:
            self.send_header("content-type", kind)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def server(host: str = "127.0.0.1") -> Iterator[_Server]:
    srv = _Server((host, 0), _Handler)
    srv.hits, srv.redirect_to = [], ""
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(timeout=10)


def _fetch(
    tmp_path: Path, url: str, ports: list[int], cidrs: list[str], **extra: object
) -> tuple[Outcome, bytes]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    client = guarded_client(allow=PrivateNetAllow(cidrs=cidrs), ports=ports)
    ws = Workspace(tmp_path)
    sub = Substrate.native(ws, http=GuardedHttp(client))
    try:
        with rig(tmp_path, policy=PERMISSIVE, substrate=sub) as r:
            r.redactor.register(TOKEN, name="tok")
            out = r.executor.dispatch(Call("web.fetch", {"url": url, **extra}), Context("s", "a"))
            return out, r.log_path.read_bytes()
    finally:
        client.close()
        ws.close()


def test_html_becomes_condensed_markdown_without_noise(tmp_path: Path) -> None:
    with server() as srv:
        port = srv.server_address[1]
        out, _ = _fetch(tmp_path, f"http://127.0.0.1:{port}/page", [port], ["127.0.0.1/32"])
    assert out.ok, out.error
    c = out.content
    assert c["format"] == "markdown" and c["content_type"] == "text/html"
    assert c["title"] == "The Page" and c["truncated"] is False and c["truncated_at"] == []
    text = c["text"]
    assert text.startswith("# Release notes") and "**2.1**" in text
    assert "- fast\n- safe" in text and "diagram" in text and "data:image" not in text
    for noise in ("SCRIPT-TEXT", "NAV-TEXT", "HIDDEN-TEXT", "STYLE-HIDDEN", "FOOTER-TEXT"):
        assert noise not in text and noise not in out.view
    assert "\n\n\n" not in text
    assert text in out.view and "HTTP 200" in out.view


def test_a_secret_in_the_page_is_redacted_in_both_faces_and_the_evidence(tmp_path: Path) -> None:
    with server() as srv:
        port = srv.server_address[1]
        for path in ("/page", "/text"):
            out, evidence = _fetch(
                tmp_path / path[1:], f"http://127.0.0.1:{port}{path}", [port], ["127.0.0.1/32"]
            )
            assert out.ok, out.error
            assert TOKEN not in out.content["text"] and TOKEN not in out.view
            assert TOKEN.encode() not in evidence
            assert "[redacted]" in out.content["text"] and "[redacted]" in out.view
    # positive control: the page really carried the secret
    assert TOKEN in PAGE and srv.hits == ["/page", "/text"]


def test_a_redirect_to_a_refused_address_fails_the_fetch(tmp_path: Path) -> None:
    with server() as front, server("127.0.0.2") as inner:
        fport, iport = front.server_address[1], inner.server_address[1]
        front.redirect_to = f"http://127.0.0.2:{iport}/page"
        url = f"http://127.0.0.1:{fport}/redirect"
        out, evidence = _fetch(tmp_path / "refused", url, [fport, iport], ["127.0.0.1/32"])
        assert not out.ok and out.reason is EnvelopeReason.OPERATION_FAILED
        assert "Egress" in (out.error or "")
        assert front.hits == ["/redirect"] and inner.hits == []
        assert b'"ok":false' in evidence
        # positive control: granted, the same redirect is followed to the inner server
        out, _ = _fetch(tmp_path / "granted", url, [fport, iport], ["127.0.0.0/8"])
        assert out.ok and inner.hits == ["/page"]
        assert out.content["url"].startswith("http://127.0.0.2")


def test_a_redirect_to_the_metadata_address_is_refused_even_with_loopback_granted(
    tmp_path: Path,
) -> None:
    with server() as front:
        port = front.server_address[1]
        front.redirect_to = f"http://169.254.169.254:{port}/latest/meta-data/"
        url = f"http://127.0.0.1:{port}/redirect"
        out, _ = _fetch(tmp_path, url, [port], ["127.0.0.0/8"])
        assert front.hits == ["/redirect"]  # the first hop was made
        assert not out.ok and out.reason is EnvelopeReason.OPERATION_FAILED
        assert "Egress" in (out.error or "") and "169.254.169.254" in (out.error or "")


def test_a_huge_page_is_cut_and_flagged(tmp_path: Path) -> None:
    assert len(HUGE.encode()) > MAX_PARSE
    with server() as srv:
        port = srv.server_address[1]
        out, _ = _fetch(tmp_path, f"http://127.0.0.1:{port}/huge", [port], ["127.0.0.1/32"])
        small, _ = _fetch(
            tmp_path / "small",
            f"http://127.0.0.1:{port}/huge",
            [port],
            ["127.0.0.1/32"],
            max_chars=1000,
        )
    assert out.ok, out.error
    assert out.content["truncated"] is True
    assert out.content["truncated_at"] == ["parse", "output"]
    assert len(out.content["text"]) == MAX_MARKDOWN
    assert out.view.endswith("[truncated at: parse, output]")
    assert small.ok and len(small.content["text"]) == 1000


def test_text_passes_through_and_charsets_are_honoured(tmp_path: Path) -> None:
    with server() as srv:
        port = srv.server_address[1]
        base = f"http://127.0.0.1:{port}"
        text, _ = _fetch(tmp_path / "t", f"{base}/text", [port], ["127.0.0.1/32"])
        json_, _ = _fetch(tmp_path / "j", f"{base}/json", [port], ["127.0.0.1/32"])
        latin, _ = _fetch(tmp_path / "l", f"{base}/latin", [port], ["127.0.0.1/32"])
    assert text.ok and text.content["format"] == "text"
    assert text.content["text"].startswith("plain ")
    assert json_.ok and json_.content["text"] == '{"a": 1}'
    assert latin.ok and latin.content["text"] == "café"


def test_binary_content_is_refused_naming_the_url(tmp_path: Path) -> None:
    with server() as srv:
        port = srv.server_address[1]
        for path, kind in (("/png", "image/png"), ("/untyped", "unknown")):
            url = f"http://127.0.0.1:{port}{path}"
            out, evidence = _fetch(tmp_path / path[1:], url, [port], ["127.0.0.1/32"])
            assert not out.ok and out.reason is EnvelopeReason.UNSUPPORTED_CONTENT
            assert url in (out.error or "") and kind in (out.error or "")
            assert b"unsupported_content" in evidence
        assert srv.hits == ["/png", "/untyped"]  # the request was made; its body refused


def test_catalog_and_default_policy_treat_web_fetch_as_network_needing_approval() -> None:
    op = default_catalog().get("web.fetch")
    assert op.effects == frozenset({"network"}) and not op.gather_safe and not op.secrets
    from flux_policy import Effect, IndexedEvaluator, Request

    d = IndexedEvaluator(default_policy()).evaluate(Request("a", "web.fetch", "net/example.com"))
    assert d.effect is Effect.APPROVAL_REQUIRED


def test_the_title_is_bounded() -> None:
    title, text = html_to_markdown(f"<title>{'t' * 100_000}</title><p>body</p>")
    assert title == "t" * MAX_TITLE and text == "body"


def test_deep_nesting_is_flattened_not_a_crash() -> None:
    _, text = html_to_markdown("<div>" * 1000 + "<p>deep <b>text</b></p>" + "</div>" * 1000)
    assert text == "deep text"  # the elements past the depth bound are unwrapped
