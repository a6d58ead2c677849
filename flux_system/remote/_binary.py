"""Binary frames (protocol version 2): bulk bytes from the server as they are.

Version 1 carries bytes as base64 inside JSON; encoding a 4 KiB read's answer and
strictly decoding it again is most of what a remote read costs above its round trip,
and base64 bounds streamed output (decision 0130). Version 2 adds one frame form, sent
only by a server and only on a connection that negotiated version 2: a *binary
frame*, whose body is

    0x00, a 4-byte big-endian length J, J bytes of UTF-8 JSON, the tail

(the tail is the rest of the body: ``N - 5 - J`` bytes). The JSON is one message:
a ``result`` whose value is exactly ``{"size": S}`` with ``S`` the tail's length (the
tail is a small read's bytes, what version 1 sends as ``value.data``), or a ``chunk``
without its ``data`` field (the tail is the data). No JSON text begins with the byte
0x00, so a binary body is never mistaken for a JSON one.

Guarantee: :func:`decode_binary` returns a value only for a body that is exactly that
— its JSON part accepted by :func:`~._frame.decode_body` and the message's model (a
chunk's with the tail as its data), a result's value an object with the one key
``size``, an integer equal to the tail's length — and raises ``PortError``
(``PROTOCOL``) for anything else. The spellings the encoders here make are
recognised on the bytes (the same checks); any other spelling is decoded by the
general path, which decides. Not guaranteed: that the call the id names is a read
(the client checks that, as for a JSON chunk).
"""

from __future__ import annotations

import re
import typing

from flux_system._exceptions import PortError
from flux_system.remote._frame import DEFAULT_MAX_FRAME, HEADER, decode_body, protocol_error

__all__ = [
    "BINARY_VERSION",
    "MARK",
    "BinaryChunk",
    "BinaryResult",
    "decode_binary",
    "decode_binary_result",
    "encode_binary_chunk",
    "encode_binary_result",
    "refuse_binary",
]

BINARY_VERSION = 2
"""The first protocol version with binary frames."""
MARK = 0x00
"""The first byte of a binary frame's body (a JSON body starts with ``{``)."""
_PREFIX = 1 + HEADER.size  # the mark and J
_MAX_ID = 2**53 - 1  # _wire.MAX_ID
_CANONICAL = re.compile(
    rb'\{"type":"result","id":([1-9][0-9]{0,15}),"value":\{"size":(0|[1-9][0-9]{0,15})\}\}\Z'
)
_CANONICAL_CHUNK = re.compile(
    rb'\{"type":"chunk","id":([1-9][0-9]{0,15}),'
    rb'"stream":"(upload|download|stdin|stdout|stderr)","last":(true|false)\}\Z'
)
_STREAMS = frozenset({"upload", "download", "stdin", "stdout", "stderr"})


class BinaryResult(typing.NamedTuple):
    """A small read's ``result``: its id and the file's bytes."""

    id: int
    data: bytes


class BinaryChunk(typing.NamedTuple):
    """A ``chunk``: its id, stream, data and whether it ends the stream."""

    id: int
    stream: str
    data: bytes
    last: bool


def encode_binary_result(rid: int, data: bytes, *, max_frame: int = DEFAULT_MAX_FRAME) -> bytes:
    """The binary frame of a small read's ``result``, header and body in one buffer.

    Raises:
        PortError: ``PROTOCOL`` when the frame would exceed *max_frame*.
        ValueError: a non-positive or non-int *rid*.
    """
    if type(rid) is not int or not 1 <= rid <= _MAX_ID:
        raise ValueError("bad result id")
    head = b'{"type":"result","id":%d,"value":{"size":%d}}' % (rid, len(data))
    length = _PREFIX + len(head) + len(data)
    if length > max_frame:
        raise protocol_error(f"frame of {length} bytes exceeds the {max_frame}-byte ceiling")
    return b"".join((HEADER.pack(length), b"\x00", HEADER.pack(len(head)), head, data))


def encode_binary_chunk(
    rid: int, stream: str, data: bytes, last: bool = False, *, max_frame: int = DEFAULT_MAX_FRAME
) -> bytes:
    """The binary frame of a ``chunk``, header and body in one buffer.

    Raises:
        PortError: ``PROTOCOL`` when the frame would exceed *max_frame*.
        ValueError: an unknown *stream*, a non-positive or non-int *rid*.
    """
    if stream not in _STREAMS or type(rid) is not int or not 1 <= rid <= _MAX_ID:
        raise ValueError("bad chunk id or stream")
    head = b'{"type":"chunk","id":%d,"stream":"%s","last":%s}' % (
        rid,
        stream.encode("ascii"),
        b"true" if last else b"false",
    )
    length = _PREFIX + len(head) + len(data)
    if length > max_frame:
        raise protocol_error(f"frame of {length} bytes exceeds the {max_frame}-byte ceiling")
    return b"".join((HEADER.pack(length), b"\x00", HEADER.pack(len(head)), head, data))


def decode_binary(body: bytes) -> BinaryResult | BinaryChunk:
    """The message a binary frame's body carries (see the module docstring).

    Raises:
        PortError: ``PROTOCOL`` when *body* is not a binary frame as defined above.
    """
    if len(body) < _PREFIX or body[0] != MARK:
        raise protocol_error("not a binary frame")
    (json_len,) = HEADER.unpack_from(body, 1)
    end = _PREFIX + json_len
    if json_len == 0 or end > len(body):
        raise protocol_error(f"binary frame's JSON part of {json_len} bytes does not fit it")
    found = _CANONICAL_CHUNK.match(body, _PREFIX, end)
    if found is not None:
        rid = int(found.group(1))
        if rid <= _MAX_ID:
            return BinaryChunk(
                rid, found.group(2).decode("ascii"), body[end:], found.group(3) == b"true"
            )
    found = _CANONICAL.match(body, _PREFIX, end)
    if found is not None:
        rid, size = int(found.group(1)), int(found.group(2))
        if rid <= _MAX_ID and size == len(body) - end:
            return BinaryResult(rid, body[end:])
    return _general(body, end)


def _general(body: bytes, end: int) -> BinaryResult | BinaryChunk:
    """Any other spelling (or a bad value): decoded as any body, then checked."""
    from flux_system.remote._wire import Chunk, Result, parse_message

    obj = decode_body(body[_PREFIX:end])
    tail = body[end:]
    if obj.get("type") == "chunk":
        if "data" in obj:
            raise protocol_error("a binary chunk's data is its tail, not a field")
        msg = parse_message({**obj, "data": ""})  # the model's checks but for the data
        assert isinstance(msg, Chunk)
        return BinaryChunk(msg.id, msg.stream, tail, msg.last)
    msg = parse_message(obj)
    if not isinstance(msg, Result):
        raise protocol_error(f"a binary frame may carry a result or a chunk, not {msg.type!r}")
    value = msg.value
    if not (isinstance(value, dict) and value.keys() == {"size"}):
        raise protocol_error("a binary result's value must be exactly {size}")
    size = value["size"]
    if type(size) is not int or size != len(tail):
        raise protocol_error(f"a binary result's size is not its {len(tail)} bytes of data")
    return BinaryResult(msg.id, tail)


def decode_binary_result(body: bytes) -> tuple[int, bytes]:
    """``(id, data)`` of a binary ``result`` frame's body (see the module docstring).

    Raises:
        PortError: ``PROTOCOL`` when *body* is not a binary ``result`` as defined above.
    """
    got = decode_binary(body)
    if not isinstance(got, BinaryResult):
        raise protocol_error("a binary chunk where a result was expected")
    return got.id, got.data


def refuse_binary(version: int) -> PortError:
    """The refusal of a binary frame where none may come (*version* below 2)."""
    return protocol_error(f"a binary frame on a version-{version} connection")
