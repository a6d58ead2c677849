"""Built-in process, clock and network operations, over the port Protocols only.

``proc.run`` takes an argv (never a shell string); the ``git_*`` operations run a fixed
argv (``git status --porcelain=v1``, ``git diff --no-color``, ``git log --oneline -n N``)
with every program the repository could configure switched off (:mod:`._git`), so
they can be gather-safe reads. ``http.request`` goes through
:class:`~flux_system.port.HttpPort`: the serving side's egress guard decides, and its
guarded client owns the 429 / ``Retry-After`` semantics (the result says how long it
waited and how many retries it made).
"""

from __future__ import annotations

import datetime as dt
import posixpath
import typing
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from flux_runtime._catalog import Operation, Result, Risk
from flux_runtime._errors import EnvelopeError, EnvelopeReason
from flux_runtime._git import git_read

if typing.TYPE_CHECKING:
    from flux_system.port import HttpResult, Substrate

__all__ = ["HTTP_BODY_CAP", "capped_body", "system_operations"]

_VIEW_CAP = 64 * 1024
# A client that follows redirects would take a request to a host the policy never saw
# (``allowed.example/r?to=denied.example``): ``flux run`` and ``flux serve`` build theirs
# with ``follow_redirects=False``, and a redirect comes back with its ``location``.
# Bytes of response body one ``http.request`` / ``web.fetch`` takes. ``flux run`` and
# ``flux serve`` build their guarded clients with it as ``max_body`` (the client stops
# reading there), and it fits one remote frame (8 MiB) after base64.
HTTP_BODY_CAP = 4 << 20


def capped_body(op: str, url: str, r: HttpResult) -> bytes:
    """The body of *r*, or a typed refusal when it is larger than the cap.

    A body the serving side cut (``truncated``: its client's ``max_body``, which may
    be smaller) or one longer than :data:`HTTP_BODY_CAP` is refused, never passed on
    as if whole.

    Raises:
        EnvelopeError: ``TOO_LARGE`` naming the host and the cap.
    """
    if not r.truncated and len(r.body) <= HTTP_BODY_CAP:
        return r.body
    cap = min(len(r.body), HTTP_BODY_CAP) if r.truncated else HTTP_BODY_CAP
    host = urlsplit(r.url or url).hostname or "?"
    return _too_large(op, host, cap)


def _too_large(op: str, host: str, cap: int) -> typing.NoReturn:
    raise EnvelopeError(
        f"the response from {host} is larger than the {cap}-byte body cap",
        op=op,
        reason=EnvelopeReason.TOO_LARGE,
        target=host,
    )


def _obj(props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": props,
        "required": required,
        "additionalProperties": False,
    }


def _run(s: Substrate, argv: list[str], inp: Mapping[str, Any]) -> Result:
    r = s.processes.run(
        argv, timeout=float(inp.get("timeout", 60)), cwd=inp.get("cwd", "."), env=inp.get("env")
    )
    out, err = r.stdout_text, r.stderr_text
    content = {"argv": argv, "exit_code": r.exit_code, "stdout": out, "stderr": err}
    view = f"exit {r.exit_code}\n{out[:_VIEW_CAP]}" + (
        f"\nstderr:\n{err[:_VIEW_CAP]}" if err else ""
    )
    return Result(content, view)


def _process_resources(inp: Mapping[str, Any]) -> list[str]:
    """``process/<argv0>`` as given and, when it is a path, as its last component too:
    the strictest decision wins, so a rule on ``process/sh`` also holds for ``/bin/sh``
    (and a grant must cover both spellings)."""
    argv0 = str(inp["argv"][0])
    name = posixpath.basename(argv0)
    return [f"process/{argv0}"] if name in ("", argv0) else [f"process/{argv0}", f"process/{name}"]


def _proc(s: Substrate, inp: Mapping[str, Any]) -> Result:
    return _run(s, list(inp["argv"]), inp)


def _now(s: Substrate, inp: Mapping[str, Any]) -> Result:
    stamp = dt.datetime.now(dt.UTC).isoformat()
    return Result({"utc": stamp}, stamp)


def _cwd(s: Substrate, inp: Mapping[str, Any]) -> Result:
    return Result({"cwd": "."}, ". (the workspace root; every path is relative to it)")


def _http(s: Substrate, inp: Mapping[str, Any]) -> Result:
    body = inp.get("body")
    r = s.http.http_request(
        inp.get("method", "GET"),
        inp["url"],
        headers=inp.get("headers"),
        body=body.encode("utf-8") if body is not None else None,
        timeout=float(inp.get("timeout", 30)),
    )
    text = capped_body("http.request", inp["url"], r).decode("utf-8", "replace")
    location = redirect_location(r)
    content = {
        "status": r.status,
        "url": r.url,
        "body": text,
        "truncated": r.truncated,
        "waited": r.waited,
        "retries": r.retries,
        "location": location,
    }
    waited = f" (waited {r.waited:.1f}s over {r.retries} retries)" if r.retries else ""
    moved = f" -> {location} (not followed: request it to go there)" if location else ""
    return Result(content, f"HTTP {r.status}{waited}{moved}\n{text[:_VIEW_CAP]}")


def redirect_location(r: HttpResult) -> str | None:
    """The ``Location`` of a redirect answer (``flux run``'s client follows none: each
    hop is a new request the policy decides on), else ``None``."""
    if not 300 <= r.status < 400:
        return None
    for name, value in r.headers:
        if name == "location":
            return value[:8192]
    return None


def _host(inp: Mapping[str, Any]) -> list[str]:
    """``net/<host>``, lower-case and without the trailing dot of a fully qualified name
    (``example.com.`` is ``example.com``: a rule must not be passed by spelling)."""
    return [f"net/{(urlsplit(inp['url']).hostname or '').rstrip('.')}"]


def system_operations() -> list[Operation]:
    argv = {
        "type": "array",
        "items": {"type": "string", "maxLength": 4096},
        "minItems": 1,
        "maxItems": 256,
    }
    timeout = {"type": "number", "minimum": 0.1, "maximum": 3600}
    strmap = {"type": "object"}
    empty = _obj({}, [])
    git = frozenset({"read", "process"})
    clock = lambda i: ["system/clock"]  # noqa: E731
    return [
        Operation(
            "proc.run",
            "Run a command given as an argv (no shell).",
            _obj(
                {"argv": argv, "timeout": timeout, "cwd": {"type": "string"}, "env": strmap},
                ["argv"],
            ),
            frozenset({"process"}),
            Risk.HIGH,
            False,
            _proc,
            _process_resources,
            secrets=True,
        ),
        Operation(
            "git_status",
            "git status (porcelain).",
            empty,
            git,
            Risk.LOW,
            True,
            git_read("status", "--porcelain=v1"),
            lambda i: ["process/git"],
            side_effect_free=True,
        ),
        Operation(
            "git_diff",
            "git diff of the working tree.",
            empty,
            git,
            Risk.LOW,
            True,
            git_read("diff", "--no-color"),
            lambda i: ["process/git"],
            side_effect_free=True,
        ),
        Operation(
            "git_log",
            "Recent commits, one line each.",
            _obj({"count": {"type": "integer", "minimum": 1, "maximum": 200}}, []),
            git,
            Risk.LOW,
            True,
            git_read("log", "--oneline", "--no-color"),
            lambda i: ["process/git"],
            side_effect_free=True,
        ),
        Operation(
            "now", "The current UTC time.", empty, frozenset({"read"}), Risk.LOW, False, _now, clock
        ),
        Operation(
            "cwd",
            "The working directory the paths are relative to.",
            empty,
            frozenset({"read"}),
            Risk.LOW,
            True,
            _cwd,
            lambda i: ["workspace"],
        ),
        Operation(
            "http.request",
            "One HTTP request through the egress guard.",
            _obj(
                {
                    "url": {"type": "string", "minLength": 1, "maxLength": 8192},
                    "method": {
                        "type": "string",
                        "enum": ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"],
                    },
                    "headers": strmap,
                    "body": {"type": "string"},
                    "timeout": timeout,
                },
                ["url"],
            ),
            frozenset({"network"}),
            Risk.MEDIUM,
            False,
            _http,
            _host,
            secrets=True,
        ),
    ]
