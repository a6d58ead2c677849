"""The bubblewrap backend: the command line, built per child, read by bwrap from an fd.

bwrap is exec'd as ``bwrap --args N`` with an **empty** environment: the real options,
and the child's environment (``--clearenv --setenv ...``) travel in a sealed memfd,
so none of them shows in bwrap's ``/proc/PID/cmdline`` (world-readable on the
host) or its ``environ`` (readable inside the sandbox through ``/proc/1``).

The view, in order: fresh namespaces (user, pid, ipc, uts, cgroup; net unless
``host``), the profile's read-only system paths (symlinks re-created as symlinks) and
``/etc`` subset, a new ``/proc`` and a minimal ``/dev``, tmpfs ``/tmp``, ``/dev/shm``
and ``$HOME``, then the workspace roots by fd (``--bind-fd``/``--ro-bind-fd``: bwrap
checks the mounted object is the fd's), the extra paths, and the protected paths:
each existing one bound read-only by fd over itself after each of its parents is bound
onto itself (a mount point cannot be renamed or removed, so ``mv .git .git-old`` fails
with ``EBUSY``). Then ``--new-session``, ``--die-with-parent``, ``--cap-drop ALL``,
``--disable-userns`` where bwrap has it, the seccomp program by fd, and ``--info-fd``
(bwrap's init outlives bwrap: :mod:`._bwrap_init` reaps it).

Guarantee: bwrap's own argv is ``bwrap --args N -- COMMAND...`` and its environment is
empty; the child's environment is never on a command line.
Not guaranteed: the protection of a protected path that does not exist yet (the
post-run audit covers it) or that is a symlink (not followed, so not bound).
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Mapping, Sequence

from flux_system.sandbox._protected import Found

__all__ = [
    "PROC_HIDDEN",
    "PROC_READ_ONLY",
    "REMOUNT_RO",
    "BwrapView",
    "command_line",
    "memfd_with",
    "system_view",
]

_SEALS = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE


def memfd_with(name: str, data: bytes) -> int:
    """A sealed memfd holding *data*, at offset 0 (``O_CLOEXEC``; the caller closes it)."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.lseek(fd, 0, os.SEEK_SET)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _SEALS)
    except BaseException:
        os.close(fd)
        raise
    return fd


BwrapView = tuple[str, ...]

# Host-global kernel settings in the sandbox's fresh /proc, made read-only (what OCI
# runtimes make read-only): a root caller is uid 0 inside and owns them, so without
# this it could write any sysctl — kernel.core_pattern = "|/ws/evil" runs a program
# of its choice as host root on the next crash — or /proc/sysrq-trigger. The source is
# the host's /proc (bwrap binds from the old root); sysctl files answer for the
# reader's namespaces, so the sandbox still reads its own network settings.
PROC_READ_ONLY: tuple[str, ...] = ("sys", "sysrq-trigger", "irq", "bus", "fs")
# Host-global information in /proc, hidden behind the host's /dev/null: /proc/keys lists
# the descriptions of every key the caller may view (the kernel keyring is not
# namespaced), /proc/timer_list the host's timers with the names and pids of the tasks
# that armed them (readable by root). Then the root-only (0400) views of the host
# kernel's memory a root caller would read: physical page flags and counts, slab and
# vmalloc layout (what heap-grooming exploits read). Reading any gives nothing inside.
PROC_HIDDEN: tuple[str, ...] = (
    "keys",
    "timer_list",
    "kpageflags",
    "kpagecount",
    "kpagecgroup",
    "slabinfo",
    "pagetypeinfo",
    "vmallocinfo",
)
# The last options of every launch, after every bind: the sandbox's own root and /dev
# are tmpfs mounts bwrap makes writable, uncapped (tmpfs is memory: `head -c 10G
# /dev/zero > /big` would take it from the host), and would let a run create /etc
# files inside. Not recursive: the binds and capped tmpfs below keep their own modes.
REMOUNT_RO: tuple[str, ...] = ("--remount-ro", "/dev", "--remount-ro", "/")
_PROC_OPTS: tuple[str, ...] = (
    *(
        opt
        for name in PROC_READ_ONLY
        for opt in ("--ro-bind-try", f"/proc/{name}", f"/proc/{name}")
    ),
    *(opt for name in PROC_HIDDEN for opt in ("--ro-bind-try", "/dev/null", f"/proc/{name}")),
)


def system_view(read_only: Sequence[str], etc: Sequence[str]) -> tuple[BwrapView, frozenset[str]]:
    """The options of the read-only system view and the paths it makes visible.

    Missing entries are skipped; a symlink (``/bin -> usr/bin``) is re-created as one.
    """
    opts: list[str] = []
    visible: set[str] = set()
    for path in read_only:
        _add(opts, visible, os.path.normpath(path))
    for name in etc:
        _add(opts, visible, os.path.normpath(os.path.join("/etc", name)))
    return tuple(opts), frozenset(visible)


def _add(opts: list[str], visible: set[str], path: str) -> None:
    try:
        if os.path.islink(path):
            opts += ["--symlink", os.readlink(path), path]
            visible.add(path)
            return
        if not os.path.exists(path):
            return
    except OSError:
        return
    opts += ["--ro-bind", path, path]
    visible.add(path)


def command_line(
    *,
    fixed: BwrapView,
    roots: Sequence[tuple[int, str, bool]],
    protected: Sequence[tuple[str, Found]],
    extra_ro: Sequence[str],
    extra_rw: Sequence[str],
    home: str,
    unshare_net: bool,
    disable_userns: bool,
    seccomp_fd: int | None,
    info_fd: int | None,
    cwd: str,
    env: Mapping[str, str],
    tmpfs_size: int | None = None,
) -> tuple[list[str], list[int]]:
    """The NUL-separated options for ``--args`` and the fds bwrap must inherit.

    The command itself follows ``--`` on bwrap's real command line (bwrap takes it only
    from there; a command's argv is visible on the host in any case).

    *roots* are ``(fd, physical path, writable)``; *protected* ``(root path, Found)``;
    *tmpfs_size* caps each fresh tmpfs (``/tmp``, ``/dev/shm``, ``$HOME``), in bytes:
    without it each may grow to the kernel's default, half of the host's memory.
    """
    opts = ["--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts"]
    opts += ["--unshare-cgroup-try"]
    if unshare_net:
        opts.append("--unshare-net")
    opts += ["--hostname", "flux-sandbox", "--new-session", "--die-with-parent"]
    opts += ["--cap-drop", "ALL"]
    if disable_userns:
        opts.append("--disable-userns")
    opts += list(fixed)
    opts += ["--proc", "/proc", *_PROC_OPTS, "--dev", "/dev"]
    size = [] if tmpfs_size is None else ["--size", str(tmpfs_size)]
    opts += [*size, "--tmpfs", "/tmp", *size, "--tmpfs", "/dev/shm"]
    opts += ["--perms", "0700", *size, "--tmpfs", home]
    fds: list[int] = []
    for fd, path, writable in roots:
        opts += ["--bind-fd" if writable else "--ro-bind-fd", str(fd), path]
        fds.append(fd)
    for path in extra_ro:
        opts += ["--ro-bind", path, path]
    for path in extra_rw:
        opts += ["--bind", path, path]
    pinned: set[str] = set()
    for base, found in protected:
        if found.fd is None:
            continue
        for rel, pfd in found.parents:
            dest = os.path.join(base, rel)
            if dest in pinned:
                continue
            pinned.add(dest)
            opts += ["--bind-fd", str(pfd), dest]
            fds.append(pfd)
        opts += ["--ro-bind-fd", str(found.fd), os.path.join(base, found.rel)]
        fds.append(found.fd)
    if seccomp_fd is not None:
        opts += ["--seccomp", str(seccomp_fd)]
        fds.append(seccomp_fd)
    if info_fd is not None:
        opts += ["--info-fd", str(info_fd)]
        fds.append(info_fd)
    opts += ["--chdir", cwd, "--clearenv"]
    for key, value in env.items():
        opts += ["--setenv", key, value]
    return opts, fds


def encode_args(opts: Sequence[str]) -> bytes:
    """``--args`` format: each option NUL-terminated."""
    return b"".join(os.fsencode(o) + b"\0" for o in opts)
