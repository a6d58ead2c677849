"""Enforce the import and effect rules of DESIGN §1 by reading the package sources.

- The pure packages (flux_policy, flux_secret, flux_evidence) import nothing from any
  other flux package, only the stdlib and pydantic (flux_secret: plus its native matcher).
- flux_system imports none of the pure packages nor flux_runtime.
- Processes are started only by the spawn builder and the in-sandbox launcher.
- Connections are opened only inside flux_system.
- Outside flux_system, files are opened only by flux_evidence, flux_policy and the one
  module of flux_runtime that holds its own files (flux_runtime/_files.py).
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
SPAWN_ALLOWED = {
    "flux_system/process/_spawn.py",
    "flux_system/process/_posix_spawn.py",  # the C library's posix_spawn (decision 0138)
    "flux_system/sandbox/_launcher.py",
}
FILE_ALLOWED_PACKAGES = {"flux_system", "flux_evidence", "flux_policy"}
# flux_runtime's own files (run reports, later its session store) go through one module.
FILE_ALLOWED_MODULES = {"flux_runtime/_files.py"}

PROCESS_MODULES = {
    "subprocess",
    "multiprocessing",
    "pty",
    "asyncio.subprocess",
    "flux_system.process._posix_spawn",
}
# Any attribute of these names (a C library's function looked up through ctypes too).
PROCESS_ATTRIBUTES = {"posix_spawn", "posix_spawnp", "fork", "vfork", "execve"}
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
        if isinstance(node, ast.Attribute) and node.attr in PROCESS_ATTRIBUTES:
            out["process"].append(Finding(rel, node.lineno, f".{node.attr}"))
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
    if pkg not in FILE_ALLOWED_PACKAGES and rel not in FILE_ALLOWED_MODULES:
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
import ctypes
ctypes.CDLL(None).posix_spawn
import flux_system.process._posix_spawn as spawner
"""


def test_scanner_negative_control() -> None:
    findings = scan_source(NEGATIVE_CONTROL, "flux_runtime/evil.py")
    assert {f.what for f in findings["process"]} >= {
        "import subprocess",
        "os.fork",
        "os.execv",
        ".posix_spawn",
        "import flux_system.process._posix_spawn",
    }
    assert {f.what for f in findings["net"]} >= {"socket.create_connection", "httpx.Client"}
    assert [f.what for f in findings["file"]] == ["open"]


def test_sources_found() -> None:
    assert any(rel.startswith("flux_system/") for rel, _ in SOURCES)


# --- flux_system's layout (docs/decisions/0002) --------------------------------------
# Subpackages import downwards only. A module may import its own subpackage, and any
# subpackage of a strictly lower rank; ``process`` and ``net`` share a rank and so never
# import each other, and ``process`` never imports ``sandbox``.
LAYER_RANK = {
    "_exceptions": 0,
    "_values": 0,  # the value-class decorator (decision 0136): imports nothing of ours
    "workspace": 1,
    "process": 2,
    "net": 2,
    "sandbox": 3,
    "port": 4,
    "remote": 5,
    "testing": 6,
}
TOP_LEVEL_ALLOWED = {"__init__.py", "_exceptions.py", "lowlevel.py"}


def _layer(module: str) -> str | None:
    """The layer of a dotted ``flux_system`` module name (``None``: the package root)."""
    parts = module.split(".")
    if parts[0] != "flux_system" or len(parts) == 1:
        return None
    return parts[1]


def _module_name(rel: str) -> str:
    name = rel[: -len(".py")].replace("/", ".")
    return name.removesuffix(".__init__")


def _package_of(rel: str) -> str:
    """The package that relative imports in *rel* are anchored to."""
    name = _module_name(rel)
    return name if rel.endswith("/__init__.py") else name.rpartition(".")[0]


def _runtime_imports(source: str, package: str) -> list[tuple[int, str]]:
    """Module-level imports that run at import time (``TYPE_CHECKING`` blocks aside)."""
    tree = ast.parse(source)
    out: list[tuple[int, str]] = []

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.If):
                test = _dotted(node.test)
                if test in {"TYPE_CHECKING", "typing.TYPE_CHECKING"}:
                    visit(node.orelse)
                    continue
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)
                for handler in node.handlers:
                    visit(handler.body)
                visit(node.orelse)
                visit(node.finalbody)
            elif isinstance(node, ast.Import):
                out.extend((node.lineno, a.name) for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                out.append((node.lineno, base))
                out.extend((node.lineno, f"{base}.{a.name}") for a in node.names)

    visit(tree.body)
    return out


def layer_problems(rel: str, source: str) -> list[str]:
    """Imports of *rel* (a ``flux_system/...`` path) that go upwards or sideways."""
    module = _module_name(rel)
    own = _layer(module)
    if own is None or own not in LAYER_RANK:
        return [] if own is None else [f"{rel}: {own} is not a known layer"]
    problems = []
    for line, target in _runtime_imports(source, _package_of(rel)):
        dep = _layer(target)
        if dep is None or dep == own or dep not in LAYER_RANK:
            continue
        if LAYER_RANK[dep] >= LAYER_RANK[own]:
            problems.append(f"{rel}:{line}: {own} imports {target} ({dep} is not below it)")
    return problems


SYSTEM_SOURCES = [(rel, src) for rel, src in SOURCES if rel.startswith("flux_system/")]


@pytest.mark.parametrize(("rel", "source"), SYSTEM_SOURCES, ids=[r for r, _ in SYSTEM_SOURCES])
def test_subpackages_import_downwards_only(rel: str, source: str) -> None:
    assert layer_problems(rel, source) == []


def test_layer_rule_negative_control() -> None:
    upward = "from flux_system.process._spawn import _build_spawn\n"
    sideways = "import flux_system.net._guard\n"
    hidden = "import typing\nif typing.TYPE_CHECKING:\n    from flux_system.process import System\n"
    assert layer_problems("flux_system/workspace/_evil.py", upward) != []
    assert layer_problems("flux_system/process/_evil.py", sideways) != []
    assert layer_problems("flux_system/workspace/_evil.py", hidden) == []
    assert (
        layer_problems("flux_system/process/_ok.py", "from flux_system.workspace import _base\n")
        == []
    )


def test_top_level_holds_only_the_package_root_and_the_error_tree() -> None:
    top = {p.name for p in (ROOT / "flux_system").glob("*.py")}
    assert top <= TOP_LEVEL_ALLOWED, sorted(top - TOP_LEVEL_ALLOWED)
    subpackages = {p.name for p in (ROOT / "flux_system").iterdir() if (p / "__init__.py").exists()}
    assert subpackages <= set(LAYER_RANK), sorted(subpackages - set(LAYER_RANK))


def _import_cycles(sources: list[tuple[str, str]]) -> list[list[str]]:
    modules = {_module_name(rel): (rel, src) for rel, src in sources}
    graph: dict[str, set[str]] = {}
    for name, (rel, src) in modules.items():
        deps = set()
        for _, target in _runtime_imports(src, _package_of(rel)):
            # ``from pkg import name`` names a module when pkg.name is one.
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                deps.add(target)
        graph[name] = deps
    # A package's __init__ importing its own modules is how re-export works; a module
    # importing back up to its own package's __init__ is the circle to refuse.
    cycles: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def dfs(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                cycles.append([*stack[stack.index(dep) :], dep])
            elif dep not in state:
                dfs(dep)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            dfs(node)
    return cycles


def test_no_import_circles() -> None:
    assert _import_cycles(SOURCES) == []


def test_import_circle_negative_control() -> None:
    fake = [
        ("flux_system/workspace/_a.py", "from flux_system.workspace._b import x\n"),
        ("flux_system/workspace/_b.py", "from flux_system.workspace import _a\n"),
    ]
    assert _import_cycles(fake) != []
