"""``web.fetch``: one guarded GET, the page as condensed Markdown (decision 0103).

The request goes through :class:`~flux_system.port.HttpPort` exactly as
``http.request`` does: the serving side's egress guard vets the destination and every
redirect hop (a hop to a refused address fails the whole fetch), and the policy
decides on ``net/<host>``. What comes back is handled by its ``Content-Type``:

- HTML (``text/html``, ``application/xhtml+xml``) is parsed with Beautiful Soup's
  standard-library parser; scripts, styles, navigation, forms, frames, embedded media
  and anything marked hidden are dropped (the page's ``<main>`` is kept when it has
  one), and markdownify writes the rest as Markdown, blank-line runs condensed;
- other text (``text/*``, JSON, XML) passes through as text;
- anything else (images, PDFs, archives, ``application/octet-stream``) and a body that
  does not look like text when no type is given are refused with
  ``UNSUPPORTED_CONTENT``, naming the URL.

Redirects: ``flux run``'s and ``flux serve``'s clients follow none; a 3xx answer is the
result, with its ``location`` (a fetch of it is a new call the policy decides on).

Bounds: a body longer than the serving side's cap (its ``RequestLimits.max_body``;
``flux run`` and ``flux serve`` set :data:`HTTP_BODY_CAP`) or than that cap itself is
refused (``TOO_LARGE``, naming the host and the cap); at most :data:`MAX_PARSE` bytes
of it are decoded and converted,
and at most :data:`MAX_MARKDOWN` characters (or the input's smaller ``max_chars``) are
returned, with at most :data:`MAX_TITLE` characters of the page's title. Each cut is
flagged in the result (``truncated`` and where). Elements nested deeper than
:data:`MAX_DEPTH` are flattened into their ancestor (text kept) so the converter's
recursion stays bounded.

Not guaranteed: that the page says what a browser would show (no JavaScript runs, no
CSS is applied beyond the ``hidden`` markers); redaction of secrets in the page is the
envelope's, on both faces, like every result.
"""

from __future__ import annotations

import codecs
import re
import typing
from collections.abc import Mapping
from typing import Any

from bs4 import BeautifulSoup, Comment, Tag
from markdownify import MarkdownConverter

from flux_runtime._builtins_system import _host, capped_body, redirect_location
from flux_runtime._catalog import Operation, Result, Risk
from flux_runtime._errors import EnvelopeError, EnvelopeReason

if typing.TYPE_CHECKING:
    from flux_system.port import Substrate

__all__ = [
    "MAX_DEPTH",
    "MAX_MARKDOWN",
    "MAX_PARSE",
    "MAX_TITLE",
    "html_to_markdown",
    "web_operations",
]

MAX_PARSE = 1024 * 1024  # bytes of body decoded and converted
MAX_MARKDOWN = 64 * 1024  # characters of Markdown (or text) returned
MAX_DEPTH = 128  # element nesting kept; deeper elements are flattened
MAX_TITLE = 300  # characters of the page's <title> kept
_ACCEPT = "text/html, application/xhtml+xml, text/plain;q=0.9, text/*;q=0.8, */*;q=0.1"
_HTML = frozenset({"text/html", "application/xhtml+xml"})
_TEXT = frozenset(
    {"application/json", "application/xml", "application/javascript", "application/x-ndjson"}
)
_NOISE = (
    "script",
    "style",
    "noscript",
    "template",
    "nav",
    "header",
    "footer",
    "aside",
    "form",
    "button",
    "input",
    "select",
    "textarea",
    "iframe",
    "frame",
    "frameset",
    "object",
    "embed",
    "svg",
    "canvas",
    "video",
    "audio",
    "picture",
    "link",
    "meta",
    "head",
    "title",
)
_HIDDEN_STYLE = re.compile(r"display\s*:\s*none|visibility\s*:\s*hidden", re.IGNORECASE)
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?([A-Za-z0-9_.:-]{1,40})""", re.I)
_BLANKS = re.compile(r"\n[ \t]*(?:\n[ \t]*){2,}")


class _Converter(MarkdownConverter):
    """markdownify with images as their alt text (no data: URIs in the Markdown)."""

    def convert_img(self, el: Any, text: str, parent_tags: Any) -> str:
        alt = el.attrs.get("alt") or ""
        return str(alt).strip() if isinstance(alt, str) else ""


_CONVERT = _Converter(heading_style="ATX", bullets="-", strip_document="strip")


def _media_type(headers: tuple[tuple[str, str], ...]) -> tuple[str | None, str | None]:
    """``(media type, charset)`` of the last Content-Type header, lower-case."""
    value = None
    for name, v in headers:
        if name == "content-type":
            value = v
    if value is None:
        return None, None
    kind, *params = (p.strip() for p in value.split(";"))
    charset = None
    for param in params:
        key, _, val = param.partition("=")
        if key.strip().lower() == "charset":
            charset = val.strip().strip("\"'") or None
    return kind.lower() or None, charset


def _decode(body: bytes, charset: str | None) -> str:
    """The body as text in *charset* (the page's own ``<meta charset>`` when none was
    given, else UTF-8); an unknown charset falls back to UTF-8, never raises."""
    if charset is None:
        m = _META_CHARSET.search(body[:4096])
        charset = m.group(1).decode("ascii") if m else "utf-8"
    try:
        codecs.lookup(charset)
    except LookupError:
        charset = "utf-8"
    return body.decode(charset, "replace")


def _looks_textual(body: bytes) -> bool:
    head = body[:4096]
    if b"\x00" in head:
        return False
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:  # a multi-byte character cut at 4096 is fine
        return exc.start >= len(head) - 4
    return True


def _hidden(tag: Tag) -> bool:
    attrs = tag.attrs
    if "hidden" in attrs or str(attrs.get("aria-hidden", "")).lower() == "true":
        return True
    style = attrs.get("style")
    return isinstance(style, str) and bool(_HIDDEN_STYLE.search(style))


def _flatten_deep(root: Tag) -> None:
    """Unwrap every element nested deeper than :data:`MAX_DEPTH` (iteratively)."""
    deep: list[Tag] = []
    stack: list[tuple[Tag, int]] = [(root, 0)]
    while stack:
        tag, depth = stack.pop()
        if depth > MAX_DEPTH:
            deep.append(tag)
        stack.extend((c, depth + 1) for c in tag.children if isinstance(c, Tag))
    for tag in reversed(deep):  # innermost first: each unwrap keeps its children in place
        tag.unwrap()


def html_to_markdown(html: str) -> tuple[str, str]:
    """``(title, markdown)`` of *html* with the noise dropped (module docstring).

    Guarantee: no script, style or hidden element's text reaches the Markdown; runs of
    blank lines are condensed to one. Raises nothing for malformed HTML (the parser
    recovers as browsers do).
    """
    soup = BeautifulSoup(html, "html.parser")
    title_tag = soup.find("title")
    title = " ".join(title_tag.get_text(" ").split()) if isinstance(title_tag, Tag) else ""
    title = title[:MAX_TITLE]
    for comment in soup.find_all(string=lambda s: isinstance(s, Comment)):
        comment.extract()
    for tag in soup.find_all(_NOISE):
        tag.decompose()
    for tag in [t for t in soup.find_all(True) if _hidden(t)]:
        if not tag.decomposed:
            tag.decompose()
    main = soup.find("main")
    root: Tag = main if isinstance(main, Tag) else soup
    _flatten_deep(root)
    text = _CONVERT.convert_soup(root)
    lines = "\n".join(line.rstrip() for line in text.splitlines())
    return title, _BLANKS.sub("\n\n", lines).strip()


def _refuse(url: str, final: str, kind: str | None) -> EnvelopeError:
    via = f" (redirected to {final[:200]})" if final != url else ""
    return EnvelopeError(
        f"content type {kind or 'unknown (binary body)'} is not text or HTML{via}",
        op="web.fetch",
        reason=EnvelopeReason.UNSUPPORTED_CONTENT,
        target=url[:200],
    )


def _fetch(s: Substrate, inp: Mapping[str, Any]) -> Result:
    url = inp["url"]
    limit = min(int(inp.get("max_chars", MAX_MARKDOWN)), MAX_MARKDOWN)
    r = s.http.http_request(
        "GET", url, headers={"accept": _ACCEPT}, timeout=float(inp.get("timeout", 30))
    )
    whole = capped_body("web.fetch", url, r)
    location = redirect_location(r)
    if location is not None:  # not followed: going there is a new fetch, decided anew
        moved = {"status": r.status, "url": r.url, "location": location, "text": ""}
        return Result(moved, f"HTTP {r.status} {r.url} -> {location} (not followed)")
    kind, charset = _media_type(r.headers)
    body = whole[:MAX_PARSE]
    cut_parse = len(whole) > MAX_PARSE
    if kind is None:
        if not _looks_textual(body):
            raise _refuse(url, r.url, None)
        start = body[:1024].lstrip().lower()
        kind = "text/html" if start.startswith((b"<!doctype html", b"<html")) else "text/plain"
    if kind in _HTML:
        title, text = html_to_markdown(_decode(body, charset))
        form = "markdown"
    elif kind.startswith("text/") or kind in _TEXT or kind.endswith(("+json", "+xml")):
        title, text, form = "", _decode(body, charset or "utf-8"), "text"
    else:
        raise _refuse(url, r.url, kind)
    cut_out = len(text) > limit
    text = text[:limit]
    cuts = [what for what, cut in (("parse", cut_parse), ("output", cut_out)) if cut]
    content = {
        "status": r.status,
        "url": r.url,
        "content_type": kind,
        "format": form,
        "title": title,
        "text": text,
        "truncated": bool(cuts),
        "truncated_at": cuts,
    }
    head = f"HTTP {r.status} {r.url} ({kind})" + (f"\n# {title}" if title else "")
    tail = f"\n[truncated at: {', '.join(cuts)}]" if cuts else ""
    return Result(content, f"{head}\n\n{text}{tail}")


def web_operations() -> list[Operation]:
    return [
        Operation(
            "web.fetch",
            "Fetch a web page (GET, through the egress guard) as condensed Markdown; "
            "text passes through, binary content is refused.",
            {
                "type": "object",
                "properties": {
                    "url": {"type": "string", "minLength": 1, "maxLength": 8192},
                    "max_chars": {"type": "integer", "minimum": 256, "maximum": MAX_MARKDOWN},
                    "timeout": {"type": "number", "minimum": 0.1, "maximum": 300},
                },
                "required": ["url"],
                "additionalProperties": False,
            },
            frozenset({"network"}),
            Risk.MEDIUM,
            True,
            _fetch,
            _host,
        )
    ]
