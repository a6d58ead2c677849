"""Running the ``flux`` command as a user would, in a real process.

:func:`flux_argv` is the installed console script next to the running interpreter
(``.venv/bin/flux`` when the tests run with the venv's Python, as the README and
``.ci/run`` do) when it runs this checkout's code; otherwise the same entry point
(``flux_runtime.cli.main``) run by this interpreter with this checkout first on the path.
"""

from __future__ import annotations

import contextlib
import functools
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
# A hang guard for one flux run (a loaded 2-core host): never a timing assertion.
HANG_GUARD_S = 120.0


@functools.cache
def flux_argv() -> tuple[str, ...]:
    script = Path(sys.executable).parent / "flux"
    if script.is_file() and os.access(script, os.X_OK):
        where = subprocess.run(
            [sys.executable, "-c", "import flux_runtime; print(flux_runtime.__file__)"],
            cwd="/",
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        if where and Path(where).resolve().is_relative_to(ROOT):
            return (str(script),)
    return (sys.executable, "-m", "flux_runtime.cli")


def flux_env(**extra: str) -> dict[str, str]:
    """This process's environment with this checkout importable (for the fallback)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env.update(extra)
    return env


def flux(
    *args: str, input: bytes | None = None, cwd: Path | None = None, **extra_env: str
) -> subprocess.CompletedProcess[bytes]:
    """Run ``flux ARGS`` to completion (stdin: *input*, else ``/dev/null``)."""
    return subprocess.run(
        [*flux_argv(), *args],
        input=input,
        stdin=subprocess.DEVNULL if input is None else None,
        capture_output=True,
        cwd=cwd,
        env=flux_env(**extra_env),
        timeout=HANG_GUARD_S,
        check=False,
    )


@contextlib.contextmanager
def popen(*args: str, **kwargs: object) -> Iterator[subprocess.Popen[bytes]]:
    """Start ``flux ARGS`` (the caller chooses stdin/stdout/stderr); on leaving, kill
    it if it still runs, reap it and close its pipes."""
    proc: subprocess.Popen[bytes] = subprocess.Popen(  # type: ignore[call-overload]
        [*flux_argv(), *args], env=flux_env(), **kwargs
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def alive(pid: int) -> bool:
    """Whether *pid* is a live (not zombie) process."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"
