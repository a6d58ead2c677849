"""Run the escape plan: each payload sandboxed through the public API, or unsandboxed.

This module is the only part of the suite that touches the sandbox API, and it runs
in two ways: imported by the tests (as root, in the pytest process) and as a script
(``python3 _driver.py < plan.json > result.json``) by the unprivileged user from a
world-readable staged copy, so it imports nothing but the stdlib and ``flux_system``.

A plan is ``{"workspace", "secret_env", "inherit_file", "runs": [...]}``; each run is
``{"name", "mode": "sandbox"|"control", "settings", "argv", "timeout", "workspace"?,
"audit"?, "marker"?, "lock"?}``. The result maps each run name to what happened:
exit code, output, the sandbox's report and audit, or the error that stopped it, and
for a run with a ``marker`` the pids still carrying it right after the run returned.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import fcntl
import json
import os
import subprocess
import sys
import traceback
from pathlib import Path
from typing import Any

_JOIN_SLACK_S = 30.0  # hang guard past a spawned child's own timeout
_CONTROL_ENV = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "LANG": "C.UTF-8"}


def plain(value: object, depth: int = 0) -> Any:
    """A JSON-able rendering of a report/audit object (dataclasses, enums, mappings)."""
    if depth > 12:
        return repr(value)
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, enum.Enum):
        return plain(value.value, depth + 1)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name), depth + 1) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): plain(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [plain(v, depth + 1) for v in value]
    for attr in ("as_dict", "to_dict", "model_dump"):
        fn = getattr(value, attr, None)
        if callable(fn):
            return plain(fn(), depth + 1)
    return repr(value)


def make_sandbox(settings: dict[str, Any]) -> Any:
    """``Sandbox.resolve(SandboxSettings(**settings))`` (DESIGN §2.5)."""
    import importlib

    api = importlib.import_module("flux_system.sandbox")  # loudly missing until it exists
    return api.Sandbox.resolve(api.SandboxSettings(**settings))


def _sandboxed(run: dict[str, Any], workspace: Path) -> dict[str, Any]:
    from flux_system import System, Workspace

    out: dict[str, Any] = {"workspace": str(workspace)}
    sandbox = make_sandbox(run["settings"])
    out["report"] = plain(sandbox.report())
    out["backend"] = getattr(sandbox, "backend", None)
    ws = Workspace(workspace)
    with System(ws, sandbox=sandbox) as system:
        if run.get("audit"):  # SandboxSettings(audit=True) asked for it; restore per profile
            out["restore"] = bool(getattr(getattr(sandbox, "profile", None), "restore", False))
        timeout = run.get("timeout", 60.0)
        via = run.get("via", "run")
        if via == "spawn":  # the same confinement must hold for every entry point
            child = system.spawn(run["argv"], timeout=timeout)
            assert child.join(timeout + _JOIN_SLACK_S), "spawned child did not end"
            output = child.read_output()
            out["survivors"] = _survivors(run)
            out["exit_code"] = child.status().exit_code
            out["stdout"] = output.stdout.decode("utf-8", "replace")
            out["stderr"] = output.stderr.decode("utf-8", "replace")
            out["denials"] = plain(child.denials)
        else:
            if via == "arun":
                result = asyncio.run(system.arun(run["argv"], timeout=timeout))
            else:
                result = system.run(run["argv"], timeout=timeout)
            out["survivors"] = _survivors(run)
            out["exit_code"] = result.exit_code
            out["stdout"] = result.stdout.decode("utf-8", "replace")
            out["stderr"] = result.stderr.decode("utf-8", "replace")
            for attr in ("denials", "audit", "tree_contained"):
                if getattr(result, attr, None) is not None:
                    out[attr] = plain(getattr(result, attr))
    return out


def _control(run: dict[str, Any], workspace: Path, secret_env: dict[str, str]) -> dict[str, Any]:
    proc = subprocess.run(
        run["argv"],
        cwd=workspace,
        env={**_CONTROL_ENV, **secret_env},  # the control's parent holds the secret in its env
        stdin=subprocess.DEVNULL,  # never a terminal: TIOCSTI runs unsandboxed here
        capture_output=True,
        timeout=run.get("timeout", 60.0),
        close_fds=False,  # the positive control of the fd-leak case: inheritable fds pass
        check=False,
    )
    return {
        "survivors": _survivors(run),
        "exit_code": proc.returncode,
        "stdout": proc.stdout.decode("utf-8", "replace"),
        "stderr": proc.stderr.decode("utf-8", "replace"),
    }


def _survivors(run: dict[str, Any]) -> dict[str, Any] | None:
    """Right after the run returned: pids carrying the marker, and whether the lock is free."""
    marker = run.get("marker")
    if not marker:
        return None
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            with contextlib.suppress(OSError):
                if marker.encode() in Path("/proc", entry, "cmdline").read_bytes():
                    pids.append(int(entry))
    lock_free: bool | None = None
    lock = run.get("lock")
    if lock and os.path.exists(lock):
        fd = os.open(lock, os.O_RDONLY | os.O_CLOEXEC)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            lock_free = True
        except BlockingIOError:
            lock_free = False
        finally:
            os.close(fd)
    return {"pids": pids, "lock_free": lock_free}


def execute(plan: dict[str, Any]) -> dict[str, Any]:
    """Run every run of *plan*; an exception stops only its own run and is recorded."""
    results: dict[str, Any] = {}
    saved = {k: os.environ.get(k) for k in plan.get("secret_env", {})}
    os.environ.update(plan.get("secret_env", {}))
    inherit = plan.get("inherit_file")
    held = os.open(inherit, os.O_RDONLY) if inherit else None  # inheritable on purpose
    if held is not None:
        os.set_inheritable(held, True)
    try:
        for run in plan["runs"]:
            workspace = Path(run.get("workspace", plan["workspace"]))
            try:
                if run["mode"] == "control":
                    results[run["name"]] = _control(run, workspace, plan.get("secret_env", {}))
                else:
                    results[run["name"]] = _sandboxed(run, workspace)
            except Exception as exc:  # recorded: the test fails loudly with this text
                results[run["name"]] = {
                    "error": f"{type(exc).__name__}: {exc}",
                    "error_type": type(exc).__name__,
                    "error_fields": plain(
                        {k: getattr(exc, k) for k in ("op", "layer", "reason") if hasattr(exc, k)}
                    ),
                    "traceback": traceback.format_exc(limit=8),
                }
    finally:
        if held is not None:
            os.close(held)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return results


def main() -> int:
    plan = json.load(sys.stdin)
    sys.path.insert(0, plan["lib"])
    json.dump(execute(plan), sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
