"""Binary read results (protocol version 2, decision 0130): vectors, the canonical
spelling against the general path, and what each version puts on the wire."""

from __future__ import annotations

import base64
import json
import struct
import typing
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flux_system import PortError, PortReason, RefusedError, WorkspaceReason
from flux_system.remote import connect
from flux_system.remote._binary import (
    BinaryChunk,
    BinaryResult,
    decode_binary,
    decode_binary_result,
    encode_binary_chunk,
    encode_binary_result,
)
from flux_system.remote._frame import FrameDecoder, decode_body
from flux_system.remote._parts import RemoteProcesses
from tests.flux_system.remote._harness import frame, raw_connect, read_frames, served

PORTS = Path(__file__).resolve().parents[3] / "ports"
VECTORS: list[dict[str, Any]] = json.loads((PORTS / "vectors/v2/binary.json").read_text())["cases"]


def _body(case: dict[str, Any]) -> bytes:
    (body,) = FrameDecoder().feed_bodies(bytes.fromhex(case["bytes"]))
    return body


@pytest.mark.parametrize("case", VECTORS, ids=[c["id"] for c in VECTORS])
def test_binary_vectors(case: dict[str, Any]) -> None:
    body = _body(case)
    expect = case["expect"]
    if "refuse" in expect:
        with pytest.raises(PortError) as info:
            decode_binary(body)
        assert info.value.reason is PortReason.PROTOCOL
        assert expect["because"] in info.value.message
    elif "chunk" in expect:
        got = expect["chunk"]
        want = BinaryChunk(got["id"], got["stream"], bytes.fromhex(got["data"]), got["last"])
        assert decode_binary(body) == want
        with pytest.raises(PortError):
            decode_binary_result(body)  # where a result is expected, a chunk is refused
    else:
        got = expect["result"]
        assert decode_binary(body) == BinaryResult(got["id"], bytes.fromhex(got["data"]))
        assert decode_binary_result(body) == (got["id"], bytes.fromhex(got["data"]))


def test_binary_vectors_cover_refusals_and_acceptances() -> None:
    kinds = {next(iter(c["expect"])) for c in VECTORS}
    assert kinds == {"result", "chunk", "refuse"}


@pytest.mark.parametrize("case", VECTORS, ids=[c["id"] for c in VECTORS])
def test_a_binary_body_is_never_json(case: dict[str, Any]) -> None:
    # What a version-1 peer does with one: refuse it as a body (it starts with 0x00).
    with pytest.raises(PortError):
        decode_body(_body(case))


@settings(max_examples=200)
@given(rid=st.integers(1, 2**53 - 1), data=st.binary(max_size=5000))
def test_encoded_binary_results_decode_to_what_was_encoded(rid: int, data: bytes) -> None:
    encoded = encode_binary_result(rid, data)
    (length,) = struct.unpack(">I", encoded[:4])
    assert length == len(encoded) - 4
    assert decode_binary_result(encoded[4:]) == (rid, data)


@settings(max_examples=200)
@given(
    rid=st.integers(1, 2**53 - 1),
    stream=st.sampled_from(["upload", "download", "stdin", "stdout", "stderr"]),
    data=st.binary(max_size=5000),
    last=st.booleans(),
)
def test_encoded_binary_chunks_decode_to_what_was_encoded(
    rid: int, stream: str, data: bytes, last: bool
) -> None:
    encoded = encode_binary_chunk(rid, stream, data, last)
    assert decode_binary(encoded[4:]) == BinaryChunk(rid, stream, data, last)


@settings(max_examples=300)
@given(
    rid=st.one_of(st.integers(0, 2**53 + 2).map(str), st.sampled_from(["01", "1.0", '"1"'])),
    stream=st.sampled_from(['"stdout"', '"download"', '"stdfoo"', "1"]),
    last=st.sampled_from(["true", "false", "1", "null", '"true"']),
    extra=st.sampled_from(["", ',"data":""', ',"x":1']),
    tail=st.binary(max_size=20),
)
def test_the_chunk_recogniser_agrees_with_the_general_path(
    rid: str, stream: str, last: str, extra: str, tail: bytes
) -> None:
    from flux_system.remote._wire import Chunk, parse_message

    js = f'{{"type":"chunk","id":{rid},"stream":{stream},"last":{last}{extra}}}'.encode()
    body = b"\x00" + struct.pack(">I", len(js)) + js + tail
    try:
        obj = decode_body(js)
        assert "data" not in obj
        msg = parse_message({**obj, "data": ""})
        assert isinstance(msg, Chunk)
        want: BinaryChunk | None = BinaryChunk(msg.id, msg.stream, tail, msg.last)
    except (PortError, AssertionError):
        want = None
    if want is None:
        with pytest.raises(PortError):
            decode_binary(body)
    else:
        assert decode_binary(body) == want


def _general(body: bytes) -> tuple[int, bytes] | PortError:
    """The reference meaning of a binary body: JSON part through the general path only."""
    from flux_system.remote._wire import Result, parse_message

    try:
        if len(body) < 5 or body[0] != 0:
            raise PortError("not binary", op="frame", reason=PortReason.PROTOCOL)
        (n,) = struct.unpack(">I", body[1:5])
        if n == 0 or 5 + n > len(body):
            raise PortError("does not fit", op="frame", reason=PortReason.PROTOCOL)
        msg = parse_message(decode_body(body[5 : 5 + n]))
        tail = body[5 + n :]
        ok = (
            isinstance(msg, Result)
            and isinstance(msg.value, dict)
            and msg.value.keys() == {"size"}
            and type(msg.value["size"]) is int
            and msg.value["size"] == len(tail)
        )
        if not ok:
            raise PortError("bad", op="frame", reason=PortReason.PROTOCOL)
        assert isinstance(msg, Result)
        return msg.id, tail
    except PortError as exc:
        return exc


_ids = st.one_of(
    st.integers(0, 2**53 + 2).map(str),
    st.sampled_from(["01", "-1", "1.0", "1e3", '"1"', "true", " 1", "9" * 17]),
)
_sizes = st.one_of(
    st.integers(0, 40).map(str), st.sampled_from(["01", "-0", "3.0", "true", "null", " 3"])
)


@settings(max_examples=400)
@given(
    rid=_ids,
    size=_sizes,
    tail=st.binary(max_size=40),
    extra=st.sampled_from(["", ',"x":1', ',"data":"YQ=="']),
    slack=st.integers(-3, 3),
)
def test_the_canonical_recogniser_agrees_with_the_general_path(
    rid: str, size: str, tail: bytes, extra: str, slack: int
) -> None:
    js = f'{{"type":"result","id":{rid},"value":{{"size":{size}{extra}}}}}'.encode()
    body = b"\x00" + struct.pack(">I", max(len(js) + slack, 0)) + js + tail
    want = _general(body)
    if isinstance(want, PortError):
        with pytest.raises(PortError) as info:
            decode_binary_result(body)
        assert info.value.reason is PortReason.PROTOCOL
    else:
        assert decode_binary_result(body) == want


def _hello(versions: str) -> bytes:
    return frame(
        b'{"type":"hello","protocol":"flux-port","versions":'
        + versions.encode()
        + b',"client":"t"}'
    )


@pytest.mark.parametrize("versions", ["[1]", "[1,2]", "[2]"])
def test_each_version_gets_its_own_form_of_a_small_reads_result(
    tmp_path: Path, versions: str
) -> None:
    data = bytes(range(256)) * 16
    (tmp_path / "f").write_bytes(data)
    request = b'{"type":"request","id":5,"op":"read_bytes","args":{"path":"f","limit":null}}'
    other = b'{"type":"request","id":6,"op":"read_bytes","args":{"limit":null,"path":"f"}}'
    with served(tmp_path) as srv:
        s = raw_connect(srv.target)
        try:
            s.sendall(_hello(versions) + frame(request) + frame(other))
            welcome, first, second = read_frames(s, count=3)
        finally:
            s.close()
    version = json.loads(welcome)["version"]
    assert version == (1 if versions == "[1]" else 2)
    for body, rid in ((first, 5), (second, 6)):  # both spellings of the request
        if version == 1:
            value = json.loads(body)
            assert value["id"] == rid
            assert base64.b64decode(value["value"]["data"]) == data
        else:
            assert decode_binary_result(body) == (rid, data)


def test_the_client_speaks_version_2_and_reads_the_same_bytes(tmp_path: Path) -> None:
    data = b"\x00binary\xff" * 700
    (tmp_path / "f").write_bytes(data)
    with served(tmp_path) as srv, connect(srv.target) as sub:
        assert sub.files._c.version == 2  # type: ignore[attr-defined]
        assert sub.files.read_bytes("f") == data
        assert sub.files.read_bytes("f", limit=len(data)) == data
        with pytest.raises(RefusedError) as info:
            sub.files.read_bytes("f", limit=len(data) - 1)
        assert info.value.remote_reason == WorkspaceReason.TOO_LARGE.value


def test_a_server_refuses_a_binary_frame_from_a_client(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"x")
    binary = encode_binary_result(1, b"abc")
    with served(tmp_path) as srv:
        s = raw_connect(srv.target)
        try:
            s.sendall(_hello("[1,2]"))
            (welcome,) = (json.loads(b) for b in read_frames(s, count=1))
            s.sendall(binary)
            (bye,) = (json.loads(b) for b in read_frames(s))
        finally:
            s.close()
    assert welcome["version"] == 2
    assert bye["type"] == "goodbye" and bye["reason"] == "protocol"


def test_a_version_2_client_gets_binary_chunks_for_large_reads_and_output(
    tmp_path: Path,
) -> None:
    from flux_system.remote import ServerLimits

    data = bytes(range(256)) * 300  # 76,800 bytes: past the inline read, in two chunks
    (tmp_path / "big").write_bytes(data)
    limits = ServerLimits(max_chunk=40_000)
    request = b'{"type":"request","id":5,"op":"read_bytes","args":{"path":"big","limit":null}}'
    with served(tmp_path, limits=limits) as srv:
        s = raw_connect(srv.target)
        try:
            s.sendall(_hello("[1,2]") + frame(request))
            welcome, *bodies = read_frames(s, count=4)
        finally:
            s.close()
        with connect(srv.target) as sub:  # and the client reads them back
            assert sub.files.read_bytes("big") == data
            out: list[bytes] = []
            procs = typing.cast(RemoteProcesses, sub.processes)
            child = procs.spawn(
                ["sh", "-c", "printf 'a\\0b'; printf err >&2"],
                on_output=lambda stream, piece: out.append(piece),
            )
            child.join(30)
            assert b"".join(out) in (b"a\0berr", b"erra\0b")
    assert json.loads(welcome)["version"] == 2
    first, second = decode_binary(bodies[0]), decode_binary(bodies[1])
    assert first == BinaryChunk(5, "download", data[:40_000], False)
    assert second == BinaryChunk(5, "download", data[40_000:], True)
    assert json.loads(bodies[2]) == {"type": "result", "id": 5, "value": {"size": len(data)}}
