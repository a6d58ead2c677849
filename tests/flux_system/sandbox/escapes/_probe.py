"""Build the static escape probe (probe.c) and read what it printed.

The probe is compiled once per test session with ``gcc -static``: no interpreter or
shared library has to be visible inside the sandbox, and the same binary runs as root
and as an unprivileged user, sandboxed or not (see the comment at the top of probe.c).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests._capabilities import require

SOURCE = Path(__file__).with_name("probe.c")
_BUILD_TIMEOUT_S = 120  # hang guard for gcc on a loaded 2-core host


def build_probe(out_dir: Path) -> Path:
    """Compile probe.c statically into *out_dir*/probe (mode 0755) and return its path."""
    gcc = shutil.which("gcc")
    require(gcc is not None, "gcc (Debian: gcc, libc6-dev) to build the static escape probe")
    assert gcc is not None
    out = out_dir / "probe"
    proc = subprocess.run(
        [gcc, "-static", "-O1", "-Wall", "-Wextra", "-Werror", "-o", str(out), str(SOURCE)],
        capture_output=True,
        text=True,
        timeout=_BUILD_TIMEOUT_S,
        check=False,
    )
    require(
        proc.returncode == 0 or "cannot find -lc" not in proc.stderr,
        "a static libc (Debian: libc6-dev) to build the escape probe",
    )
    assert proc.returncode == 0, f"probe.c does not build:\n{proc.stderr}"
    out.chmod(0o755)
    return out


@dataclass(frozen=True, slots=True)
class CaseOutput:
    """What the probe printed for one case: each op's status and the case's info."""

    case: str
    ops: dict[str, str]
    info: dict[str, Any] = field(default_factory=dict)

    def worked(self, names: list[str] | None = None) -> dict[str, str]:
        """The ops (of *names*, or all) whose status says the attack step worked."""
        chosen = self.ops if names is None else {n: self.ops[n] for n in names if n in self.ops}
        return {n: s for n, s in chosen.items() if s == "ok" or s.startswith("ok:")}


def parse_output(stdout: str) -> dict[str, CaseOutput]:
    """Map case name to its output; a line that is not JSON fails loudly."""
    cases: dict[str, CaseOutput] = {}
    for line in stdout.splitlines():
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise AssertionError(f"probe printed a line that is not JSON: {line!r}") from exc
        cases[data["case"]] = CaseOutput(data["case"], dict(data["ops"]), dict(data["info"]))
    return cases
