"""The tmpfs mounts of the bubblewrap backend are size-capped or read-only (decision 0118).

tmpfs is memory: without ``--size`` each of ``/tmp``, ``/dev/shm`` and ``$HOME`` took
up to half of the host's memory (three of them: more than all of it), so one run could
push the host into the OOM killer. The built-in profiles now set
``limits.tmpfs_size``; a run fills each mount up to the cap and gets ``ENOSPC``. The
sandbox's own root (and ``/etc`` on it) and ``/dev`` are tmpfs mounts bwrap makes too:
they were writable, uncapped, as root and as uid 65534; now they are remounted
read-only after every bind.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from flux_system import System, Workspace
from flux_system.sandbox import BUILTIN_PROFILES, Sandbox, SandboxSettings, load_profile
from flux_system.sandbox._profile import profile_dirs
from tests.flux_system.sandbox._support import (
    require_bwrap,
    require_unprivileged,
    run_unprivileged,
    world_dir,
)

CAP = 1 << 20  # 1 MiB in the test profile
# Write 2 MiB into each tmpfs; print each file's size after the attempt.
FILL = (
    'for d in /tmp /dev/shm "$HOME"; do '
    'head -c 2097152 /dev/zero > "$d/fill" 2>/dev/null; '
    'echo "$d $(wc -c < "$d/fill")"; done; '
    "grep -E ' (/tmp|/dev/shm|/root) ' /proc/self/mountinfo | grep -c 'size=' || true"
)


def _profile(tmp_path: Path, size: int | None) -> str:
    text = (profile_dirs()[0] / "default.toml").read_text()
    lines = [ln for ln in text.splitlines() if not ln.startswith("tmpfs_size")]
    if size is not None:
        lines.append(f"tmpfs_size = {size}")
    path = tmp_path / f"p-{size}.toml"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _fill(tmp_path: Path, profile: str) -> tuple[dict[str, int], int, str]:
    sandbox = Sandbox.resolve(SandboxSettings(mode="require", profile=profile))
    ws_dir = tmp_path / "ws"
    ws_dir.mkdir(exist_ok=True)
    with Workspace(ws_dir) as ws, System(ws, sandbox=sandbox) as system:
        r = system.run(["/bin/sh", "-c", FILL], timeout=60)
    assert r.exit_code == 0, r.stderr_text
    *rows, capped = r.stdout_text.split("\n")[:4]
    sizes = {d: int(n) for d, n in (row.rsplit(" ", 1) for row in rows)}
    private_tmp = {g.name: g for g in sandbox.report().guarantees}["private_tmp"]
    return sizes, int(capped), private_tmp.reason


def test_each_tmpfs_stops_at_the_cap(tmp_path: Path) -> None:
    require_bwrap()
    sizes, capped, detail = _fill(tmp_path, _profile(tmp_path, CAP))
    assert len(sizes) == 3
    assert all(0 < n <= CAP for n in sizes.values()), sizes
    assert capped == 3
    assert f"capped at {CAP} bytes" in detail


def test_control_without_a_cap_the_writes_go_through(tmp_path: Path) -> None:
    require_bwrap()
    sizes, capped, detail = _fill(tmp_path, _profile(tmp_path, None))
    assert sizes and all(n == 2 * CAP for n in sizes.values()), sizes
    assert capped == 0
    assert "not size-capped" in detail


@pytest.mark.parametrize("name", BUILTIN_PROFILES)
def test_builtin_profiles_cap_their_tmpfs(name: str) -> None:
    size = load_profile(name).tmpfs_size
    assert size is not None and 0 < size <= 1 << 30


def test_a_bad_tmpfs_size_names_the_key(tmp_path: Path) -> None:
    from flux_system import SandboxUnavailableError

    path = tmp_path / "bad.toml"
    path.write_text("[limits]\ntmpfs_size = 0\n")
    with pytest.raises(SandboxUnavailableError) as err:
        load_profile(str(path))
    assert err.value.layer == f"{path}:limits.tmpfs_size"


# The sandbox's own root and /dev are tmpfs mounts too: writable and uncapped before.
ROOT_WRITES = (
    "for d in / /etc /dev /tmp; do "
    'if head -c 65536 /dev/zero > "$d/fill" 2>/dev/null; then echo "$d wrote"; '
    'else echo "$d refused"; fi; done'
)
ROOT_EXPECTED = ["/ refused", "/etc refused", "/dev refused", "/tmp wrote"]

UNPRIVILEGED_ROOT_WRITES = r"""
import json, os, tempfile
from flux_system import System, Workspace
from flux_system.sandbox import Sandbox, SandboxSettings
base = os.path.join(os.path.dirname(os.path.abspath(__file__)), "work")
out = {"uid": os.geteuid()}
for name in ("default", "strict"):  # net-proxy needs httpx, absent from the system python
    sb = Sandbox.resolve(SandboxSettings(mode="require", profile=name))
    with Workspace(tempfile.mkdtemp(dir=base)) as ws, System(ws, sandbox=sb) as system:
        out[name] = system.run(["/bin/sh", "-c", SCRIPT], timeout=60).stdout_text.splitlines()
print(json.dumps(out))
""".replace("SCRIPT", repr(ROOT_WRITES))


@pytest.mark.parametrize("name", BUILTIN_PROFILES)
def test_root_and_dev_are_read_only(tmp_path: Path, name: str) -> None:
    require_bwrap()
    sandbox = Sandbox.resolve(SandboxSettings(mode="require", profile=name))
    with Workspace(tmp_path) as ws, System(ws, sandbox=sandbox) as system:
        r = system.run(["/bin/sh", "-c", ROOT_WRITES], timeout=60)
    # /tmp is the positive control: the same write lands where it may
    assert r.stdout_text.splitlines() == ROOT_EXPECTED, r.stderr_text


def test_root_and_dev_are_read_only_as_unprivileged() -> None:
    require_bwrap()
    require_unprivileged()
    base = world_dir("flux-rootfs-")
    try:
        got = run_unprivileged(UNPRIVILEGED_ROOT_WRITES, base)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    assert got["uid"] == 65534
    for name in ("default", "strict"):
        assert got[name] == ROOT_EXPECTED, (name, got[name])
