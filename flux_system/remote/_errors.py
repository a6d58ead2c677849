"""Errors across the wire: server exceptions to ``ErrorBody``, bodies to client errors.

Classified by structure, never by message text (DESIGN §2.6): the server sets
``kind`` from the exception's class; the client raises by ``kind`` alone.
"""

from __future__ import annotations

import typing

import pydantic

from flux_system._exceptions import (
    FluxSystemError,
    PortError,
    PortReason,
    RefusedError,
    UnknownOutcomeError,
    UnservedError,
)

__all__ = ["body_from_exception", "error_from_body"]

_MAX_TEXT = 4000


def _clip(text: str) -> str:
    return text if len(text) <= _MAX_TEXT else text[: _MAX_TEXT - 1] + "…"


def body_from_exception(exc: BaseException, op: str) -> dict[str, object]:
    """The ``ErrorBody`` for *exc*, raised while serving *op*.

    Guarantee: an exception that is not a :class:`FluxSystemError` nor a validation
    error crosses as its class name only — its text may hold paths of the serving
    host or data, and the client does not need it to classify.
    """
    if isinstance(exc, UnservedError):
        kind = "unserved"
    elif isinstance(exc, UnknownOutcomeError):
        kind = "unknown_outcome"
    elif isinstance(exc, FluxSystemError):
        kind = "refused"
    elif isinstance(exc, pydantic.ValidationError):
        first = exc.errors(include_url=False, include_input=False)
        where = ".".join(str(p) for p in first[0].get("loc", ())) if first else "args"
        msg = first[0].get("msg", "invalid") if first else "invalid"
        return {
            "kind": "invalid",
            "error": "ValidationError",
            "op": op,
            "target": None,
            "reason": "invalid_args",
            "message": _clip(f"{where}: {msg}"),
        }
    elif isinstance(exc, (TypeError, ValueError)):
        return {
            "kind": "invalid",
            "error": type(exc).__name__,
            "op": op,
            "target": None,
            "reason": "invalid_args",
            "message": _clip(str(exc)),
        }
    else:
        return {
            "kind": "unknown_outcome",
            "error": type(exc).__name__,
            "op": op,
            "target": None,
            "reason": "internal",
            "message": f"the server failed with {type(exc).__name__}",
        }
    assert isinstance(exc, FluxSystemError)
    return {
        "kind": kind,
        "error": type(exc).__name__,
        "op": exc.op,
        "target": None if exc.target is None else _clip(exc.target),
        "reason": str(exc.reason.value),
        "message": _clip(exc.message),
    }


def error_from_body(body: typing.Mapping[str, typing.Any], *, target: str) -> PortError:
    """The client-side error for an ``ErrorBody`` (already validated).

    ``refused`` → :class:`RefusedError`, ``unserved`` → :class:`UnservedError`,
    ``unknown_outcome`` → :class:`UnknownOutcomeError`, ``invalid`` and ``cancelled``
    → :class:`PortError` (``PROTOCOL``). Each carries ``remote_error`` (the far side's
    class name) and ``remote_reason`` (its reason value) as attributes; *target* is the
    server the client spoke to when the body names none.
    """
    kind = body["kind"]
    message = f"{target}: {body['message']}"
    where = body.get("target") or target
    err: PortError
    if kind == "refused":
        err = RefusedError(message, op=body["op"], target=where)
    elif kind == "unserved":
        err = UnservedError(message, op=body["op"], target=where)
    elif kind == "unknown_outcome":
        err = UnknownOutcomeError(message, op=body["op"], target=where)
    else:
        err = PortError(message, op=body["op"], target=where, reason=PortReason.PROTOCOL)
    err.remote_error = str(body["error"])
    err.remote_reason = str(body["reason"])
    return err
