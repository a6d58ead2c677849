"""Stage what the unprivileged side runs where that user can read it.

The checkout may sit under a directory the unprivileged user cannot enter (here
``/root``, mode 0700), and so may the interpreter (pyenv under ``/root``). So the
driver, a copy of ``flux_system`` and of its installed dependencies go into a
world-readable directory, and the interpreter is the first of this one, its base, or
the system's same-version ``python3`` that the unprivileged user can actually start
(same major.minor, so the copied compiled extensions load).
"""

from __future__ import annotations

import functools
import importlib.metadata as md
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests._capabilities import require

from ._host import user_prefix

REPO = Path(__file__).resolve().parents[4]
DRIVER = Path(__file__).with_name("_driver.py")
_PROBE_TIMEOUT_S = 60  # hang guard for starting an interpreter
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def _dependency_closure(root: str) -> list[md.Distribution]:
    """Installed distributions *root* needs (extras excluded), *root* itself not included."""
    seen: dict[str, md.Distribution] = {}
    todo = [root]
    while todo:
        name = todo.pop()
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            continue
        for req in dist.requires or []:
            marker = req.split(";", 1)[1] if ";" in req else ""
            if "extra" in marker:
                continue
            m = _NAME.match(req)
            if m and m.group(1).lower() not in seen:
                key = m.group(1).lower()
                try:
                    seen[key] = md.distribution(key)
                except md.PackageNotFoundError:
                    continue
                todo.append(key)
    return list(seen.values())


def stage_library(dest: Path) -> Path:
    """Copy flux_system and its dependencies' installed files into *dest*/lib."""
    lib = dest / "lib"
    lib.mkdir(parents=True)
    shutil.copytree(
        REPO / "flux_system", lib / "flux_system", ignore=shutil.ignore_patterns("__pycache__")
    )
    profiles = REPO / "sandbox-profiles"
    if profiles.is_dir():
        shutil.copytree(profiles, lib / "sandbox-profiles")
    for dist in _dependency_closure("flux"):
        for f in dist.files or []:
            rel = Path(str(f))
            if (rel.parts and rel.parts[0] == "..") or "__pycache__" in rel.parts:
                continue
            src = Path(str(dist.locate_file(f)))
            if src.is_file():
                (lib / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, lib / rel)
    shutil.copy2(DRIVER, dest / "driver.py")
    for path in [dest, *dest.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return lib


@functools.cache
def interpreter_for(uid: int) -> str:
    """An interpreter of this Python's major.minor that *uid* can start."""
    want = f"{sys.version_info[0]}.{sys.version_info[1]}"
    candidates = [
        sys.executable,
        getattr(sys, "_base_executable", sys.executable),
        f"/usr/bin/python{want}",
        f"/usr/local/bin/python{want}",
    ]
    for exe in dict.fromkeys(candidates):
        if not Path(exe).exists():
            continue
        proc = subprocess.run(
            [*user_prefix(uid), exe, "-s", "-E", "-c", "import sys, ctypes; print(sys.version)"],
            capture_output=True,
            text=True,
            timeout=_PROBE_TIMEOUT_S,
            check=False,
        )
        if proc.returncode == 0 and proc.stdout.startswith(want):
            return exe
    require(False, f"a Python {want} that uid {uid} can run (Debian: python{want})")
    raise AssertionError("unreachable")


def run_driver_as(
    uid: int | None,
    stage: Path,
    plan: dict[str, Any],
    timeout: float,
    *,
    resolv_conf: Path | None = None,
) -> dict[str, Any]:
    """Run the staged driver as *uid* (``None``: this user) on *plan*; its JSON result.

    With *resolv_conf*, the driver runs in a mount namespace of its own where that file
    is bound over /etc/resolv.conf (so the host-side resolvers it starts use it).
    """
    exe = sys.executable if uid is None else interpreter_for(uid)
    argv = [*user_prefix(uid), exe, "-s", "-E", str(stage / "driver.py")]
    # The driver starts with the plan's secrets in its environment, so they are in its
    # /proc/PID/environ (what a payload that reaches the host's /proc would read).
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", **plan.get("secret_env", {})}
    if resolv_conf is not None:
        mount = 'mount --bind "$0" /etc/resolv.conf && exec "$@"'
        argv = ["unshare", "--mount", "--", "sh", "-c", mount, str(resolv_conf), *argv]
    proc = subprocess.run(
        argv,
        input=json.dumps({**plan, "lib": str(stage / "lib")}),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd="/",
        env=env,
        check=False,
    )
    assert proc.returncode == 0, f"driver as uid {uid} failed:\n{proc.stderr[-4000:]}"
    result: dict[str, Any] = json.loads(proc.stdout)
    return result
