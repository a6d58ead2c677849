"""Helpers for the sandbox tests: host checks and running a script as an unprivileged user.

The unprivileged side must not depend on where the checkout or the interpreter lives
(CI may clone below a directory that user cannot enter): :func:`run_unprivileged`
copies ``flux_system`` into a fresh world-readable directory and runs a Debian-style
system interpreter (``/usr/bin/python3``) as uid/gid 65534.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from flux_system import System
from flux_system.sandbox import _host
from tests._capabilities import require

REPO = Path(__file__).resolve().parents[3]
UNPRIVILEGED = 65534
SYSTEM_PYTHON = "/usr/bin/python3"


def sh(system: System, script: str) -> tuple[int, str, str]:
    """Run *script* with ``/bin/sh -c`` in *system*: exit code, stdout, stderr."""
    r = system.run(["/bin/sh", "-c", script], timeout=30)
    return r.exit_code, r.stdout_text, r.stderr_text


def require_bwrap() -> _host.HostInfo:
    host = _host.probe()
    require(host.bwrap.usable, f"a working bubblewrap ({host.bwrap.reason})")
    require(host.seccomp, f"seccomp with libseccomp ({host.seccomp_reason})")
    return host


def require_landlock(abi: int = 1) -> _host.HostInfo:
    host = _host.probe(trial=False)
    require(host.landlock_abi >= abi, f"Landlock ABI >= {abi} (have {host.landlock_abi})")
    return host


def require_backend(backend: str) -> None:
    """Skip unless *backend* (``"bwrap"`` or ``"landlock"``, ABI >= 6) can run here."""
    if backend == "bwrap":
        require_bwrap()
    else:
        require_landlock(6)


def require_unprivileged() -> None:
    require(os.geteuid() == 0, "root, to switch to uid 65534 for the unprivileged runs")
    require(shutil.which("setpriv") is not None, "setpriv (util-linux)")
    require(os.access(SYSTEM_PYTHON, os.X_OK), f"{SYSTEM_PYTHON} for the unprivileged side")


def world_dir(prefix: str) -> Path:
    """A fresh directory under /tmp that uid 65534 can enter (0o777, removed by caller)."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    path.chmod(0o777)
    return path


def copy_package(dest: Path) -> Path:
    """Copy ``flux_system`` (and the profiles) below *dest*; return the import root."""
    lib = dest / "lib"
    shutil.copytree(
        REPO / "flux_system", lib / "flux_system", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copytree(REPO / "sandbox-profiles", lib / "sandbox-profiles")
    for root, dirs, files in os.walk(dest):
        for name in dirs:
            os.chmod(os.path.join(root, name), 0o755)
        for name in files:
            os.chmod(os.path.join(root, name), 0o644)
    dest.chmod(0o755)
    return lib


def run_unprivileged(script: str, base: Path, *, timeout: float = 120.0) -> dict[str, object]:
    """Run *script* (Python source printing one JSON object last) as uid 65534.

    *base* is a world-enterable directory (:func:`world_dir`) holding the package copy
    (made on first use), the script and ``work/``, writable by that user.
    """
    lib = base / "lib"
    if not lib.exists():
        copy_package(base)
        work = base / "work"  # where the unprivileged side may write
        work.mkdir()
        work.chmod(0o777)
    path = base / "script.py"
    path.write_text(script)
    path.chmod(0o644)
    proc = subprocess.run(
        [
            "setpriv",
            f"--reuid={UNPRIVILEGED}",
            f"--regid={UNPRIVILEGED}",
            "--clear-groups",
            "env",
            "-i",
            "PATH=/usr/bin:/bin",
            "HOME=/nonexistent",
            f"PYTHONPATH={lib}",
            SYSTEM_PYTHON,
            "-B",
            str(path),
        ],
        capture_output=True,
        timeout=timeout,
        cwd=base,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    return dict(json.loads(proc.stdout.decode().strip().splitlines()[-1]))
