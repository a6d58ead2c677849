"""Built-in file operations, over :class:`~flux_system.port.FilesPort` only.

``edit`` replaces one exact match (none or several: refused, never guessed); ``patch``
applies several anchored edits to one file all or nothing (every anchor is checked
against the text as it stands before anything is written, and the file is written
once). Reads are bounded (:data:`READ_LIMIT`).
"""

from __future__ import annotations

import fnmatch
import posixpath
import re
import typing
from collections.abc import Mapping
from typing import Any

from flux_runtime._catalog import Operation, Result, Risk
from flux_runtime._errors import EnvelopeError, EnvelopeReason
from flux_runtime._gate import visible
from flux_system import FluxSystemError

if typing.TYPE_CHECKING:
    from flux_system.port import Substrate

__all__ = ["file_operations"]

READ_LIMIT = 1 << 20
_PATH = {"type": "string", "minLength": 1, "maxLength": 4096}
_MAX_MATCHES = 200


def _obj(props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": props,
        "required": required,
        "additionalProperties": False,
    }


def _ws(path: str) -> list[str]:
    """The policy resource of a workspace path: ``workspace/<normalised path>``.

    Raises:
        EnvelopeError: ``INVALID_INPUT`` for an absolute path — the substrate would
            accept one beneath its root, but a path-scoped rule (``workspace/secrets/**``)
            is written for the relative spelling and would not see it.
    """
    if path.startswith("/"):
        raise EnvelopeError(
            "workspace paths are relative to the workspace (an absolute path is refused)",
            op="path",
            reason=EnvelopeReason.INVALID_INPUT,
            target=path[:200],
        )
    norm = posixpath.normpath(path)
    return ["workspace" if norm == "." else f"workspace/{norm}"]


def _path_res(inp: Mapping[str, Any]) -> list[str]:
    return _ws(inp.get("path", "."))


def _path(inp: Mapping[str, Any]) -> list[str]:
    return [inp.get("path", ".")]


def _paths(inp: Mapping[str, Any]) -> list[str]:
    return list(inp["paths"])


def _fail(op: str, path: str, why: str) -> EnvelopeError:
    return EnvelopeError(why, op=op, reason=EnvelopeReason.OPERATION_FAILED, target=path)


def _read(s: Substrate, inp: Mapping[str, Any]) -> Result:
    text = s.files.read_text(inp["path"], limit=READ_LIMIT)
    return Result({"path": inp["path"], "text": text}, text)


def _read_many(s: Substrate, inp: Mapping[str, Any]) -> Result:
    files = {p: s.files.read_text(p, limit=READ_LIMIT) for p in inp["paths"]}
    view = "\n".join(f"==> {p} <==\n{t}" for p, t in files.items())
    return Result({"files": files}, view)


def _listing(s: Substrate, base: str) -> list[str]:
    """The names below *base* this operation may look at (the policy, per file)."""
    return sorted(n for n in s.files.walk(base, max_entries=10_000) if visible(n))


def _glob(s: Substrate, inp: Mapping[str, Any]) -> Result:
    names = [n for n in _listing(s, inp.get("path", ".")) if fnmatch.fnmatch(n, inp["pattern"])]
    return Result({"matches": names}, "\n".join(names) or "(no match)")


def _text_or_none(s: Substrate, name: str) -> str:
    try:
        return s.files.read_text(name, limit=READ_LIMIT)
    except (FluxSystemError, UnicodeDecodeError):  # unreadable or too large: no match
        return ""


def _grep(s: Substrate, inp: Mapping[str, Any]) -> Result:
    try:
        rx = re.compile(inp["pattern"])
    except re.error as exc:
        raise _fail("grep", inp["pattern"][:80], f"bad pattern: {exc}") from None
    hits: list[dict[str, Any]] = []
    for name in _listing(s, inp.get("path", ".")):
        if len(hits) >= _MAX_MATCHES or s.files.is_dir(name):
            continue
        text = _text_or_none(s, name)
        for no, line in enumerate(text.splitlines(), 1):
            if rx.search(line):
                hits.append({"path": name, "line": no, "text": line[:400]})
    view = "\n".join(f"{h['path']}:{h['line']}:{h['text']}" for h in hits[:_MAX_MATCHES])
    return Result({"matches": hits[:_MAX_MATCHES]}, view or "(no match)")


def _stat(s: Substrate, inp: Mapping[str, Any]) -> Result:
    info = s.files.stat(inp["path"])
    content = {
        "path": inp["path"],
        "kind": info.kind.value,
        "size": info.size,
        "mode": info.mode,
        "mtime": info.mtime,
    }
    return Result(content, f"{inp['path']}: {info.kind.value}, {info.size} bytes")


def _exists(s: Substrate, inp: Mapping[str, Any]) -> Result:
    found = s.files.exists(inp["path"])
    return Result({"path": inp["path"], "exists": found}, f"{inp['path']}: {found}")


def _write(s: Substrate, inp: Mapping[str, Any]) -> Result:
    data = inp["content"].encode("utf-8")
    s.files.write_bytes(inp["path"], data)
    return Result({"path": inp["path"], "bytes": len(data)}, f"wrote {len(data)} bytes")


def _append(s: Substrate, inp: Mapping[str, Any]) -> Result:
    data = inp["content"].encode("utf-8")
    s.files.append_bytes(inp["path"], data)
    return Result({"path": inp["path"], "bytes": len(data)}, f"appended {len(data)} bytes")


def _apply(op: str, path: str, text: str, old: str, new: str) -> str:
    count = text.count(old) if old else 0
    if count != 1:
        why = "no exact match" if count == 0 else f"ambiguous: {count} matches"
        raise _fail(op, path, f"{why} for the text to replace")
    return text.replace(old, new, 1)


def _edit(s: Substrate, inp: Mapping[str, Any]) -> Result:
    path = inp["path"]
    text = _apply("edit", path, s.files.read_text(path, limit=READ_LIMIT), inp["old"], inp["new"])
    s.files.write_bytes(path, text.encode("utf-8"))
    return Result({"path": path, "edits": 1}, f"edited {path}")


def _patch(s: Substrate, inp: Mapping[str, Any]) -> Result:
    path = inp["path"]
    text = s.files.read_text(path, limit=READ_LIMIT)
    for i, edit in enumerate(inp["edits"]):
        text = _apply(f"patch[{i}]", path, text, edit["old"], edit["new"])
    s.files.write_bytes(path, text.encode("utf-8"))  # once: all or nothing
    return Result({"path": path, "edits": len(inp["edits"])}, f"patched {path}")


def _remove(s: Substrate, inp: Mapping[str, Any]) -> Result:
    s.files.remove(inp["path"], recursive=bool(inp.get("recursive", False)))
    return Result({"path": inp["path"], "removed": True}, f"removed {inp['path']}")


_EDIT = _obj({"old": {"type": "string", "minLength": 1}, "new": {"type": "string"}}, ["old", "new"])


def file_operations() -> list[Operation]:
    path_only = _obj({"path": _PATH}, ["path"])
    search = _obj(
        {"pattern": {"type": "string", "minLength": 1, "maxLength": 1000}, "path": _PATH},
        ["pattern"],
    )
    content = _obj(
        {"path": _PATH, "content": {"type": "string", "maxLength": READ_LIMIT}}, ["path", "content"]
    )
    low, med = Risk.LOW, Risk.MEDIUM
    return [
        Operation(
            "read",
            "Read a UTF-8 text file.",
            path_only,
            frozenset({"read"}),
            low,
            True,
            _read,
            _path_res,
            paths=_path,
        ),
        Operation(
            "read_many",
            "Read several text files.",
            _obj(
                {"paths": {"type": "array", "items": _PATH, "minItems": 1, "maxItems": 50}},
                ["paths"],
            ),
            frozenset({"read"}),
            low,
            True,
            _read_many,
            lambda i: [r for p in i["paths"] for r in _ws(p)],
            paths=_paths,
        ),
        Operation(
            "grep",
            "Search file lines for a regular expression.",
            search,
            frozenset({"read"}),
            low,
            True,
            _grep,
            _path_res,
            paths=_path,
        ),
        Operation(
            "glob",
            "List files matching a glob pattern.",
            search,
            frozenset({"read"}),
            low,
            True,
            _glob,
            _path_res,
            paths=_path,
        ),
        Operation(
            "file_stat",
            "Kind, size, mode and mtime of a path.",
            path_only,
            frozenset({"read"}),
            low,
            True,
            _stat,
            _path_res,
            paths=_path,
        ),
        Operation(
            "path_exists",
            "Whether a path exists.",
            path_only,
            frozenset({"read"}),
            low,
            True,
            _exists,
            _path_res,
            paths=_path,
        ),
        Operation(
            "write",
            "Replace a file's content (creating it).",
            content,
            frozenset({"write", "filesystem"}),
            med,
            True,
            _write,
            _path_res,
            paths=_path,
        ),
        Operation(
            "append",
            "Append text to a file.",
            content,
            frozenset({"write", "filesystem"}),
            med,
            False,
            _append,
            _path_res,
            paths=_path,
        ),
        Operation(
            "edit",
            "Replace one exact, unique occurrence of `old` by `new`.",
            _obj({"path": _PATH, **_EDIT["properties"]}, ["path", "old", "new"]),
            frozenset({"write", "filesystem"}),
            med,
            False,
            _edit,
            _path_res,
            paths=_path,
        ),
        Operation(
            "patch",
            "Several anchored edits to one file, all or nothing.",
            _obj(
                {
                    "path": _PATH,
                    "edits": {"type": "array", "items": _EDIT, "minItems": 1, "maxItems": 100},
                },
                ["path", "edits"],
            ),
            frozenset({"write", "filesystem"}),
            med,
            False,
            _patch,
            _path_res,
            paths=_path,
        ),
        Operation(
            "remove",
            "Delete a file (or a directory tree with recursive).",
            _obj({"path": _PATH, "recursive": {"type": "boolean"}}, ["path"]),
            frozenset({"write", "filesystem"}),
            Risk.DESTRUCTIVE,
            True,
            _remove,
            _path_res,
            paths=_path,
            follow="name",  # remove acts on a final link itself
        ),
    ]
