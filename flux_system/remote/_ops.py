"""The operations of protocol version 1: argument models and value encodings.

Each operation has one pydantic model for its ``args`` (strict, unknown keys refused)
and one JSON shape for its ``value`` (PROTOCOL.md). Byte strings travel as base64 in
JSON, or as ``chunk`` frames when they may exceed a frame (file contents, process
streams). The server decodes ``args`` here; the client encodes them here too, so both
sides share one definition.
"""

from __future__ import annotations

import base64
import binascii
import typing
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from flux_system._exceptions import PortError, PortReason
from flux_system.port import HttpResult, Identity, Metric, Metrics
from flux_system.process import RunResult
from flux_system.workspace import FileInfo, FileKind

__all__ = [
    "ARGS",
    "FILE_OPS",
    "IDEMPOTENT",
    "MUTATIONS",
    "b64d",
    "b64e",
    "decode_file_info",
    "decode_http",
    "decode_identity",
    "decode_metrics",
    "decode_run_result",
    "encode_file_info",
    "encode_http",
    "encode_identity",
    "encode_metrics",
    "encode_run_result",
]

Path = Annotated[str, Field(min_length=1, max_length=8192)]
Size = Annotated[int, Field(ge=0, le=1 << 40)]
Argv = Annotated[
    list[Annotated[str, Field(max_length=131072)]], Field(min_length=1, max_length=4096)
]
Env = Annotated[dict[str, Annotated[str, Field(max_length=131072)]], Field(max_length=4096)]
Timeout = Annotated[float, Field(gt=0, le=1e9)]


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class PathArgs(_Args):
    path: Path


class StatArgs(_Args):
    path: Path
    follow_symlinks: bool = True


class ReadArgs(_Args):
    path: Path
    limit: Size | None = None


class WriteArgs(_Args):
    """Contents follow as ``upload`` chunks, exactly *size* bytes, the last one ``last``."""

    path: Path
    size: Size
    create_parents: bool = True


class AppendArgs(_Args):
    path: Path
    size: Size


class MkdirArgs(_Args):
    path: Path
    parents: bool = True
    exist_ok: bool = True


class RemoveArgs(_Args):
    path: Path
    recursive: bool = False


class RenameArgs(_Args):
    src: Path
    dst: Path


class ListArgs(_Args):
    path: Path = "."


class WalkArgs(_Args):
    path: Path = "."
    max_entries: Annotated[int, Field(ge=1, le=10_000_000)] | None = None


class RunArgs(_Args):
    """``stdin_size``: bytes of stdin that follow as ``stdin`` chunks (``None``: no stdin)."""

    argv: Argv
    env: Env | None = None
    stdin_size: Size | None = None
    timeout: Timeout | None = 60.0
    cwd: Path = "."


class SpawnArgs(_Args):
    """``stdin``: ``"none"`` (the child gets /dev/null) or ``"stream"`` (``stdin``
    chunks follow, whenever the client sends them; ``last`` closes it)."""

    argv: Argv
    env: Env | None = None
    stdin: Literal["none", "stream"] = "none"
    timeout: Timeout | None = None
    cwd: Path = "."


class KillArgs(_Args):
    """Kill the tree of the child started by spawn request *child*."""

    child: Annotated[int, Field(ge=1, le=2**53 - 1)]


class HttpArgs(_Args):
    method: Annotated[str, Field(pattern=r"^[A-Z]{1,16}$")]
    url: Annotated[str, Field(min_length=1, max_length=8192)]
    headers: Annotated[
        dict[str, Annotated[str, Field(max_length=16384)]], Field(max_length=256)
    ] = {}
    body: Annotated[str, Field(max_length=12 * 1024 * 1024)] | None = None
    timeout: Timeout = 30.0


class NoArgs(_Args):
    pass


ARGS: dict[str, type[_Args]] = {
    "read_bytes": ReadArgs,
    "write_bytes": WriteArgs,
    "append_bytes": AppendArgs,
    "mkdir": MkdirArgs,
    "remove": RemoveArgs,
    "rename": RenameArgs,
    "list_dir": ListArgs,
    "walk": WalkArgs,
    "stat": StatArgs,
    "resolve": PathArgs,
    "exists": PathArgs,
    "is_dir": PathArgs,
    "run": RunArgs,
    "spawn": SpawnArgs,
    "kill": KillArgs,
    "http_request": HttpArgs,
    "metrics": NoArgs,
    "identity": NoArgs,
}
FILE_OPS = frozenset(
    {
        "read_bytes",
        "write_bytes",
        "append_bytes",
        "mkdir",
        "remove",
        "rename",
        "list_dir",
        "walk",
        "stat",
        "resolve",
        "exists",
        "is_dir",
    }
)
IDEMPOTENT = frozenset(
    {"read_bytes", "list_dir", "walk", "stat", "resolve", "exists", "is_dir"}
    | {"metrics", "identity"}
)
"""Operations a client may retry after ``Unreachable``: they change nothing."""
MUTATIONS = frozenset(ARGS) - IDEMPOTENT
"""Never retried automatically; a lost answer is ``UnknownOutcome``."""


def b64e(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def b64d(text: str, *, what: str = "data") -> bytes:
    """Strict base64 decoding (no whitespace, correct padding).

    Raises:
        PortError: ``PROTOCOL`` when *text* is not canonical base64.
    """
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError) as exc:
        raise _bad(f"{what} is not valid base64") from exc


def encode_file_info(info: FileInfo) -> dict[str, object]:
    return {
        "kind": info.kind.value,
        "size": info.size,
        "mode": info.mode,
        "mtime": info.mtime,
        "nlink": info.nlink,
        "inode": info.inode,
        "device": info.device,
        "uid": info.uid,
        "gid": info.gid,
    }


def _bad(what: str) -> PortError:
    return PortError(what, op="frame", reason=PortReason.PROTOCOL)


def _field(value: dict[str, typing.Any], name: str, kind: type | tuple[type, ...]) -> typing.Any:
    """*value[name]* if it has type *kind* (``bool`` never passes for ``int``)."""
    item = value.get(name)
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if (isinstance(item, bool) and bool not in kinds) or not isinstance(item, kinds):
        raise _bad(f"result field {name!r} is missing or mistyped")
    return item


def _real(item: object, name: str) -> float:
    try:
        return float(typing.cast("int | float", item))
    except OverflowError:  # an integer past float's range (JSON allows any length)
        raise _bad(f"result field {name!r} is out of range") from None


def _number(value: dict[str, typing.Any], name: str) -> float:
    """*value[name]*, an int or float, as a float (``bool`` refused, overflow refused)."""
    return _real(_field(value, name, (int, float)), name)


def decode_file_info(value: object) -> FileInfo:
    if not isinstance(value, dict):
        raise _bad("stat result is not an object")
    try:
        kind = FileKind(_field(value, "kind", str))
    except ValueError as exc:
        raise _bad("stat result has an unknown kind") from exc
    return FileInfo(
        kind=kind,
        size=_field(value, "size", int),
        mode=_field(value, "mode", int),
        mtime=_number(value, "mtime"),
        nlink=_field(value, "nlink", int),
        inode=_field(value, "inode", int),
        device=_field(value, "device", int),
        uid=_field(value, "uid", int),
        gid=_field(value, "gid", int),
    )


def encode_run_result(result: RunResult) -> dict[str, object]:
    return {
        "exit_code": result.exit_code,
        "signal": result.signal,
        "stdout": b64e(result.stdout),
        "stderr": b64e(result.stderr),
        "stdout_truncated": result.stdout_truncated,
        "stderr_truncated": result.stderr_truncated,
        "stdout_dropped": result.stdout_dropped,
        "stderr_dropped": result.stderr_dropped,
        "duration_s": result.duration_s,
        "tree_contained": result.tree_contained,
    }


def decode_run_result(value: object) -> RunResult:
    if not isinstance(value, dict):
        raise _bad("run result is not an object")
    signal = value.get("signal")
    if signal is not None and (isinstance(signal, bool) or not isinstance(signal, int)):
        raise _bad("run result signal is mistyped")
    return RunResult(
        exit_code=_field(value, "exit_code", int),
        stdout=b64d(_field(value, "stdout", str), what="stdout"),
        stderr=b64d(_field(value, "stderr", str), what="stderr"),
        stdout_truncated=_field(value, "stdout_truncated", bool),
        stderr_truncated=_field(value, "stderr_truncated", bool),
        duration_s=_number(value, "duration_s"),
        signal=signal,
        stdout_dropped=_field(value, "stdout_dropped", int),
        stderr_dropped=_field(value, "stderr_dropped", int),
        tree_contained=_field(value, "tree_contained", bool),
    )


def encode_http(result: HttpResult) -> dict[str, object]:
    return {
        "status": result.status,
        "headers": [[k, v] for k, v in result.headers],
        "body": b64e(result.body),
        "truncated": result.truncated,
        "url": result.url,
        "waited": result.waited,
        "retries": result.retries,
    }


def decode_http(value: object) -> HttpResult:
    if not isinstance(value, dict):
        raise _bad("http result is not an object")
    headers = _field(value, "headers", list)
    pairs: list[tuple[str, str]] = []
    for item in headers:
        if not (
            isinstance(item, list) and len(item) == 2 and all(isinstance(x, str) for x in item)
        ):
            raise _bad("http result header is mistyped")
        pairs.append((item[0], item[1]))
    return HttpResult(
        status=_field(value, "status", int),
        headers=tuple(pairs),
        body=b64d(_field(value, "body", str), what="body"),
        truncated=_field(value, "truncated", bool),
        url=_field(value, "url", str),
        waited=_number(value, "waited"),
        retries=_field(value, "retries", int),
    )


_METRIC_NAMES = (
    "cpu_percent",
    "load_1m",
    "memory_used",
    "memory_total",
    "swap_used",
    "disk_used",
    "disk_total",
    "uptime",
)


def encode_metrics(m: Metrics) -> dict[str, object]:
    out: dict[str, object] = {"taken_at": m.taken_at}
    for name in _METRIC_NAMES:
        metric: Metric = getattr(m, name)
        out[name] = {"value": metric.value, "unit": metric.unit, "unavailable": metric.unavailable}
    return out


def decode_metrics(value: object) -> Metrics:
    if not isinstance(value, dict):
        raise _bad("metrics result is not an object")
    parts: dict[str, Metric] = {}
    for name in _METRIC_NAMES:
        item = value.get(name)
        if not isinstance(item, dict):
            raise _bad(f"metric {name!r} is missing")
        raw = item.get("value")
        why = item.get("unavailable")
        unit = item.get("unit")
        if (
            not isinstance(unit, str)
            or (raw is not None and (isinstance(raw, bool) or not isinstance(raw, (int, float))))
            or (why is not None and not isinstance(why, str))
            or ((raw is None) == (why is None))
        ):
            raise _bad(f"metric {name!r} is malformed")
        parts[name] = Metric(None if raw is None else _real(raw, name), unit, why)
    return Metrics(taken_at=_number(value, "taken_at"), **parts)


def encode_identity(me: Identity, workspace: str) -> dict[str, object]:
    return {
        "hostname": me.hostname,
        "system": me.system,
        "release": me.release,
        "machine": me.machine,
        "uid": me.uid,
        "pid": me.pid,
        "flux_version": me.flux_version,
        "sandbox": list(me.sandbox),
        "workspace": workspace,
    }


def decode_identity(value: object) -> Identity:
    """The far side's identity claims, always marked ``remotely_reported=True``."""
    if not isinstance(value, dict):
        raise _bad("identity is not an object")
    sandbox = _field(value, "sandbox", list)
    if not all(isinstance(s, str) for s in sandbox):
        raise _bad("identity sandbox is mistyped")
    return Identity(
        hostname=_field(value, "hostname", str),
        system=_field(value, "system", str),
        release=_field(value, "release", str),
        machine=_field(value, "machine", str),
        uid=_field(value, "uid", int),
        pid=_field(value, "pid", int),
        flux_version=_field(value, "flux_version", str),
        sandbox=tuple(sandbox),
        remotely_reported=True,
    )
