"""The wire format against the language-neutral vectors and schemas in ports/."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flux_system import PortError, PortReason
from flux_system.remote._frame import DEFAULT_MAX_FRAME, FrameDecoder, encode_frame
from flux_system.remote._schema import check, render
from flux_system.remote._wire import parse_message

PORTS = Path(__file__).resolve().parents[3] / "ports"
VECTORS: list[dict[str, Any]] = json.loads((PORTS / "vectors/v1/frames.json").read_text())["cases"]


@pytest.mark.parametrize("case", VECTORS, ids=[c["id"] for c in VECTORS])
def test_frame_vectors(case: dict[str, Any]) -> None:
    decoder = FrameDecoder()
    data = bytes.fromhex(case["bytes"])
    expect = case["expect"]
    if "refuse" in expect:
        with pytest.raises(PortError) as info:
            for obj in decoder.feed(data):
                parse_message(obj)
        assert info.value.reason is PortReason.PROTOCOL
        assert expect["because"] in info.value.message
    elif expect.get("incomplete"):
        assert decoder.feed(data) == []
        assert not decoder.at_boundary()
    else:
        (obj,) = decoder.feed(data)
        msg = parse_message(obj)
        assert msg.model_dump(exclude_unset=True) == expect["message"]
        # and our encoder produces exactly the vector's bytes for it
        assert encode_frame(expect["message"]) == data


def test_vectors_cover_refusals_and_acceptances() -> None:
    kinds = {next(iter(c["expect"])) for c in VECTORS}
    assert kinds == {"message", "refuse", "incomplete"}


def test_oversized_header_refused_before_any_body_byte() -> None:
    decoder = FrameDecoder(max_frame=1024)
    assert decoder.feed(struct.pack(">I", 1024)[:3]) == []  # not yet: 3 header bytes
    with pytest.raises(PortError, match="ceiling"):
        decoder.feed(struct.pack(">I", 1025)[3:])
    assert decoder.pending == 0  # nothing buffered for the body
    with pytest.raises(PortError, match="framing"):  # poisoned for good
        decoder.feed(b"")


def test_frame_at_the_ceiling_is_accepted() -> None:
    body = b'{"type":"result","id":1,"value":"' + b"a" * 1000 + b'"}'
    decoder = FrameDecoder(max_frame=len(body))
    (obj,) = decoder.feed(struct.pack(">I", len(body)) + body)
    assert obj["type"] == "result"
    with pytest.raises(PortError):
        FrameDecoder(max_frame=len(body) - 1).feed(struct.pack(">I", len(body)) + body)


def test_encoder_refuses_past_the_ceiling() -> None:
    with pytest.raises(PortError):
        encode_frame({"type": "result", "id": 1, "value": "x" * DEFAULT_MAX_FRAME})


def test_byte_at_a_time_feeding_decodes_the_same() -> None:
    msgs = [{"type": "ping", "nonce": n} for n in range(5)]
    data = b"".join(encode_frame(m) for m in msgs)
    decoder = FrameDecoder()
    out = []
    for i in range(len(data)):
        out += decoder.feed(data[i : i + 1])
    assert out == msgs


def test_schemas_have_not_drifted() -> None:
    assert check(PORTS / "schema/v1") == []


def test_schema_drift_negative_control(tmp_path: Path) -> None:
    for rel, text in render().items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    assert check(tmp_path) == []
    (tmp_path / "messages/ping.json").write_text("{}")
    (tmp_path / "messages/extra.json").write_text("{}")
    assert sorted(check(tmp_path)) == ["extra: messages/extra.json", "stale: messages/ping.json"]


@pytest.mark.parametrize("last", [True, False])
@pytest.mark.parametrize("stream", ["upload", "download", "stdin", "stdout", "stderr"])
def test_fast_chunk_encoding_is_byte_identical(stream: str, last: bool) -> None:
    import base64

    from flux_system.remote._canonical import encode_chunk

    data = bytes(range(256)) * 3
    message = {
        "type": "chunk",
        "id": 77,
        "stream": stream,
        "data": base64.b64encode(data).decode(),
        "last": last,
    }
    assert encode_chunk(77, stream, data, last) == encode_frame(message)
    with pytest.raises(ValueError):
        encode_chunk(0, stream, data)
    with pytest.raises(ValueError):
        encode_chunk(1, "elsewhere", data)


@pytest.mark.parametrize("size", [0, 1, 2, 3, 4096])
def test_fast_read_result_encoding_is_byte_identical(size: int) -> None:
    import base64

    from flux_system.remote._canonical import encode_read_result

    data = bytes(range(256)) * (size // 256 + 1)
    data = data[:size]
    message = {
        "type": "result",
        "id": 9,
        "value": {"size": size, "data": base64.b64encode(data).decode()},
    }
    assert encode_read_result(9, data) == encode_frame(message)


def test_fast_paths_accept_exactly_the_canonical_frames() -> None:
    import base64

    from flux_system.remote._canonical import (
        encode_chunk,
        encode_read_result,
        fast_chunk,
        fast_read_result,
    )

    data = bytes(range(200))
    body = encode_chunk(5, "stdout", data, True)[4:]
    assert fast_chunk(body) == (5, "stdout", data, True)
    body = encode_read_result(6, data)[4:]
    assert fast_read_result(body) == (6, data)
    b64 = base64.b64encode(data)
    # Anything else falls back to the general path (which validates and may refuse).
    for bad in (
        b'{"type":"chunk","id":0,"stream":"stdout","data":"' + b64 + b'","last":true}',
        b'{"type":"chunk","id":9007199254740992,"stream":"stdout","data":"'
        + b64
        + b'","last":true}',
        b'{"type":"chunk","id":1,"stream":"nope","data":"' + b64 + b'","last":true}',
        b'{"type":"chunk","id":1,"stream":"stdout","data":"' + b64 + b'!","last":true}',
        b'{"type":"chunk","id":1,"stream":"stdout","data":"' + b64[:-1] + b'","last":true}',
        b'{"type":"chunk", "id":1,"stream":"stdout","data":"' + b64 + b'","last":true}',
        b'{"type":"chunk","id":1,"stream":"stdout","data":"' + b64 + b'","last":true,"x":1}',
        b'{"type":"chunk","id":01,"stream":"stdout","data":"' + b64 + b'","last":true}',
    ):
        assert fast_chunk(bad) is None, bad[:60]
    assert (
        fast_read_result(b'{"type":"result","id":1,"value":{"size":3,"data":"' + b64 + b'"}}')
        is None
    )


# -- the canonical spellings against the general path (differential) -------------------

ARG_VECTORS: list[dict[str, Any]] = json.loads((PORTS / "vectors/v1/args.json").read_text())[
    "cases"
]


def _harness() -> Any:
    from tests._fuzz import load_harness

    return load_harness("fuzz_port_frames")


@pytest.mark.parametrize("case", VECTORS, ids=[c["id"] for c in VECTORS])
def test_frame_vectors_through_the_recognisers(case: dict[str, Any]) -> None:
    from flux_system.remote._canonical import fast_chunk, fast_read_request, fast_read_result

    body = bytes.fromhex(case["bytes"])[4:]
    harness = _harness()
    harness.check_fast_paths(body)  # each declines or agrees with the general path
    if "refuse" in case["expect"]:
        assert harness.general(body) == "refused"  # positive control: it is refused
        assert fast_chunk(body) is None
        assert fast_read_result(body) is None
        assert fast_read_request(body) is None
    if case["id"].startswith("read-canonical"):  # the hot spelling is recognised
        assert fast_read_request(body) is not None


@pytest.mark.parametrize("case", ARG_VECTORS, ids=[c["id"] for c in ARG_VECTORS])
def test_arg_vectors(case: dict[str, Any]) -> None:
    from pydantic import ValidationError

    from flux_system.remote._canonical import encode_request, fast_read_request
    from flux_system.remote._ops import ARGS
    from flux_system.remote._wire import Request

    data = bytes.fromhex(case["bytes"])
    (obj,) = FrameDecoder().feed(data)
    msg = parse_message(obj)
    assert isinstance(msg, Request)
    fast = fast_read_request(data[4:])
    expect = case["expect"]
    if "invalid" in expect:
        with pytest.raises(ValidationError) as info:
            ARGS[msg.op].model_validate(msg.args)
        assert info.value.errors()[0]["loc"][0] == expect["invalid"]
        assert fast is None
        return
    args: Any = ARGS[msg.op].model_validate(msg.args)
    assert args.model_dump() == expect["args"]
    canonical = encode_request(msg.id, msg.op, {"path": args.path, "limit": args.limit})
    if canonical == data:  # the spelling our client makes: recognised, same meaning
        assert fast == (msg.id, args.path, args.limit)
    else:
        assert fast is None


_JSON_TOKENS = st.sampled_from(
    ["null", "0", "1", "-1", "01", "1.0", "1e3", "true", '"5"', "1099511627776", "1099511627777"]
)


@settings(max_examples=400)
@given(
    rid=st.one_of(st.integers(min_value=-2, max_value=2**53 + 2), st.sampled_from(["01", "1.0"])),
    path=st.text(max_size=40),
    limit=_JSON_TOKENS,
    glue=st.sampled_from([",", ", ", ","]),
)
def test_read_request_recogniser_never_disagrees(
    rid: int | str, path: str, limit: str, glue: str
) -> None:
    # Bodies close to the canonical spelling, with the variations a recogniser could get
    # wrong: every id, any text (escapes, control characters, surrogates), odd numbers.
    quoted = json.dumps(path, ensure_ascii=False)
    for path_json in (quoted, '"' + path + '"'):  # escaped properly, and raw
        text = (
            f'{{"type":"request","id":{rid}{glue}"op":"read_bytes","args":'
            f'{{"path":{path_json},"limit":{limit}}}}}'
        )
        try:
            body = text.encode("utf-8")
        except UnicodeEncodeError:
            body = text.encode("utf-8", "surrogatepass")  # invalid UTF-8 on purpose
        _harness().check_fast_paths(body)


@settings(max_examples=300)
@given(
    rid=st.integers(min_value=1, max_value=2**53 - 1),
    op=st.text(min_size=1, max_size=12),
    args=st.dictionaries(
        st.text(max_size=8),
        st.one_of(
            st.none(),
            st.booleans(),
            st.integers(min_value=-(2**70), max_value=2**70),
            st.text(max_size=20),
            st.floats(allow_nan=False, allow_infinity=False),
            st.lists(st.integers(), max_size=3),
        ),
        max_size=5,
    ),
)
def test_encode_request_is_byte_identical(rid: int, op: str, args: dict[str, Any]) -> None:
    from flux_system.remote._canonical import encode_request

    message = {"type": "request", "id": rid, "op": op, "args": args}
    try:
        expected = encode_frame(message)
    except UnicodeEncodeError:
        with pytest.raises(UnicodeEncodeError):
            encode_request(rid, op, args)
        return
    assert encode_request(rid, op, args) == expected


def test_recognisers_decline_what_the_general_path_refuses_mutated() -> None:
    # Positive control for the differential: a recogniser that skipped a check (here,
    # the id bound) is caught by the same property on the same bodies.
    from flux_system.remote import _canonical

    harness = _harness()
    body = (
        b'{"type":"request","id":9007199254740992,"op":"read_bytes",'
        b'"args":{"path":"a","limit":null}}'
    )
    harness.check_fast_paths(body)
    real = _canonical._MAX_ID
    _canonical._MAX_ID = 2**60
    try:
        with pytest.raises(AssertionError, match="disagrees"):
            harness.check_fast_paths(body)
    finally:
        _canonical._MAX_ID = real


@settings(max_examples=300)
@given(
    rid=st.one_of(st.integers(min_value=-1, max_value=2**60), st.booleans()),
    path=st.one_of(st.text(max_size=30), st.integers(), st.none()),
    limit=st.one_of(st.none(), st.integers(min_value=-5, max_value=2**50), st.booleans()),
    order=st.booleans(),
    extra=st.booleans(),
)
def test_encode_read_request_is_byte_identical(
    rid: int, path: object, limit: object, order: bool, extra: bool
) -> None:
    # The read_bytes spelling is built by a branch of its own: every shape of args.
    from flux_system.remote._canonical import encode_request

    args: dict[str, object] = {"path": path, "limit": limit} if order else {"limit": limit}
    if not order:
        args["path"] = path
    if extra:
        args["x"] = 1
    message = {"type": "request", "id": rid, "op": "read_bytes", "args": args}
    try:
        expected = encode_frame(message)
    except UnicodeEncodeError:
        with pytest.raises(UnicodeEncodeError):
            encode_request(rid, "read_bytes", args)
        return
    assert encode_request(rid, "read_bytes", args) == expected


def test_whole_frame_fed_at_once_is_checked_like_any_other() -> None:
    # One recv often carries exactly one frame (a shortcut skips buffering it): the
    # ceiling and the empty frame are still refused, and the frame after it still parses.
    body = b'{"type":"ping","nonce":1}'
    with pytest.raises(PortError, match="ceiling"):
        FrameDecoder(max_frame=len(body) - 1).feed(struct.pack(">I", len(body)) + body)
    with pytest.raises(PortError, match="length 0"):
        FrameDecoder().feed(struct.pack(">I", 0))
    decoder = FrameDecoder(max_frame=len(body))
    assert decoder.feed(struct.pack(">I", len(body)) + body) == [{"type": "ping", "nonce": 1}]
    assert decoder.at_boundary()
    two = (struct.pack(">I", len(body)) + body) * 2
    assert decoder.feed(two[:7]) == []
    assert decoder.feed(two[7:]) == [{"type": "ping", "nonce": 1}] * 2
