"""Which backend and layers a sandbox gets here, and the report of each guarantee.

Pure functions of (settings, profile, host probe): easy to test exhaustively.
"""

from __future__ import annotations

import os
import sys
import typing

from flux_system._values import field, record
from flux_system.sandbox._host import HostInfo
from flux_system.sandbox._profile import LAYERS, Profile
from flux_system.sandbox._report import Guarantee, LayerStatus, SandboxReport
from flux_system.sandbox._settings import SandboxSettings

__all__ = ["Plan", "launcher_python", "plan", "report_of"]

BWRAP_DENIALS = (
    "bwrap 0.8 installs the seccomp filter without a user-notification listener, and "
    "kernel audit and kmsg are not readable by an unprivileged host: denials are "
    "unobservable (the child sees EPERM/EACCES)"
)
LANDLOCK_DENIALS = (
    "seccomp denials are observed by the spawner's user-notification listener; "
    "Landlock denials are not (they go to kernel audit only, which is unavailable)"
)


@typing.final
@record
class Plan:
    backend: str  # "bwrap", "landlock" or "none"
    network: str
    active: frozenset[str]
    missing: tuple[str, ...]
    reasons: dict[str, str] = field(default_factory=dict)
    denial_reason: str = ""
    landlock_inside: bool = False  # strict: Landlock applied by the launcher in bwrap
    python: str | None = None  # the launcher's interpreter (when one runs)


def launcher_python() -> tuple[str | None, str]:
    """An interpreter this user can run for the in-sandbox launcher, and why not."""
    # The system interpreter first: it lies inside the default view (no extra bind) and
    # every user can run it; the launcher needs only the standard library.
    for candidate in ("/usr/bin/python3", sys.executable):
        if candidate and os.path.isabs(candidate) and os.access(candidate, os.X_OK):
            try:
                real = os.path.realpath(candidate)
                fd = os.open(real, os.O_RDONLY | os.O_CLOEXEC)
                os.close(fd)
            except OSError:
                continue
            return real, ""
    return None, "no Python interpreter readable by this user for the in-sandbox launcher"


def _availability(host: HostInfo) -> tuple[dict[str, bool], dict[str, str]]:
    avail = {
        "bubblewrap": host.bwrap.usable and host.userns,
        "seccomp": host.seccomp,
        "landlock": host.landlock_abi >= 1,
    }
    reasons = {
        "bubblewrap": host.bwrap.reason or host.userns_reason,
        "seccomp": host.seccomp_reason,
        "landlock": "" if host.landlock_abi >= 1 else "the kernel has no Landlock (ABI 0)",
    }
    return avail, reasons


def plan(settings: SandboxSettings, profile: Profile | None, host: HostInfo | None) -> Plan:
    """Choose the backend and layers (see ``Sandbox.resolve``)."""
    network = settings.network or (profile.network if profile else "host")
    if settings.mode == "off" or profile is None or host is None:
        return Plan("none", "host", frozenset(), (), denial_reason="no sandbox")
    avail, reasons = _availability(host)
    required = set(profile.require)
    backend = settings.backend
    if backend == "auto":
        if avail["bubblewrap"]:
            backend = "bwrap"
        elif avail["landlock"] and ("bubblewrap" not in required or settings.mode == "on"):
            backend = "landlock"
        else:
            backend = "bwrap"  # reported missing below
    elif backend == "bwrap" and not avail["bubblewrap"] and settings.mode == "on":
        backend = "landlock" if avail["landlock"] else "none"
    elif backend == "landlock" and "bubblewrap" in required:
        # Explicitly asked: mode require then refuses (the profile needs bubblewrap);
        # mode on runs Landlock-only and reports what it lacks.
        reasons["bubblewrap"] = "the Landlock-only backend was chosen (backend landlock)"
    active: set[str] = set()
    python = None
    inside = False
    if backend == "bwrap" and avail["bubblewrap"]:
        active.add("bubblewrap")
        if avail["seccomp"]:
            active.add("seccomp")
        if "landlock" in required and avail["landlock"]:
            python, why = launcher_python()
            if python is not None:
                active.add("landlock")
                inside = True
            else:
                reasons["landlock"] = why
    elif backend == "landlock" and avail["landlock"]:
        active.add("landlock")
        if avail["seccomp"]:
            active.add("seccomp")
    elif backend != "none" and not avail.get("bubblewrap", False):
        backend = "none" if settings.mode == "on" else backend
    proxy_missing = False
    if network == "proxy" and backend == "bwrap" and "bubblewrap" in active:
        if python is None:
            python, why = launcher_python()
            if python is None:
                proxy_missing = True
                reasons["proxy"] = f"the proxy forwarder needs the launcher: {why}"
    elif network == "proxy" and backend == "landlock":
        proxy_missing = True
        reasons["proxy"] = "no network namespace on the Landlock-only backend: network none"
    if proxy_missing:
        network = "none"  # fail closed: no network rather than the host's
    if not active:
        backend = "none" if settings.mode == "on" else backend
    missing = tuple(layer for layer in LAYERS if layer in required and layer not in active)
    if proxy_missing:
        missing = (*missing, "proxy")
    denial = BWRAP_DENIALS if backend == "bwrap" else LANDLOCK_DENIALS
    if backend == "none":
        denial = "no sandbox layer is active"
    return Plan(
        backend,
        network if backend != "none" else "host",
        frozenset(active),
        missing,
        reasons,
        denial,
        inside,
        python,
    )


def _g(name: str, enforced: bool, by: str, reason: str) -> Guarantee:
    return Guarantee(name, enforced, by if enforced else "", reason)


def _tmpfs_cap(profile: Profile | None, host: HostInfo | None) -> str:
    size = profile.tmpfs_size if profile else None
    if size is None:
        return (
            "not size-capped (the profile sets no limits.tmpfs_size): each may take "
            "half of the host's memory"
        )
    if host is not None and not host.bwrap.tmpfs_size:
        return "not size-capped: this bwrap has no --size (bubblewrap >= 0.7 has)"
    return f"each capped at {size} bytes (limits.tmpfs_size)"


def report_of(
    settings: SandboxSettings, profile: Profile | None, host: HostInfo | None, p: Plan
) -> SandboxReport:
    """Each guarantee as enforced or not, by which layer, and why."""
    layers: list[LayerStatus] = []
    avail, reasons = _availability(host) if host is not None else ({}, {})
    required = set(profile.require) if profile else set()
    for name in LAYERS:
        detail = ""
        if host is not None and name == "bubblewrap":
            detail = f"{host.bwrap.path or '-'} {host.bwrap.version or ''}".strip()
        if host is not None and name == "landlock":
            detail = f"ABI {host.landlock_abi}"
        if host is not None and name == "seccomp":
            detail = f"libseccomp {host.libseccomp_version or '-'}"
        why = p.reasons.get(name) or reasons.get(name, "")
        if name not in p.active and not why:
            why = "not used by this profile and backend"
        layers.append(
            LayerStatus(
                name,
                avail.get(name, False),
                name in p.active,
                name in required,
                "" if name in p.active else why,
                detail,
            )
        )
    bw = "bubblewrap" in p.active
    ll = "landlock" in p.active
    sc = "seccomp" in p.active
    abi = host.landlock_abi if host else 0
    net = p.network
    gs = [
        _g(
            "filesystem_view",
            bw or ll,
            "bubblewrap" if bw else "landlock",
            "a minimal read-only system view; the workspace is the writable place"
            if bw
            else (
                "Landlock allows reads of the profile's paths and writes to the workspace only"
                if ll
                else "no layer confines the filesystem"
            ),
        ),
        _g(
            "file_metadata",
            bw or (ll and sc and bool(host and host.euid == 0)),
            "bubblewrap" if bw else "seccomp",
            "outside the writable roots everything is read-only or absent: chmod, chown,"
            " utimes and xattr changes fail there"
            if bw
            else (
                (
                    "a root caller: seccomp refuses chmod, utimes, chown and xattr changes"
                    " everywhere, the workspace included (Landlock has no right for them)"
                    if host and host.euid == 0
                    else "Landlock (ABI <= 7) has no right for chmod or utimes: a file this"
                    " user owns outside the workspace can have its mode and times changed"
                    " (ownership and xattr changes are refused by seccomp)"
                )
                if ll
                else "no layer confines the filesystem"
            ),
        ),
        _g(
            "private_tmp",
            bw,
            "bubblewrap",
            f"fresh tmpfs /tmp, /dev/shm and $HOME, {_tmpfs_cap(profile, host)}"
            if bw
            else (
                "Landlock cannot give a private /tmp; TMPDIR points at a per-sandbox "
                "directory below the host's temporary directory, not size-capped"
            ),
        ),
        _g(
            "pid_namespace",
            bw,
            "bubblewrap",
            "own pid namespace"
            if bw
            else "no pid namespace without bubblewrap: the host's processes are visible in "
            "/proc, their command lines and status readable (environ, memory, fds and cwd "
            "refused by Landlock's ptrace rule; signals scoped at ABI 6), and so are "
            "/proc/keys (the descriptions of the caller's keys), /proc/timer_list and, "
            "for a root caller, the kernel's memory views (/proc/slabinfo, kpageflags, "
            "vmallocinfo, ...)",
        ),
        _g(
            "process_tree",
            bw or bool(host and host.tree_cgroups),
            "bubblewrap" if bw else "cgroup",
            "every process dies with the command (its pid namespace)"
            if bw
            else (
                "each tree has its own pids cgroup: daemons are found and killed"
                if host and host.tree_cgroups
                else "no pid namespace and no pids cgroup for this user: a daemon that "
                "starts its own session can outlive the run"
            ),
        ),
        _g(
            "net_namespace",
            bw and net != "host",
            "bubblewrap",
            (
                f"own network namespace (network {net})"
                if bw and net != "host"
                else (
                    "network host: the host's network is shared"
                    if net == "host"
                    else (
                        "no network namespace: TCP bind/connect denied by Landlock"
                        + (f" (ABI {abi})" if abi >= 4 else " needs ABI 4")
                        + ", inet sockets (so UDP too) refused by seccomp with network none;"
                        " pathname unix sockets to host listeners are not confined (a"
                        " Docker or D-Bus socket, an X11 display: whatever this user may"
                        " connect to)"
                    )
                )
            ),
        ),
        _g(
            "ipc_uts_namespaces",
            bw,
            "bubblewrap",
            "own ipc, uts and cgroup namespaces"
            if bw
            else "needs bubblewrap: the host's IPC and uts namespaces are shared; "
            + (
                "System V IPC and POSIX message queues are refused by seccomp instead"
                if p.backend == "landlock" and sc
                else "the host's System V IPC objects and POSIX message queues are reachable"
            ),
        ),
        _g(
            "user_namespaces_closed",
            sc or (bw and bool(host and host.bwrap.disable_userns)),
            "seccomp" if sc else "bubblewrap",
            "unshare/setns and clone with namespace flags refused"
            + (", and --disable-userns" if bw and host and host.bwrap.disable_userns else "")
            if sc
            else "no seccomp filter",
        ),
        _g(
            "seccomp",
            sc,
            "seccomp",
            "the deny list of DESIGN §2.5 (libseccomp)" if sc else reasons.get("seccomp", ""),
        ),
        _g(
            "landlock",
            ll,
            "landlock",
            (
                f"ABI {abi}"
                + (" inside bubblewrap" if p.landlock_inside else "")
                + ("; TCP rules" if abi >= 4 else "")
                + ("; abstract-unix and signal scopes" if abi >= 6 else "")
            )
            if ll
            else (p.reasons.get("landlock") or "not required by this profile"),
        ),
        _g(
            "protected_paths",
            bw,
            "bubblewrap",
            (
                "existing ones bound read-only, parents pinned"
                if bw
                else "Landlock cannot deny a path below a writable root"
            )
            + ("; the post-run audit covers the rest" if settings.audit else "; no audit")
            + (
                ""
                if bw or not settings.audit or (host and host.tree_cgroups)
                else ", but not what a process that outlives the run changes after the audit "
                "(process_tree not enforced)"
            ),
        ),
        _g("denial_reporting", p.backend == "landlock" and sc, "seccomp", p.denial_reason),
    ]
    return SandboxReport(
        mode=settings.mode,
        profile=profile.name if profile else "-",
        backend=p.backend,
        network=p.network,
        layers=tuple(layers),
        guarantees=tuple(gs),
        missing=p.missing,
    )
