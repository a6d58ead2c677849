"""Properties of the proxy's head parser: any bytes give a head or a HeadError (never
another exception), and what it accepts has no byte that could split a line."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from flux_system.sandbox._proxy_head import HeadError, origin_head, parse_head, split_authority

TOKENS = st.sampled_from(
    [
        b"GET",
        b"CONNECT",
        b" ",
        b"\r\n",
        b"\n",
        b"\r",
        b":",
        b"http://a.test/",
        b"HTTP/1.1",
        b"Host",
        b"Content-Length",
        b"Transfer-Encoding",
        b"\x00",
        b"\t",
        b"a",
        b"1",
        b"[::1]",
    ]
)


@given(st.lists(TOKENS, max_size=30).map(b"".join) | st.binary(max_size=200))
def test_any_bytes_give_a_head_or_a_head_error(raw: bytes) -> None:
    try:
        head = parse_head(raw)
    except HeadError as exc:
        assert exc.status == 400
        return
    for part in (head.method, head.target, *(x for kv in head.headers for x in kv)):
        assert "\r" not in part and "\n" not in part and "\x00" not in part
    rewritten = origin_head(head, "/", "a.test")
    assert rewritten.count(b"\r\n\r\n") == 1 and rewritten.endswith(b"\r\n\r\n")


@given(st.text(max_size=40))
def test_split_authority_gives_a_port_in_range_or_refuses(text: str) -> None:
    try:
        host, port = split_authority(text)
    except HeadError:
        return
    assert host and 1 <= port <= 65535
