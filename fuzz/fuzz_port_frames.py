"""Coverage-guided fuzzing of the port protocol's frame decoder and message parser.

Run: ``python fuzz/fuzz_port_frames.py [corpus_dir] -max_total_time=60``.

Properties checked on every input, fed whole and then in two pieces at a split
point derived from the input (any other outcome is a crash):
- ``FrameDecoder.feed`` returns messages or raises ``PortError(PROTOCOL)`` — never
  another exception, never a message that is not a dict;
- feeding the same bytes in two pieces yields the same messages (or the same refusal);
- nothing is buffered past one header plus the declared body;
- ``parse_message`` accepts a message or raises ``PortError(PROTOCOL)``, and a message
  it accepts re-encodes to a frame that decodes to an equal message.
"""

from __future__ import annotations

import struct
import sys
import zlib
from pathlib import Path

SEEDS = (
    b'{"type":"hello","protocol":"flux-port","versions":[1],"client":"c"}',
    b'{"type":"request","id":1,"op":"stat","args":{"path":"a"}}',
    b'{"type":"chunk","id":3,"stream":"upload","data":"aGVsbG8=","last":true}',
    b'{"type":"event","id":5,"event":"exited","exit_code":-9,"signal":9}',
    b'{"type":"ping","nonce":0}',
    b'{"type":"error","id":0,"error":{"kind":"refused","error":"X","op":"o","reason":"r","message":"m"}}',
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


def check_bytes(data: bytes) -> None:
    from flux_system import PortError, PortReason
    from flux_system.remote._frame import FrameDecoder, encode_frame
    from flux_system.remote._wire import parse_message

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
        import flux_system.remote._frame  # noqa: F401
        import flux_system.remote._wire  # noqa: F401

    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
