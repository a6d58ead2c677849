"""Enforce the import and effect rules of DESIGN §1 by reading the package sources.

- The pure packages (flux_policy, flux_secret, flux_evidence) import nothing from any
  other flux package, only the stdlib and pydantic (flux_secret: plus its native matcher).
- flux_system imports none of the pure packages nor flux_runtime.
- Processes are started only by the spawn builder and the in-sandbox launcher.
- Connections are opened only inside flux_system.
- Outside flux_system, files are opened only by flux_evidence and flux_policy.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("flux_system", "flux_policy", "flux_secret", "flux_evidence", "flux_runtime")
PURE = ("flux_policy", "flux_secret", "flux_evidence")
PURE_EXTRA = {
    "flux_policy": {"pydantic", "pydantic_core"},
    "flux_secret": {"pydantic", "pydantic_core", "ahocorasick_rs", "ahocorasick"},
    "flux_evidence": {"pydantic", "pydantic_core", "cryptography"},
}
# The only modules allowed to create processes: the one spawn builder and the launcher.
SPAWN_ALLOWED = {"flux_system/_spawn.py", "flux_system/sandbox/_launcher.py"}
FILE_ALLOWED_PACKAGES = {"flux_system", "flux_evidence", "flux_policy"}

PROCESS_MODULES = {"subprocess", "multiprocessing", "pty", "asyncio.subprocess"}
PROCESS_CALLS = {
    "os.fork",
    "os.forkpty",
    "os.system",
    "os.popen",
    "os.posix_spawn",
    "os.posix_spawnp",
    "pty.fork",
    "asyncio.create_subprocess_exec",
    "asyncio.create_subprocess_shell",
}
PROCESS_PREFIXES = ("os.exec", "os.spawn")
NET_CALLS = {
    "socket.create_connection",
    "socket.socket",
    "socket.socketpair",
    "httpx.Client",
    "httpx.AsyncClient",
    "httpx.HTTPTransport",
    "httpx.AsyncHTTPTransport",
    "httpx.get",
    "httpx.post",
    "httpx.request",
    "httpx.stream",
    "asyncio.open_connection",
    "urllib.request.urlopen",
}
FILE_CALLS = {"open", "io.open", "os.open", "os.fdopen", "builtins.open"}
PATH_FILE_METHODS = {"open", "read_text", "write_text", "read_bytes", "write_bytes", "touch"}


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    what: str


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner else None
    return None


def _is_path_ctor(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and _dotted(node.func) in {"Path", "pathlib.Path"}


def scan_source(source: str, rel: str) -> dict[str, list[Finding]]:
    """Return findings by kind: imports, process, net, file."""
    tree = ast.parse(source, filename=rel)
    out: dict[str, list[Finding]] = {"imports": [], "process": [], "net": [], "file": []}
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                out["imports"].append(Finding(rel, node.lineno, a.name))
                aliases[a.asname or a.name.split(".")[0]] = (
                    a.name if a.asname else a.name.split(".")[0]
                )
                if a.name in PROCESS_MODULES:
                    out["process"].append(Finding(rel, node.lineno, f"import {a.name}"))
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out["imports"].append(Finding(rel, node.lineno, node.module))
            for a in node.names:
                full = f"{node.module}.{a.name}"
                aliases[a.asname or a.name] = full
                if node.module in PROCESS_MODULES or full in PROCESS_CALLS:
                    out["process"].append(Finding(rel, node.lineno, f"from-import {full}"))
                if full.startswith(PROCESS_PREFIXES):
                    out["process"].append(Finding(rel, node.lineno, f"from-import {full}"))
                if full in NET_CALLS:
                    out["net"].append(Finding(rel, node.lineno, f"from-import {full}"))
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = _dotted(node.func)
        if name is not None:
            head, _, rest = name.partition(".")
            full = (
                f"{aliases[head]}.{rest}" if head in aliases and rest else aliases.get(head, name)
            )
            if not rest:
                full = aliases.get(head, name)
            if full in PROCESS_CALLS or full.startswith(PROCESS_PREFIXES):
                out["process"].append(Finding(rel, node.lineno, full))
            if full in NET_CALLS:
                out["net"].append(Finding(rel, node.lineno, full))
            if full in FILE_CALLS or name in FILE_CALLS:
                out["file"].append(Finding(rel, node.lineno, full))
        func = node.func
        if (
            isinstance(func, ast.Attribute)
            and func.attr in PATH_FILE_METHODS
            and _is_path_ctor(func.value)
        ):
            out["file"].append(Finding(rel, node.lineno, f"Path(...).{func.attr}"))
    return out


def _sources() -> list[tuple[str, str]]:
    result = []
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            result.append((rel, path.read_text(encoding="utf-8")))
    return result


SOURCES = _sources()


def _package(rel: str) -> str:
    return rel.split("/", 1)[0]


@pytest.mark.parametrize(("rel", "source"), SOURCES, ids=[r for r, _ in SOURCES])
def test_module_obeys_rules(rel: str, source: str) -> None:
    findings = scan_source(source, rel)
    pkg = _package(rel)
    problems: list[str] = []
    for f in findings["imports"]:
        top = f.what.split(".")[0]
        if pkg in PURE:
            if top.startswith("flux_") and top != pkg:
                problems.append(f"{rel}:{f.line}: pure package imports {f.what}")
            elif (
                not top.startswith("flux_")
                and top not in sys.stdlib_module_names
                and top not in PURE_EXTRA[pkg]
            ):
                problems.append(f"{rel}:{f.line}: pure package imports non-stdlib {f.what}")
        if pkg == "flux_system" and top in (*PURE, "flux_runtime"):
            problems.append(f"{rel}:{f.line}: flux_system imports {f.what}")
    if rel not in SPAWN_ALLOWED:
        problems += [f"{rel}:{f.line}: starts a process ({f.what})" for f in findings["process"]]
    if pkg != "flux_system":
        problems += [f"{rel}:{f.line}: opens a connection ({f.what})" for f in findings["net"]]
    if pkg not in FILE_ALLOWED_PACKAGES:
        problems += [f"{rel}:{f.line}: opens a file ({f.what})" for f in findings["file"]]
    assert problems == []


NEGATIVE_CONTROL = """
import subprocess
import os
from os import execv as ev
from socket import create_connection
import httpx
subprocess.run(["x"])
os.fork()
ev("/bin/x", ["x"])
create_connection(("h", 1))
httpx.Client()
open("/etc/passwd")
"""


def test_scanner_negative_control() -> None:
    findings = scan_source(NEGATIVE_CONTROL, "flux_runtime/evil.py")
    assert {f.what for f in findings["process"]} >= {
        "import subprocess",
        "os.fork",
        "os.execv",
    }
    assert {f.what for f in findings["net"]} >= {"socket.create_connection", "httpx.Client"}
    assert [f.what for f in findings["file"]] == ["open"]


def test_sources_found() -> None:
    assert any(rel.startswith("flux_system/") for rel, _ in SOURCES)
