"""Coverage-guided fuzzing of the port protocol's frame decoder and message parser.

Run: ``python fuzz/fuzz_port_frames.py [corpus_dir] -max_total_time=60``.

Properties checked on every input, fed whole and then in two pieces at a split
point derived from the input (any other outcome is a crash):
- ``FrameDecoder.feed`` returns messages or raises ``PortError(PROTOCOL)`` — never
  another exception, never a message that is not a dict;
- feeding the same bytes in two pieces yields the same messages (or the same refusal);
- nothing is buffered past one header plus the declared body;
- ``parse_message`` accepts a message or raises ``PortError(PROTOCOL)``, and a message
  it accepts re-encodes to a frame that decodes to an equal message;
- each canonical-spelling recogniser (``flux_system.remote._canonical``: a chunk, a
  small read's result, a ``read_bytes`` request) declines a body or returns exactly
  what the general path (JSON, the message models, the op's argument model) makes of
  it — never a value for a body the general path refuses;
- the binary-frame decoder (``flux_system.remote._binary``, protocol version 2)
  returns a result or a chunk, or raises ``PortError(PROTOCOL)`` — never another
  exception — and what it returns is what the general path makes of the body.
"""

from __future__ import annotations

import struct
import sys
import zlib
from pathlib import Path
from typing import Any

SEEDS = (
    b'{"type":"hello","protocol":"flux-port","versions":[1],"client":"c"}',
    b'{"type":"request","id":1,"op":"stat","args":{"path":"a"}}',
    b'{"type":"chunk","id":3,"stream":"upload","data":"aGVsbG8=","last":true}',
    b'{"type":"event","id":5,"event":"exited","exit_code":-9,"signal":9}',
    b'{"type":"ping","nonce":0}',
    b'{"type":"error","id":0,"error":{"kind":"refused","error":"X","op":"o","reason":"r","message":"m"}}',
    b'{"type":"request","id":7,"op":"read_bytes","args":{"path":"d/f.txt","limit":null}}',
    b'{"type":"request","id":8,"op":"read_bytes","args":{"path":"\xc3\xa9","limit":4096}}',
    b'{"type":"result","id":9,"value":{"size":5,"data":"aGVsbG8="}}',
    b'{"type":"chunk","id":3,"stream":"stdout","data":"","last":false}',
    b'\x00\x00\x00\x00+{"type":"result","id":9,"value":{"size":5}}hello',  # binary (v2)
    b'\x00\x00\x00\x006{"type":"chunk","id":4,"stream":"stdout","last":false}tick',  # binary
)
MAX_FRAME = 4096


def _frame(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


def _feed(chunks: list[bytes]) -> tuple[str, list[dict[str, object]]]:
    from flux_system import PortError, PortReason
    from flux_system.remote._frame import HEADER, FrameDecoder

    decoder = FrameDecoder(max_frame=MAX_FRAME)
    out: list[dict[str, object]] = []
    try:
        for chunk in chunks:
            got = decoder.feed(chunk)
            assert all(isinstance(m, dict) for m in got)
            out += got
            assert decoder.pending <= HEADER.size + MAX_FRAME + len(chunk)
    except PortError as exc:
        assert exc.reason is PortReason.PROTOCOL
        return "refused", out
    return "ok", out


def general(body: bytes) -> object:
    """What the general path makes of *body*, in the shape a recogniser returns:
    ``("chunk", ...)``, ``("result", ...)``, ``("read", ...)``, or a word for a body
    the recognisers must decline (``"refused"``, ``"invalid-args"``, ``"other"``)."""
    from pydantic import ValidationError

    from flux_system import PortError
    from flux_system.remote._frame import decode_body
    from flux_system.remote._ops import ARGS, b64d
    from flux_system.remote._wire import Chunk, Request, Result, parse_message

    try:
        msg = parse_message(decode_body(body))
        if isinstance(msg, Chunk):
            return "chunk", (msg.id, msg.stream, b64d(msg.data), msg.last)
    except PortError:
        return "refused"
    if isinstance(msg, Result):
        value = msg.value
        if not (isinstance(value, dict) and sorted(value) == ["data", "size"]):
            return "other"
        size, text = value["size"], value["data"]
        if type(size) is not int or not isinstance(text, str):
            return "other"
        try:
            data = b64d(text)
        except PortError:
            return "other"
        return ("result", (msg.id, data)) if len(data) == size else "other"
    if isinstance(msg, Request) and msg.op == "read_bytes":
        try:
            args: Any = ARGS["read_bytes"].model_validate(msg.args)
        except ValidationError:
            return "invalid-args"
        return "read", (msg.id, args.path, args.limit)
    return "other"


def check_fast_paths(body: bytes) -> None:
    """Each recogniser declines *body* or agrees with :func:`general`."""
    from flux_system.remote._canonical import fast_chunk, fast_read_request, fast_read_result

    for kind, recognise in (
        ("chunk", fast_chunk),
        ("result", fast_read_result),
        ("read", fast_read_request),
    ):
        fast = recognise(body)
        if fast is not None:
            assert general(body) == (kind, fast), f"{kind} recogniser disagrees"


def general_binary(body: bytes) -> object:
    """What the general path makes of a binary body (None: it must be refused)."""
    from flux_system import PortError
    from flux_system.remote._binary import BinaryChunk, BinaryResult
    from flux_system.remote._frame import decode_body
    from flux_system.remote._wire import Chunk, Result, parse_message

    if len(body) < 5 or body[0] != 0:
        return None
    (json_len,) = struct.unpack_from(">I", body, 1)
    if json_len == 0 or 5 + json_len > len(body):
        return None
    tail = body[5 + json_len :]
    try:
        obj = decode_body(body[5 : 5 + json_len])
        if obj.get("type") == "chunk":
            if "data" in obj:
                return None
            chunk = parse_message({**obj, "data": ""})
            assert isinstance(chunk, Chunk)
            return BinaryChunk(chunk.id, chunk.stream, tail, chunk.last)
        msg = parse_message(obj)
    except PortError:
        return None
    if not isinstance(msg, Result) or not isinstance(msg.value, dict):
        return None
    if msg.value.keys() != {"size"} or type(msg.value["size"]) is not int:
        return None
    return BinaryResult(msg.id, tail) if msg.value["size"] == len(tail) else None


def check_binary(body: bytes) -> None:
    """The binary decoder refuses with PROTOCOL or agrees with :func:`general_binary`."""
    from flux_system import PortError, PortReason
    from flux_system.remote._binary import decode_binary

    try:
        got: object = decode_binary(body)
    except PortError as exc:
        assert exc.reason is PortReason.PROTOCOL
        got = None
    assert got == general_binary(body), "binary decoder disagrees"


def check_bytes(data: bytes) -> None:
    from flux_system import PortError, PortReason
    from flux_system.remote._frame import FrameDecoder, encode_frame
    from flux_system.remote._wire import parse_message

    check_fast_paths(data[4:] if len(data) >= 4 else data)
    check_binary(data[4:] if len(data) >= 4 else data)
    whole = _feed([data])
    cut = zlib.crc32(data) % (len(data) + 1)  # a split point that varies with the input
    split = _feed([data[:cut], data[cut:]])
    if whole[0] == "ok":
        assert split == whole, "split feeding changed the result"
    for obj in whole[1]:
        try:
            msg = parse_message(obj)
        except PortError as exc:
            assert exc.reason is PortReason.PROTOCOL
            continue
        dumped = msg.model_dump(exclude_unset=True)
        again = FrameDecoder().feed(encode_frame(dumped))
        assert len(again) == 1 and parse_message(again[0]) == msg, "re-encoding changed it"


def test_one_input(data: bytes) -> None:
    """atheris entry point: the raw bytes, and the bytes as a body behind a header."""
    check_bytes(data)
    check_bytes(_frame(data))
    if data:
        seed = SEEDS[data[0] % len(SEEDS)]
        check_bytes(_frame(seed[: len(data) % (len(seed) + 1)] + data))


def main() -> None:
    import atheris

    # The checkout this harness belongs to, before any installed copy.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

    import pydantic  # noqa: F401

    with atheris.instrument_imports(include=["flux_system"]):
        import flux_system.remote._binary
        import flux_system.remote._canonical
        import flux_system.remote._frame
        import flux_system.remote._wire  # noqa: F401

    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
