"""Shared helpers for the bounded smoke runs of the atheris harnesses under ``fuzz/``."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from tests._capabilities import require

FUZZ = Path(__file__).resolve().parent.parent / "fuzz"


def load_harness(name: str) -> ModuleType:
    """Import ``fuzz/<name>.py`` as a module (the harnesses are scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(name, FUZZ / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_atheris(name: str, *, runs: int, timeout: float = 120) -> None:
    """Run ``fuzz/<name>.py`` under atheris for exactly *runs* inputs; assert it is clean."""
    try:
        import atheris  # noqa: F401
    except ImportError:
        require(False, "atheris")
    done = subprocess.run(
        [sys.executable, str(FUZZ / f"{name}.py"), f"-runs={runs}", "-seed=1"],
        capture_output=True,
        timeout=timeout,
        cwd=FUZZ.parent,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"Done {runs} runs".encode() in done.stderr
