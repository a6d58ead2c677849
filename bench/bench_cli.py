"""Start-up of the ``flux`` command: ``flux exec -- /bin/true`` vs ``python3 -c pass``.

Whole-process wall time (fork, exec, interpreter start, imports, the run, exit), both
measured the same way from this process, interleaved round by round; medians. The
baseline is the interpreter that the ``flux`` console script runs (its shebang), so the
ratio is what flux adds on top of starting Python at all. Target: <= 3x.

The package sources are byte-compiled first (as ``pip install`` does for an installed
package), so neither side pays for compiling on every start when
``PYTHONDONTWRITEBYTECODE`` is set.

Run: ``python bench/bench_cli.py`` (``FLUX_BIN=/path/to/flux`` to pick the command;
default: ``.venv/bin/flux`` of this checkout, else ``flux`` on PATH).
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._common import compile_packages, interpreter_of, record  # noqa: E402

ROUNDS = 15
PER_ROUND = 5
TARGET = 3.0


def _flux() -> list[str]:
    chosen = os.environ.get("FLUX_BIN") or str(ROOT / ".venv" / "bin" / "flux")
    if not Path(chosen).exists():
        found = shutil.which("flux")
        if found is None:
            sys.exit("no flux command: install the project (README) or set FLUX_BIN")
        chosen = found
    return [chosen]


def _once(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def main() -> None:
    compile_packages()
    flux = _flux()
    python = interpreter_of(flux[0])
    # Once flux exec has a sandbox (default: require), the start-up target is for
    # `--sandbox off`: the sandbox's own cost is measured by its benchmark.
    helptext = subprocess.run([*flux, "exec", "--help"], capture_output=True, text=True).stdout
    sandbox = ["--sandbox", "off"] if "--sandbox" in helptext else []
    candidate = [*flux, "exec", *sandbox, "--workspace", str(ROOT), "--", "/bin/true"]
    baseline = [python, "-c", "pass"]
    _once(candidate)  # warm the page cache for both
    _once(baseline)
    cand: list[float] = []
    base: list[float] = []
    for _ in range(ROUNDS):
        for _ in range(PER_ROUND):
            base.append(_once(baseline))
            cand.append(_once(candidate))
    c, b = statistics.median(cand), statistics.median(base)
    ratio = c / b
    print(f"flux exec -- /bin/true: {c * 1000:.1f} ms (median of {len(cand)})")
    print(f"python3 -c pass:        {b * 1000:.1f} ms (median of {len(base)})")
    print(f"ratio: {ratio:.2f}x (target <= {TARGET:.0f}x) {'met' if ratio <= TARGET else 'MISSED'}")
    record(
        "cli",
        {
            "exec_true_s": c,
            "python_pass_s": b,
            "ratio": ratio,
            "target": TARGET,
            "samples": len(cand),
            "flux": flux[0],
            "command": " ".join(candidate[1:]),
            "python": python,
        },
    )


if __name__ == "__main__":
    main()
