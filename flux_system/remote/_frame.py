"""Framing: a 4-byte big-endian length, then that many bytes of UTF-8 JSON.

Guarantee: a length over the ceiling (or zero) is refused from the 4 header bytes,
before anything is allocated or read for the body; a body that is not one UTF-8 JSON
object is refused; nothing is ever decoded from a partial frame. Not guaranteed:
meaning — :mod:`._wire` validates what a decoded object says.
"""

from __future__ import annotations

import json
import struct
import typing

from flux_system._exceptions import PortError, PortReason

__all__ = [
    "DEFAULT_MAX_FRAME",
    "HEADER",
    "FrameDecoder",
    "MAX_JSON_DEPTH",
    "decode_body",
    "encode_frame",
    "protocol_error",
]

HEADER = struct.Struct(">I")
DEFAULT_MAX_FRAME = 8 * 1024 * 1024
"""Bytes of JSON body per frame (the header excluded): larger contents are chunked."""
MAX_JSON_DEPTH = 32
"""Nesting of arrays/objects in a body: no message needs more; bounds the parser."""


def protocol_error(message: str) -> PortError:
    return PortError(message, op="frame", reason=PortReason.PROTOCOL)


def encode_frame(
    message: typing.Mapping[str, object], *, max_frame: int = DEFAULT_MAX_FRAME
) -> bytes:
    """The frame for *message* (compact JSON, non-ASCII kept as UTF-8).

    Raises:
        PortError: ``PROTOCOL`` when the body would exceed *max_frame*.
    """
    body = json.dumps(message, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    data = body.encode("utf-8")
    if len(data) > max_frame:
        raise protocol_error(f"frame of {len(data)} bytes exceeds the {max_frame}-byte ceiling")
    return HEADER.pack(len(data)) + data


def _too_deep(value: object) -> bool:
    """Whether *value* nests arrays/objects deeper than :data:`MAX_JSON_DEPTH`.

    Walks the decoded value (cost: its node count, bounded by the frame size), so a
    long string costs nothing here; the parser itself bounds recursion for deeper
    inputs (``RecursionError``, refused by the caller).
    """
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: typing.Iterable[object] = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > MAX_JSON_DEPTH:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def _refuse_constant(name: str) -> typing.NoReturn:
    raise ValueError(f"{name} is not JSON")


def decode_body(body: bytes) -> dict[str, object]:
    """Decode one frame body into a JSON object.

    Raises:
        PortError: ``PROTOCOL`` for invalid UTF-8, invalid JSON (``NaN`` and
            ``Infinity`` included), nesting past :data:`MAX_JSON_DEPTH`, duplicate keys,
            or a top-level value that is not an object.
    """
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise protocol_error("frame body is not UTF-8") from exc

    def no_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
        out: dict[str, object] = {}
        for key, value in pairs:
            if key in out:
                raise ValueError(f"duplicate key {key!r}")
            out[key] = value
        return out

    try:
        value = json.loads(text, object_pairs_hook=no_duplicates, parse_constant=_refuse_constant)
    except ValueError as exc:  # JSONDecodeError is a ValueError
        raise protocol_error(f"frame body is not valid JSON: {exc}"[:200]) from exc
    except RecursionError as exc:  # nesting deep enough to exhaust the parser's stack
        raise protocol_error(f"frame body nests deeper than {MAX_JSON_DEPTH}") from exc
    # Fewer opening brackets than the limit cannot nest past it: skip the walk.
    if body.count(b"[") + body.count(b"{") > MAX_JSON_DEPTH and _too_deep(value):
        raise protocol_error(f"frame body nests deeper than {MAX_JSON_DEPTH}")
    if not isinstance(value, dict):
        raise protocol_error(f"frame body is a JSON {type(value).__name__}, not an object")
    return value


@typing.final
class FrameDecoder:
    """Incremental decoder: feed bytes as they arrive, take whole messages out.

    Guarantee: at most one header plus one body of at most *max_frame* bytes is ever
    buffered beyond what :meth:`feed` was given, and a too-large length is refused as
    soon as its 4 header bytes are in — the body is never read or allocated.
    After an error the decoder is poisoned: the stream has lost framing and must close.
    """

    __slots__ = ("_buf", "_failed", "_max", "_need")

    def __init__(self, *, max_frame: int = DEFAULT_MAX_FRAME) -> None:
        if max_frame < 1:
            raise ValueError("max_frame must be >= 1")
        self._max = max_frame
        self._buf = bytearray()
        self._need: int | None = None
        self._failed = False

    @property
    def pending(self) -> int:
        """Bytes buffered that do not yet form a whole frame."""
        return len(self._buf)

    def feed(self, data: bytes) -> list[dict[str, object]]:
        """Add *data*; return every message it completed, in order.

        Raises:
            PortError: ``PROTOCOL`` (length zero or over the ceiling, bad body).
        """
        out: list[dict[str, object]] = []
        for body in self.feed_bodies(data):
            try:
                out.append(decode_body(body))
            except PortError:
                self._failed = True
                self._buf.clear()
                raise
        return out

    def feed_bodies(self, data: bytes) -> list[bytes]:
        """As :meth:`feed`, returning the frame bodies undecoded (for a fast path that
        recognises bulk frames before any JSON parsing; see :mod:`._canonical`).

        Raises:
            PortError: ``PROTOCOL`` (length zero or over the ceiling).
        """
        if self._failed:
            raise protocol_error("the stream lost its framing earlier")
        if self._need is None and not self._buf and len(data) > HEADER.size:
            (length,) = HEADER.unpack_from(data)
            if len(data) == HEADER.size + length and length <= self._max:
                return [data[HEADER.size :]]  # exactly one whole frame: no buffering
        self._buf += data
        out: list[bytes] = []
        try:
            while True:
                if self._need is None:
                    if len(self._buf) < HEADER.size:
                        break
                    (length,) = HEADER.unpack_from(self._buf)
                    if length == 0:
                        raise protocol_error("frame of length 0")
                    if length > self._max:
                        raise protocol_error(
                            f"frame length {length} exceeds the {self._max}-byte ceiling"
                        )
                    del self._buf[: HEADER.size]
                    self._need = length
                if len(self._buf) < self._need:
                    break
                with memoryview(self._buf) as view:
                    body = view[: self._need].tobytes()  # one copy (a slice would be two)
                del self._buf[: self._need]
                self._need = None
                out.append(body)
        except PortError:
            self._failed = True
            self._buf.clear()
            raise
        return out

    def at_boundary(self) -> bool:
        """True when no partial frame is buffered (a clean place for the peer to stop)."""
        return self._need is None and not self._buf
