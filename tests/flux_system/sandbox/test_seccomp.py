"""The seccomp filter, for real: each denied syscall, its errno, and positive controls.

The same probe runs under the bubblewrap backend (denials unobservable: bwrap 0.8
loads the filter without a listener) and the Landlock-only backend (each denial
observed by the spawner's user-notification listener, recorded exactly).
"""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest

from flux_system import System, Workspace
from flux_system.sandbox import Denial, Sandbox, SandboxSettings, _libseccomp
from tests._capabilities import require
from tests.flux_system.sandbox._support import SYSTEM_PYTHON, require_bwrap, require_landlock

PROBE = Path(__file__).with_name("_probe.py")
NAMES = [
    "getpid",
    "unshare",
    "clone",
    "clone3",
    "ioctl",
    "socket",
    "io_uring_setup",
    "ptrace",
    "mount",
    "bpf",
    "keyctl",
    "userfaultfd",
    "perf_event_open",
    "setns",
    "prlimit64",
    "sched_setaffinity",
    "setpriority",
    "ioprio_set",
]

EPERM, ENOSYS, EAFN = errno.EPERM, errno.ENOSYS, errno.EAFNOSUPPORT
# name -> errno the filter answers (0: allowed)
EXPECTED = {
    "getpid": 0,
    "unshare_user": EPERM,
    "clone_newuser": EPERM,
    "clone_plain": 0,
    "clone3": ENOSYS,
    "tiocsti": EPERM,
    "tiocsti_high": EPERM,  # CVE-2019-10063: the high bits do not get it through
    "socket_unix": 0,
    "socket_packet": EAFN,
    "socket_netlink_high": EAFN,
    "socket_huge": EAFN,
    "io_uring_setup": EPERM,
    "ptrace": EPERM,
    "mount": EPERM,
    "bpf": EPERM,
    "keyctl": EPERM,
    "userfaultfd": EPERM,
    "perf_event_open": EPERM,
    "setns": EPERM,
    "prlimit_self": 0,
    "prlimit_other": EPERM,  # RLIMIT_CPU on a host process of the same uid kills it
    "prlimit_other_high": EPERM,
    "affinity_other": EPERM,
    "setpriority_user": EPERM,
    "setpriority_user_high": EPERM,  # the kernel reads `which` as an int
    "ioprio_user": EPERM,
}


def _numbers() -> str:
    lib = _libseccomp.load()
    require(lib is not None, "libseccomp")
    assert lib is not None
    table = {}
    for name in NAMES:
        nr = lib.resolve(name)
        assert nr is not None, name
        table[name] = nr
    return json.dumps(table)


def _probe(system: System, ws: Path) -> dict[str, list[int]]:
    (ws / "probe.py").write_bytes(PROBE.read_bytes())
    r = system.run([SYSTEM_PYTHON, "-I", "-S", "probe.py", _numbers()], timeout=60)
    assert r.exit_code == 0, r.stderr_text
    return dict(json.loads(r.stdout_text))


def _errnos(out: dict[str, list[int]]) -> dict[str, int]:
    return {k: v[1] for k, v in out.items()}


def test_unconfined_positive_control(tmp_path: Path) -> None:
    """Without the sandbox the same probe gets through where the host allows it."""
    require(Path(SYSTEM_PYTHON).exists(), SYSTEM_PYTHON)
    with Workspace(tmp_path) as ws, System(ws) as system:
        got = _errnos(_probe(system, tmp_path))
    assert got["clone3"] != ENOSYS  # EFAULT/EINVAL: the kernel looked at the arguments
    assert got["tiocsti_high"] != EPERM or got["tiocsti"] != EPERM
    assert got["socket_packet"] != EAFN  # root may open a packet socket
    assert got["socket_unix"] == 0 and got["getpid"] == 0
    assert got["prlimit_other"] == 0 and got["prlimit_other_high"] == 0  # reached pid 1
    assert got["affinity_other"] != EPERM  # EINVAL: the kernel looked at the mask
    assert got["setpriority_user"] == errno.ESRCH  # no process of that user: looked


def test_bwrap_backend_denies_exactly_the_list(tmp_path: Path) -> None:
    require_bwrap()
    sandbox = Sandbox.resolve(SandboxSettings(mode="require"))
    with Workspace(tmp_path) as ws, System(ws, sandbox=sandbox) as system:
        got = _errnos(_probe(system, tmp_path))
        r = system.run(["/bin/true"])
    assert got == EXPECTED
    assert r.denials is not None and r.denials.observable is False


def test_landlock_backend_denies_and_records_each_denial(tmp_path: Path) -> None:
    require_landlock()
    sandbox = Sandbox.resolve(SandboxSettings(mode="on", backend="landlock"))
    assert sandbox.backend == "landlock"
    with Workspace(tmp_path) as ws, System(ws, sandbox=sandbox) as system:
        (tmp_path / "probe.py").write_bytes(PROBE.read_bytes())
        r = system.run([SYSTEM_PYTHON, "-I", "-S", "probe.py", _numbers()], timeout=60)
    assert r.exit_code == 0, r.stderr_text
    got = _errnos(json.loads(r.stdout_text))
    assert got == EXPECTED
    assert r.denials is not None and r.denials.observable is True
    seen = [(d.layer, d.what, d.errno, d.detail) for d in r.denials.records]
    # Each denied call once, in order; clone3's ENOSYS is not a denial (a fallback).
    assert seen == [
        ("seccomp", "unshare", EPERM, ""),
        ("seccomp", "clone", EPERM, "flags=0x10000011"),
        ("seccomp", "ioctl", EPERM, "cmd=0x5412"),
        ("seccomp", "ioctl", EPERM, "cmd=0x5412"),
        ("seccomp", "socket", EAFN, "family=17"),
        ("seccomp", "socket", EAFN, "family=16"),
        ("seccomp", "socket", EAFN, "family=1000"),
        ("seccomp", "io_uring_setup", EPERM, ""),
        ("seccomp", "ptrace", EPERM, ""),
        ("seccomp", "mount", EPERM, ""),
        ("seccomp", "bpf", EPERM, ""),
        ("seccomp", "keyctl", EPERM, ""),
        ("seccomp", "userfaultfd", EPERM, ""),
        ("seccomp", "perf_event_open", EPERM, ""),
        ("seccomp", "setns", EPERM, ""),
        ("seccomp", "prlimit64", EPERM, ""),
        ("seccomp", "prlimit64", EPERM, ""),
        ("seccomp", "sched_setaffinity", EPERM, ""),
        ("seccomp", "setpriority", EPERM, ""),
        ("seccomp", "setpriority", EPERM, ""),
        ("seccomp", "ioprio_set", EPERM, ""),
    ]
    assert all(isinstance(d, Denial) and d.pid for d in r.denials.records)


def test_denials_are_per_run(tmp_path: Path) -> None:
    require_landlock()
    sandbox = Sandbox.resolve(SandboxSettings(mode="on", backend="landlock"))
    with Workspace(tmp_path) as ws, System(ws, sandbox=sandbox) as system:
        code = "import socket\ntry:\n socket.socket(17, 3)\nexcept OSError: pass\n"
        first = system.run([SYSTEM_PYTHON, "-I", "-S", "-c", code])
        second = system.run(["/bin/true"])
    assert first.denials is not None and len(first.denials.records) == 1
    assert second.denials is not None and second.denials.records == ()


@pytest.mark.parametrize("netlink", [False, True])
def test_netlink_only_when_the_profile_asks(netlink: bool) -> None:
    from flux_system.sandbox import _seccomp

    lib = _libseccomp.load()
    require(lib is not None, "libseccomp")
    assert lib is not None
    fd = _seccomp.export_memfd(lib, _seccomp.FilterSpec(allow_netlink=netlink))
    import os

    try:
        assert os.fstat(fd).st_size > 0
    finally:
        os.close(fd)


def test_the_address_families_the_filter_names_are_the_kernels() -> None:
    """The filter names the families as numbers (no socket import at start-up)."""
    import socket

    from flux_system.sandbox import _seccomp

    assert (_seccomp.AF_UNIX, _seccomp.AF_INET, _seccomp.AF_INET6, _seccomp.AF_NETLINK) == (
        socket.AF_UNIX,
        socket.AF_INET,
        socket.AF_INET6,
        socket.AF_NETLINK,
    )
