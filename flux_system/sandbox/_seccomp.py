"""The seccomp filter of DESIGN §2.5, generated with libseccomp (never hand-written BPF).

Default allow; the deny list below fails with ``EPERM`` (or answers as noted).
- Dangerous syscalls: ptrace, cross-process memory, io_uring, bpf, perf, keyrings,
  userfaultfd, namespaces (``unshare``, ``setns``), the mount family, kexec, modules,
  ``open_by_handle_at`` and a few administrative calls that need capabilities anyway.
- Calls that change *another* process given its pid, checked by the kernel only for a
  matching uid (Landlock scopes signals and ptrace, not these; the Landlock-only
  backend shares the host's pid namespace): ``prlimit64`` (``RLIMIT_CPU`` alone kills
  the target), ``sched_setaffinity``/``setscheduler``/``setparam``/``setattr`` with a
  pid other than 0, ``setpriority`` and ``ioprio_set`` with a ``who`` other than 0 or
  for a whole user (``which`` compared on its low 32 bits: the kernel reads an int).
- ``clone`` with any namespace flag is refused; ``clone3`` answers ``ENOSYS`` (its
  flags live in memory a filter cannot read), so libc falls back to ``clone``.
- ``ioctl`` ``TIOCSTI``/``TIOCLINUX``, compared on the command's low 32 bits: the
  kernel truncates the command to ``unsigned int``, so ``TIOCSTI | 1 << 32`` must match
  too (CVE-2019-10063).
- ``socket`` families other than ``AF_UNIX``/``AF_INET``/``AF_INET6`` (plus
  ``AF_NETLINK`` when the profile asks) answer ``EAFNOSUPPORT``, compared on the low
  32 bits as well; ``socket(AF_INET*)`` may be refused entirely (``deny_inet``: the
  Landlock-only backend with no network, where no namespace removes the interfaces).
- Foreign architectures (i386 and x32 syscalls from an x86_64 process) kill the
  process: libseccomp's bad-architecture action.
- With ``guard_tid`` (the Landlock-only spawner thread, which shares its Landlock
  domain with the children it forks, so Landlock's signal scope lets them reach it):
  ``kill``/``rt_sigqueueinfo``/``tkill``/``tgkill``/``rt_tgsigqueueinfo`` naming that
  thread's id, ``pidfd_open`` of a single thread (``PIDFD_THREAD``) and
  ``fcntl(F_SETOWN_EX)`` (whose owner may name a thread) are refused, and
  ``pidfd_send_signal`` answers ``ENOSYS`` (its target is an fd, which a filter cannot
  read: ``/proc/<tid>`` opened as a directory names the thread; callers fall back to
  ``kill``, as on kernels before 5.1). A signal to a thread is one to its process.

Guarantee: the program is exported by libseccomp for the native architecture only.
Not guaranteed: what a denied call's caller does with the errno.
"""

from __future__ import annotations

import errno
import fcntl
import os

import flux_system.sandbox._libseccomp as L
from flux_system._values import record

__all__ = [
    "DENIED_SYSCALLS",
    "IPC_SYSCALLS",
    "PID_ARG_SYSCALLS",
    "WHO_USER",
    "FilterSpec",
    "build",
    "export_bytes",
    "export_memfd",
]

DENIED_SYSCALLS: tuple[str, ...] = (
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "bpf",
    "perf_event_open",
    "keyctl",
    "add_key",
    "request_key",
    "userfaultfd",
    "unshare",
    "setns",
    "mount",
    "umount",
    "umount2",
    "pivot_root",
    "move_mount",
    "open_tree",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    "chroot",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "create_module",
    "open_by_handle_at",
    "acct",
    "swapon",
    "swapoff",
    "reboot",
    "syslog",
    "uselib",
    "lookup_dcookie",
    "quotactl",
    "nfsservctl",
    "iopl",
    "ioperm",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "stime",
    "sethostname",
    "setdomainname",
    "vhangup",
    "fanotify_init",
    "name_to_handle_at",
    "pidfd_getfd",  # another process's fds, checked like ptrace (which is denied too)
    "kcmp",
)

# The Landlock-only backend adds these: Landlock (ABI <= 7) has no right for changing
# ownership or extended attributes, so without a mount namespace a child could change
# them on any file its uid owns outside the workspace. Rarely needed by builds; chmod
# and utimes stay allowed there (common in a workspace) and are reported as a gap.
METADATA_SYSCALLS: tuple[str, ...] = (
    "chown",
    "fchown",
    "lchown",
    "fchownat",
    "setxattr",
    "lsetxattr",
    "fsetxattr",
    "setxattrat",
    "removexattr",
    "lremovexattr",
    "fremovexattr",
    "removexattrat",
)

# And for a root caller these too: every root-owned file on the host is then the
# caller's own, and Landlock cannot stop `chmod u+s /usr/bin/x` or `chmod 666
# /etc/shadow`. Refused everywhere (the workspace included): `chmod`, `touch` of an
# existing file, `cp -p` fail there for root — use bubblewrap, or run as another user.
ROOT_METADATA_SYSCALLS: tuple[str, ...] = (
    "chmod",
    "fchmod",
    "fchmodat",
    "fchmodat2",
    "utime",
    "utimes",
    "utimensat",
    "futimesat",
)

# And these, where there is no IPC namespace (the Landlock-only backend): System V
# shared memory, message queues and semaphores, and POSIX message queues, live in the
# host's IPC namespace, where a child could attach or read those of its uid's host
# processes (Landlock does not mediate them). `shmdt` stays: it only detaches.
IPC_SYSCALLS: tuple[str, ...] = (
    "shmget",
    "shmat",
    "shmctl",
    "msgget",
    "msgsnd",
    "msgrcv",
    "msgctl",
    "semget",
    "semop",
    "semtimedop",
    "semctl",
    "mq_open",
    "mq_unlink",
    "mq_timedsend",
    "mq_timedreceive",
    "mq_notify",
    "mq_getsetattr",
)

CLONE_NS_FLAGS: tuple[int, ...] = (
    0x00020000,  # CLONE_NEWNS
    0x02000000,  # CLONE_NEWCGROUP
    0x04000000,  # CLONE_NEWUTS
    0x08000000,  # CLONE_NEWIPC
    0x10000000,  # CLONE_NEWUSER
    0x20000000,  # CLONE_NEWPID
    0x40000000,  # CLONE_NEWNET
)  # (CLONE_NEWTIME shares its bit with clone's exit signal: clone cannot set it)

# Their first argument is a pid; refused unless it is 0 (the caller itself). Compared
# on all 64 bits: any value the kernel could read as another pid is non-zero there.
PID_ARG_SYSCALLS: tuple[str, ...] = (
    "prlimit64",
    "sched_setaffinity",
    "sched_setscheduler",
    "sched_setparam",
    "sched_setattr",
)
# (which, who) calls: refused for a who other than 0 and for which == "a whole user".
WHO_USER: dict[str, int] = {"setpriority": 2, "ioprio_set": 3}  # PRIO_USER, IOPRIO_WHO_USER

TIOCSTI = 0x5412
TIOCLINUX = 0x541C
_LOW32 = 0xFFFFFFFF
PIDFD_THREAD = 0o200  # O_EXCL
F_SETOWN_EX = 15
# Where each call that can signal one thread takes its id: kill(tid) signals the
# thread's whole process, and the permission check (Landlock's too) is made on the
# thread named, so kill and rt_sigqueueinfo are in the list as well.
TID_ARG: dict[str, int] = {
    "kill": 0,
    "rt_sigqueueinfo": 0,
    "tkill": 0,
    "tgkill": 1,
    "rt_tgsigqueueinfo": 1,
}
_AF_MAX = 64  # families above this answer EAFNOSUPPORT as one range


@record
class FilterSpec:
    """What one filter denies beyond the fixed list (built from a profile)."""

    allow_netlink: bool = False
    deny_inet: bool = False
    notify: bool = False  # denials go to a user-notification listener (and fail there)
    extra_denied: tuple[str, ...] = ()
    guard_tid: int = 0  # a host thread the children must not signal (0: none)


def _cmp(arg: int, op: int, a: int, b: int = 0) -> L.ArgCmp:
    return L.ArgCmp(arg, op, a, b)


# Linux's address families (include/linux/socket.h), fixed by the kernel ABI; named
# here rather than read from the socket module, whose import costs every flux exec
# about 3.5 ms (a test holds them to socket's values).
AF_UNIX, AF_INET, AF_INET6, AF_NETLINK = 1, 2, 10, 16


def _allowed_families(spec: FilterSpec) -> frozenset[int]:
    fams = {AF_UNIX}
    if not spec.deny_inet:
        fams |= {AF_INET, AF_INET6}
    if spec.allow_netlink:
        fams.add(AF_NETLINK)
    return frozenset(fams)


def build(lib: L.LibSeccomp, spec: FilterSpec) -> int:
    """Return a libseccomp context holding the filter (the caller releases it).

    Raises:
        OSError: libseccomp refused a rule or attribute.
    """
    ctx = lib.init(L.ACT_ALLOW)
    try:
        lib.attr_set(ctx, L.ATTR_ACT_BADARCH, L.ACT_KILL_PROCESS)
        lib.attr_set(ctx, L.ATTR_CTL_NNP, 0)  # set by bwrap / by the spawner itself
        eperm = L.ACT_NOTIFY if spec.notify else L.act_errno(errno.EPERM)
        eafn = L.ACT_NOTIFY if spec.notify else L.act_errno(errno.EAFNOSUPPORT)
        for name in (*DENIED_SYSCALLS, *spec.extra_denied):
            nr = lib.resolve(name)
            if nr is not None:
                lib.rule(ctx, eperm, nr)
        for name in PID_ARG_SYSCALLS:
            nr = lib.resolve(name)
            if nr is not None:
                lib.rule(ctx, eperm, nr, (_cmp(0, L.CMP_NE, 0),))
        for name, user in WHO_USER.items():
            nr = lib.resolve(name)
            if nr is not None:
                lib.rule(ctx, eperm, nr, (_cmp(1, L.CMP_NE, 0),))
                lib.rule(ctx, eperm, nr, (_cmp(0, L.CMP_MASKED_EQ, _LOW32, user),))
        clone, clone3 = lib.resolve("clone"), lib.resolve("clone3")
        if clone is not None:
            for flag in CLONE_NS_FLAGS:
                lib.rule(ctx, eperm, clone, (_cmp(0, L.CMP_MASKED_EQ, flag, flag),))
        if clone3 is not None:
            lib.rule(ctx, L.act_errno(errno.ENOSYS), clone3)
        ioctl = lib.resolve("ioctl")
        if ioctl is not None:
            for cmd in (TIOCSTI, TIOCLINUX):
                lib.rule(ctx, eperm, ioctl, (_cmp(1, L.CMP_MASKED_EQ, _LOW32, cmd),))
        if spec.guard_tid:
            _guard_thread(lib, ctx, eperm, spec.guard_tid)
        sock = lib.resolve("socket")
        if sock is not None:
            allowed = _allowed_families(spec)
            for fam in range(_AF_MAX):
                if fam not in allowed:
                    lib.rule(ctx, eafn, sock, (_cmp(0, L.CMP_MASKED_EQ, _LOW32, fam),))
            lib.rule(ctx, eafn, sock, (_cmp(0, L.CMP_GE, _AF_MAX),))
        return ctx
    except BaseException:
        lib.release(ctx)
        raise


def _guard_thread(lib: L.LibSeccomp, ctx: int, action: int, tid: int) -> None:
    # pid_t and the fcntl command are ints: compared on the low 32 bits.
    for name, arg in TID_ARG.items():
        nr = lib.resolve(name)
        if nr is not None:
            lib.rule(ctx, action, nr, (_cmp(arg, L.CMP_MASKED_EQ, _LOW32, tid),))
    nr = lib.resolve("pidfd_open")
    if nr is not None:
        lib.rule(ctx, action, nr, (_cmp(1, L.CMP_MASKED_EQ, PIDFD_THREAD, PIDFD_THREAD),))
    nr = lib.resolve("fcntl")
    if nr is not None:
        lib.rule(ctx, action, nr, (_cmp(1, L.CMP_MASKED_EQ, _LOW32, F_SETOWN_EX),))
    nr = lib.resolve("pidfd_send_signal")
    if nr is not None:
        lib.rule(ctx, L.act_errno(errno.ENOSYS), nr)


def export_memfd(lib: L.LibSeccomp, spec: FilterSpec) -> int:
    """The BPF program of *spec* in a sealed memfd at offset 0 (for ``bwrap --seccomp``).

    Raises:
        OSError: libseccomp failed, or no memfd could be made.
    """
    ctx = build(lib, spec)
    try:
        fd = os.memfd_create("flux-seccomp", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            lib.export_bpf(ctx, fd)
            os.lseek(fd, 0, os.SEEK_SET)
            _seal(fd)
        except BaseException:
            os.close(fd)
            raise
        return fd
    finally:
        lib.release(ctx)


def export_bytes(lib: L.LibSeccomp, spec: FilterSpec) -> bytes:
    """The BPF program of *spec* as bytes (``struct sock_filter`` records).

    Raises:
        OSError: libseccomp failed.
    """
    fd = export_memfd(lib, spec)
    try:
        size = os.fstat(fd).st_size
        return os.pread(fd, size, 0)
    finally:
        os.close(fd)


def _seal(fd: int) -> None:
    fcntl.fcntl(
        fd,
        fcntl.F_ADD_SEALS,
        fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE,
    )
