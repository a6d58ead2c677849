"""A non-editable install (a built wheel) carries the built-in profiles and the template."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.slow
def test_wheel_ships_the_profiles(tmp_path: Path) -> None:
    out = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(REPO)],
        check=True,
        capture_output=True,
        timeout=600,
        cwd=tmp_path,
    )
    (wheel,) = out.glob("flux-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for name in ("default.toml", "strict.toml", "net-proxy.toml", "seatbelt.sb"):
        assert f"flux_system/sandbox/profiles/{name}" in names
    assert "flux_system/sandbox/_launcher.py" in names
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    code = (
        "import flux_system.sandbox as s\n"
        "for n in s.BUILTIN_PROFILES:\n"
        "    p = s.load_profile(n)\n"
        f"    assert p.source.startswith({str(site)!r}), p.source\n"
        "print('ok')\n"
    )
    got = subprocess.run(
        [sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(site)!r})\n" + code],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert got.stdout.strip() == "ok"
