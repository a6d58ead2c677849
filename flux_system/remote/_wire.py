"""The wire messages of the port protocol, version 1 (ports/PROTOCOL.md).

Pydantic models, strict: unknown fields refused, types not coerced, every string and
list bounded. They exist only at the boundary: the server and client convert them to
the plain values of :mod:`flux_system.port` at once. The JSON Schemas in
``ports/schema/v1/`` are generated from these models (``python -m
flux_system.remote._schema``); a test fails when the two drift apart.
"""

from __future__ import annotations

import base64
import binascii
import typing
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, TypeAdapter

__all__ = [
    "MESSAGE_TYPES",
    "PROTOCOL_NAME",
    "SUPPORTED_VERSIONS",
    "Cancel",
    "Chunk",
    "ErrorBody",
    "ErrorMsg",
    "Event",
    "Goodbye",
    "Hello",
    "Limits",
    "Message",
    "Ping",
    "Pong",
    "Request",
    "Result",
    "ServerInfo",
    "Welcome",
    "parse_message",
]

PROTOCOL_NAME = "flux-port"
SUPPORTED_VERSIONS = (1, 2)  # 2: binary read results (_binary.py)

MAX_ID = 2**53 - 1  # exact in every JSON implementation (JavaScript's Number included)
Id = Annotated[int, Field(ge=1, le=MAX_ID, strict=True)]
Text = Annotated[str, Field(max_length=4096)]
Name = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[a-z][a-z0-9_.]*$")]
_B64_PATTERN = r"^[A-Za-z0-9+/]*={0,2}$"


def _canonical_base64(text: str) -> str:
    # Strict decoding in C (a regex over megabytes of data costs ten times more); the
    # schema still states the pattern for other implementations.
    try:
        base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError) as exc:
        raise ValueError("not canonical base64") from exc
    return text


B64 = Annotated[
    str,
    Field(max_length=12 * 1024 * 1024, json_schema_extra={"pattern": _B64_PATTERN}),
    AfterValidator(_canonical_base64),
]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Hello(_Model):
    """Client → server, first frame: who speaks which versions, with what credential."""

    type: Literal["hello"]
    protocol: Literal["flux-port"]
    versions: Annotated[
        list[Annotated[int, Field(ge=1, le=1000)]], Field(min_length=1, max_length=16)
    ]
    client: Text
    token: Annotated[str, Field(max_length=4096)] | None = None


class Limits(_Model):
    """What the server enforces on this connection."""

    max_frame: Annotated[int, Field(ge=1024)]
    max_chunk: Annotated[int, Field(ge=1)]
    max_in_flight: Annotated[int, Field(ge=1)]
    max_buffered_output: Annotated[int, Field(ge=1)]
    heartbeat_s: Annotated[float, Field(gt=0)]


class ServerInfo(_Model):
    """The server's identity claims (a client marks them ``remotely_reported``)."""

    hostname: Text
    system: Text
    release: Text
    machine: Text
    uid: int
    pid: int
    flux_version: Text
    sandbox: Annotated[list[Text], Field(max_length=64)]
    workspace: Text


class Welcome(_Model):
    """Server → client, first frame on success."""

    type: Literal["welcome"]
    protocol: Literal["flux-port"]
    version: Annotated[int, Field(ge=1)]
    server: ServerInfo
    operations: Annotated[list[Name], Field(max_length=256)]
    limits: Limits


class Goodbye(_Model):
    """Either side, last frame: why the connection ends (handshake refusals included)."""

    type: Literal["goodbye"]
    reason: Literal["version", "auth", "protocol", "shutdown", "limit"]
    message: Text


class Request(_Model):
    """Client → server: run *op* with *args*; answered by exactly one result or error."""

    type: Literal["request"]
    id: Id
    op: Name
    args: dict[str, typing.Any]


class Cancel(_Model):
    """Client → server: abandon request *id* (a spawned child is killed)."""

    type: Literal["cancel"]
    id: Id


class Chunk(_Model):
    """Either direction: a piece of a byte stream belonging to request *id*.

    ``stream`` names which: ``"upload"`` (file contents to write, client → server),
    ``"download"`` (file contents read), ``"stdin"`` (to a spawned child), ``"stdout"``
    and ``"stderr"`` (from it). ``last`` ends that stream.
    """

    type: Literal["chunk"]
    id: Id
    stream: Literal["upload", "download", "stdin", "stdout", "stderr"]
    data: B64
    last: bool = False


class Result(_Model):
    """Server → client: the request's value (its shape is the op's, PROTOCOL.md)."""

    type: Literal["result"]
    id: Id
    value: typing.Any


class ErrorBody(_Model):
    """A failure, classified by structure: ``kind`` decides what the client raises.

    ``kind``: ``refused`` (the far side's guard said no), ``unserved``,
    ``unknown_outcome`` (accepted, result unprovable), ``invalid`` (the request
    itself was malformed), ``cancelled``. ``error`` is the far side's error class
    name, ``reason`` its reason value, for display and mapping.
    """

    kind: Literal["refused", "unserved", "unknown_outcome", "invalid", "cancelled"]
    error: Text
    op: Text
    target: Text | None = None
    reason: Text
    message: Text


class ErrorMsg(_Model):
    type: Literal["error"]
    id: Annotated[int, Field(ge=0, le=MAX_ID, strict=True)]  # 0: not tied to a request
    error: ErrorBody


class Event(_Model):
    """Server → client: a spawned child's life: ``started``, then ``exited`` or
    ``failed`` exactly once (output travels as ``chunk`` frames before it). ``stdin``
    events acknowledge a streamed stdin: ``written`` bytes reached the child so far."""

    type: Literal["event"]
    id: Id
    event: Literal["started", "stdin", "exited", "failed"]
    pid: int | None = None
    exit_code: int | None = None
    signal: int | None = None
    timed_out: bool = False
    stdout_dropped: int = 0
    stderr_dropped: int = 0
    written: Annotated[int, Field(ge=0)] = 0
    error: ErrorBody | None = None


class Ping(_Model):
    type: Literal["ping"]
    nonce: Annotated[int, Field(ge=0, le=MAX_ID, strict=True)]


class Pong(_Model):
    type: Literal["pong"]
    nonce: Annotated[int, Field(ge=0, le=MAX_ID, strict=True)]


Message = Annotated[
    Hello | Welcome | Goodbye | Request | Cancel | Chunk | Result | ErrorMsg | Event | Ping | Pong,
    Field(discriminator="type"),
]
MESSAGE_TYPES: dict[str, type[_Model]] = {
    "hello": Hello,
    "welcome": Welcome,
    "goodbye": Goodbye,
    "request": Request,
    "cancel": Cancel,
    "chunk": Chunk,
    "result": Result,
    "error": ErrorMsg,
    "event": Event,
    "ping": Ping,
    "pong": Pong,
}
_ADAPTER: TypeAdapter[Message] = TypeAdapter(Message)


def parse_message(obj: dict[str, object]) -> Message:
    """Validate one decoded frame body as a message.

    Raises:
        PortError: ``PROTOCOL``, naming the message type and the first bad field (never
            echoing field values, which may be file contents or tokens).
    """
    from pydantic import ValidationError

    from flux_system._exceptions import PortError, PortReason

    try:
        return _ADAPTER.validate_python(obj)
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "message"
        kind = obj.get("type") if isinstance(obj.get("type"), str) else "unknown"
        raise PortError(
            f"invalid {str(kind)[:32]!r} message: {where}: {first.get('msg', 'invalid')}"[:300],
            op="frame",
            reason=PortReason.PROTOCOL,
        ) from None
