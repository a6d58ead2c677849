"""bubblewrap hides the host kernel's root-only memory views in the fresh /proc.

A root caller is uid 0 inside bwrap's user namespace and owns the 0400 files of the
new ``/proc``: with the old code the sandbox read ``/proc/slabinfo``,
``/proc/kpageflags``, ``/proc/kpagecount``, ``/proc/pagetypeinfo`` and
``/proc/vmallocinfo`` (the host's physical page flags, slab and vmalloc layout: what
kernel heap exploits read). Now each is ``/dev/null`` inside (decision 0116's list).
The positive control reads the same files on the host, as the same user.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from flux_system import System, Workspace
from flux_system.sandbox import Sandbox, SandboxSettings
from tests._capabilities import require
from tests.flux_system.sandbox._support import require_bwrap

FILES = ("slabinfo", "kpageflags", "kpagecount", "pagetypeinfo", "vmallocinfo")
READ = "; ".join(
    f'echo "{name} $(head -c 4096 /proc/{name} 2>/dev/null | wc -c)"' for name in FILES
)


def _host_bytes(name: str) -> int:
    fd = os.open(f"/proc/{name}", os.O_RDONLY)
    try:
        return len(os.read(fd, 4096))
    finally:
        os.close(fd)


def _sizes(text: str) -> dict[str, int]:
    return {name: int(n) for name, n in (line.split() for line in text.splitlines())}


@pytest.mark.parametrize("profile", ["default", "net-proxy"])
def test_kernel_memory_views_read_nothing_inside(tmp_path: Path, profile: str) -> None:
    require_bwrap()
    require(os.geteuid() == 0, "root (the files are root-only on the host)")
    host = {name: _host_bytes(name) for name in FILES}
    present = [name for name in FILES if host[name] > 0]
    assert present, host  # positive control: the host's root reads them
    sandbox = Sandbox.resolve(SandboxSettings(mode="require", profile=profile))
    with Workspace(tmp_path) as ws, System(ws, sandbox=sandbox) as system:
        r = system.run(["/bin/sh", "-c", READ], timeout=60)
    got = _sizes(r.stdout_text)
    assert {name: got[name] for name in present} == dict.fromkeys(present, 0)
