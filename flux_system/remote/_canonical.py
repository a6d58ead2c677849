"""Canonical spellings of the hot frames, built and recognised without a JSON pass.

The bulk frames (``chunk``, a small read's ``result``) and the requests this client
sends are built by splicing their fields into fixed text — byte for byte what
:func:`~._frame.encode_frame` makes of the same message (tests hold them equal) — and
recognised on arrival by matching that exact spelling.

Guarantee: a recogniser returns a value only for a body the general path
(:func:`~._frame.decode_body`, :func:`~._wire.parse_message`, and for a request the
op's argument model) accepts with the same meaning; for anything else it returns
``None`` and the general path decodes the body — and refuses it if it is invalid
(a differential test and the vectors in ``ports/vectors/v1`` hold the two equal).
Not guaranteed: that every valid body is recognised (other spellings, a JSON escape
in a path, take the general path).
"""

from __future__ import annotations

import base64
import binascii
import re
import typing
from json.encoder import encode_basestring

from flux_system.remote._frame import DEFAULT_MAX_FRAME, HEADER, encode_frame, protocol_error

__all__ = [
    "encode_chunk",
    "encode_read_result",
    "encode_request",
    "fast_chunk",
    "fast_read_request",
    "fast_read_result",
]

_MAX_ID = 2**53 - 1  # _wire.MAX_ID
_MAX_PATH = 8192  # _ops.Path: 1..8192 characters
_MAX_SIZE = 1 << 40  # _ops.Size
_STREAMS = frozenset({"upload", "download", "stdin", "stdout", "stderr"})


def _ceiling(length: int, max_frame: int) -> None:
    if length > max_frame:
        raise protocol_error(f"frame of {length} bytes exceeds the {max_frame}-byte ceiling")


def _json_scalar(value: object) -> str | None:
    """The JSON text ``json.dumps`` makes of a str/int/bool/None, else None."""
    kind = type(value)
    if kind is str:
        return encode_basestring(typing.cast(str, value))
    if kind is int:
        return int.__repr__(typing.cast(int, value))
    if value is None:
        return "null"
    if kind is bool:
        return "true" if value else "false"
    return None


def encode_request(
    rid: int, op: str, args: typing.Mapping[str, object], *, max_frame: int = DEFAULT_MAX_FRAME
) -> bytes:
    """The frame of ``{"type": "request", "id": rid, "op": op, "args": args}``; args of
    plain str/int/bool/None values are spliced in, anything else goes through
    :func:`~._frame.encode_frame`.

    Raises:
        PortError: ``PROTOCOL`` when the body would exceed *max_frame*.
        UnicodeEncodeError: a string holds a lone surrogate (as ``encode_frame``).
    """
    if op == "read_bytes" and type(rid) is int and len(args) == 2:  # the hot one
        path, limit = args.get("path"), args.get("limit", 0.5)  # 0.5: not this spelling
        if (
            type(path) is str
            and (limit is None or type(limit) is int)
            and next(iter(args)) == "path"
        ):
            body = b'{"type":"request","id":%d,"op":"read_bytes","args":{"path":%s,"limit":%s}}' % (
                rid,
                encode_basestring(path).encode(),
                b"null" if limit is None else b"%d" % limit,
            )
            _ceiling(len(body), max_frame)
            return HEADER.pack(len(body)) + body
    parts = []
    if type(rid) is int and type(op) is str:
        for key, value in args.items():
            text = _json_scalar(value)
            if text is None or type(key) is not str:
                break
            parts.append(f"{encode_basestring(key)}:{text}")
        else:
            body = (
                f'{{"type":"request","id":{rid},"op":{encode_basestring(op)},'
                f'"args":{{{",".join(parts)}}}}}'
            ).encode()
            _ceiling(len(body), max_frame)
            return HEADER.pack(len(body)) + body
    message = {"type": "request", "id": rid, "op": op, "args": args}
    return encode_frame(message, max_frame=max_frame)


def encode_chunk(
    rid: int, stream: str, data: bytes, last: bool = False, *, max_frame: int = DEFAULT_MAX_FRAME
) -> bytes:
    """The frame of a ``chunk`` message (base64 text needs no JSON escaping: it is
    spliced in as is), header and body in one buffer.

    Raises:
        PortError: ``PROTOCOL`` when the frame would exceed *max_frame*.
        ValueError: an unknown *stream* or a non-positive *rid*.
    """
    if stream not in _STREAMS or type(rid) is not int or rid < 1:
        raise ValueError("bad chunk id or stream")
    head = b'{"type":"chunk","id":%d,"stream":"%s","data":"' % (rid, stream.encode("ascii"))
    text = base64.b64encode(data)
    tail = b'","last":true}' if last else b'","last":false}'
    length = len(head) + len(text) + len(tail)
    _ceiling(length, max_frame)
    return b"".join((HEADER.pack(length), head, text, tail))


def encode_read_result(rid: int, data: bytes, *, max_frame: int = DEFAULT_MAX_FRAME) -> bytes:
    """The ``result`` frame of a small read (``{"size": n, "data": base64}``), built as
    :func:`encode_chunk` is."""
    if type(rid) is not int or rid < 1:
        raise ValueError("bad result id")
    head = b'{"type":"result","id":%d,"value":{"size":%d,"data":"' % (rid, len(data))
    text = base64.b64encode(data)
    length = len(head) + len(text) + 3
    _ceiling(length, max_frame)
    return b"".join((HEADER.pack(length), head, text, b'"}}'))


# JSON integers as the general path reads them (no sign, no leading zero, no exponent),
# at most 16 digits (the id and size bounds are checked after).
_INT = rb"(0|[1-9][0-9]{0,15})"
_ID = rb"([1-9][0-9]{0,15})"
_CHUNK_HEAD = re.compile(
    rb'\{"type":"chunk","id":'
    + _ID
    + rb',"stream":"(upload|download|stdin|stdout|stderr)","data":"'
)
_CHUNK_TAILS = (b'","last":false}', b'","last":true}')
_RESULT_HEAD = re.compile(
    rb'\{"type":"result","id":' + _ID + rb',"value":\{"size":' + _INT + rb',"data":"'
)
_RESULT_TAIL = b'"}}'
# A JSON string without escapes: no quote, no backslash, no control character; its
# bytes must still be UTF-8 (checked after, as the general path decodes the body).
_READ_REQUEST = re.compile(
    rb'\{"type":"request","id":' + _ID + rb',"op":"read_bytes","args":\{"path":"'
    rb'([^"\\\x00-\x1f]{1,32768})","limit":(null|' + _INT[1:-1] + rb")\}\}\Z"
)


def _b64_strict(body: bytes, start: int, end: int) -> bytes | None:
    """``body[start:end]`` decoded as ``b64decode(validate=True)`` does (the wire
    models' check), without copying the text out first."""
    try:
        with memoryview(body) as view:
            return binascii.a2b_base64(view[start:end], strict_mode=True)
    except (binascii.Error, ValueError):
        return None


def fast_chunk(body: bytes) -> tuple[int, str, bytes, bool] | None:
    """``(id, stream, data, last)`` when *body* is a chunk in the spelling
    :func:`encode_chunk` makes, else ``None``."""
    head = _CHUNK_HEAD.match(body)
    if head is None:
        return None
    if body.endswith(_CHUNK_TAILS[1]):
        last, tail = True, _CHUNK_TAILS[1]
    elif body.endswith(_CHUNK_TAILS[0]):
        last, tail = False, _CHUNK_TAILS[0]
    else:
        return None
    rid = int(head.group(1))
    if rid > _MAX_ID:
        return None
    data = _b64_strict(body, head.end(), len(body) - len(tail))
    if data is None:
        return None
    return rid, head.group(2).decode("ascii"), data, last


def fast_read_result(body: bytes) -> tuple[int, bytes] | None:
    """``(id, data)`` when *body* is a small-read result in the spelling
    :func:`encode_read_result` makes (its size matching its data), else ``None``."""
    head = _RESULT_HEAD.match(body)
    if head is None or not body.endswith(_RESULT_TAIL):
        return None
    rid, size = int(head.group(1)), int(head.group(2))
    if rid > _MAX_ID:
        return None
    data = _b64_strict(body, head.end(), len(body) - len(_RESULT_TAIL))
    if data is None or len(data) != size:
        return None
    return rid, data


def fast_read_request(body: bytes) -> tuple[int, str, int | None] | None:
    """``(id, path, limit)`` when *body* is a ``read_bytes`` request in the spelling
    :func:`encode_request` makes of ``{"path": str, "limit": int | None}`` and its
    arguments are valid (``ReadArgs``: a path of 1 to 8192 characters, a limit from 0
    to 2**40), else ``None``."""
    found = _READ_REQUEST.match(body)
    if found is None:
        return None
    rid = int(found.group(1))
    if rid > _MAX_ID:
        return None
    try:
        path = found.group(2).decode("utf-8")
    except UnicodeDecodeError:
        return None
    if len(path) > _MAX_PATH:
        return None
    raw = found.group(3)
    if raw == b"null":
        return rid, path, None
    limit = int(raw)
    if limit > _MAX_SIZE:
        return None
    return rid, path, limit
