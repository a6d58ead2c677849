"""Binary read results (protocol version 2): a small read's bytes as they are.

Version 1 carries a small read's bytes as base64 inside the JSON ``result``; encoding
4 KiB of it and strictly decoding it again is most of what a remote read costs above
its round trip (decision 0130). Version 2 adds one frame form, sent only by a server
and only on a connection that negotiated version 2: a *binary frame*, whose body is

    0x00, a 4-byte big-endian length J, J bytes of UTF-8 JSON, the tail

(the tail is the rest of the body: ``N - 5 - J`` bytes). The JSON is one ``result``
message whose value is exactly ``{"size": S}`` with ``S`` the tail's length; the tail
is the file's bytes (what version 1 sends as ``value.data``). No JSON text begins with
the byte 0x00, so a binary body is never mistaken for a JSON one.

Guarantee: :func:`decode_binary_result` returns ``(id, data)`` only for a body that is
exactly that — its JSON part accepted by :func:`~._frame.decode_body` and the
``result`` model, its value an object with the one key ``size``, an integer equal to
the tail's length — and raises ``PortError`` (``PROTOCOL``) for anything else. The
spelling :func:`encode_binary_result` makes is recognised on the bytes (the same
checks); any other spelling is decoded by the general path, which decides. Not
guaranteed: that the call the id names is a read (the client checks that).
"""

from __future__ import annotations

import re

from flux_system._exceptions import PortError
from flux_system.remote._frame import DEFAULT_MAX_FRAME, HEADER, decode_body, protocol_error

__all__ = [
    "BINARY_VERSION",
    "MARK",
    "decode_binary_result",
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


def decode_binary_result(body: bytes) -> tuple[int, bytes]:
    """``(id, data)`` of a binary frame's body (see the module docstring).

    Raises:
        PortError: ``PROTOCOL`` when *body* is not a binary ``result`` as defined above.
    """
    if len(body) < _PREFIX or body[0] != MARK:
        raise protocol_error("not a binary frame")
    (json_len,) = HEADER.unpack_from(body, 1)
    end = _PREFIX + json_len
    if json_len == 0 or end > len(body):
        raise protocol_error(f"binary frame's JSON part of {json_len} bytes does not fit it")
    tail = len(body) - end
    found = _CANONICAL.match(body, _PREFIX, end)
    if found is not None and found.end() == end:
        rid, size = int(found.group(1)), int(found.group(2))
        if rid <= _MAX_ID and size == tail:
            return rid, body[end:]
    # Any other spelling (or a bad value): decode it as any body, then check its meaning.
    from flux_system.remote._wire import Result, parse_message

    msg = parse_message(decode_body(body[_PREFIX:end]))
    if not isinstance(msg, Result):
        raise protocol_error(f"a binary frame may carry only a result, not {msg.type!r}")
    value = msg.value
    if not (isinstance(value, dict) and value.keys() == {"size"}):
        raise protocol_error("a binary result's value must be exactly {size}")
    size = value["size"]
    if type(size) is not int or size != tail:
        raise protocol_error(f"a binary result's size is not its {tail} bytes of data")
    return msg.id, body[end:]


def refuse_binary(version: int) -> PortError:
    """The refusal of a binary frame where none may come (*version* below 2)."""
    return protocol_error(f"a binary frame on a version-{version} connection")
