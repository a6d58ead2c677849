"""The syscall probe run *inside* a sandbox (by the system interpreter, stdlib only).

Prints one JSON object: for each probe, ``[return value, errno]``. The syscall numbers
come from the host (libseccomp resolves them) as ``argv[1]`` (JSON), so the probe is
architecture-neutral. Every probe that could succeed is harmless when it does: a raw
``clone`` child exits at once.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys

NR = json.loads(sys.argv[1])
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long


def call(name: str, *args: int) -> list[int]:
    ctypes.set_errno(0)
    rc = libc.syscall(ctypes.c_long(NR[name]), *(ctypes.c_long(a) for a in args))
    err = ctypes.get_errno()
    if name == "clone" and rc == 0:  # the child of a clone that was allowed
        os._exit(0)
    if name == "clone" and rc > 0:
        os.waitpid(rc, 0)
    return [int(rc), err if rc < 0 else 0]


TIOCSTI = 0x5412
HIGH = 1 << 32
out = {
    "getpid": call("getpid"),
    "unshare_user": call("unshare", 0x10000000),
    "clone_newuser": call("clone", 0x10000000 | 17, 0, 0, 0, 0),
    "clone_plain": call("clone", 17, 0, 0, 0, 0),
    "clone3": call("clone3", 0, 0),
    "tiocsti": call("ioctl", 0, TIOCSTI, 0),
    "tiocsti_high": call("ioctl", 0, TIOCSTI | HIGH, 0),
    "socket_unix": call("socket", 1, 1, 0),
    "socket_packet": call("socket", 17, 3, 0),
    "socket_netlink_high": call("socket", 16 | HIGH, 3, 0),
    "socket_huge": call("socket", 1000, 1, 0),
    "io_uring_setup": call("io_uring_setup", 1, 0),
    "ptrace": call("ptrace", 0, 0, 0, 0),
    "mount": call("mount", 0, 0, 0, 0, 0),
    "bpf": call("bpf", 0, 0, 0),
    "keyctl": call("keyctl", 0, 0, 0, 0, 0),
    "userfaultfd": call("userfaultfd", 0),
    "perf_event_open": call("perf_event_open", 0, 0, 0, 0, 0),
    "setns": call("setns", -1, 0),
    # Another process (pid 1: bwrap's init inside, the host's init on the Landlock
    # backend; all harmless: a read-only prlimit, an empty affinity mask, a user with
    # no processes): refused; the same on the caller itself (0) admitted.
    "prlimit_self": call("prlimit64", 0, 13, 0, 0),
    "prlimit_other": call("prlimit64", 1, 13, 0, 0),
    "prlimit_other_high": call("prlimit64", 1 | HIGH, 13, 0, 0),
    "affinity_other": call("sched_setaffinity", 1, 0, 0),
    "setpriority_user": call("setpriority", 2, 54321, 0),
    "setpriority_user_high": call("setpriority", 2 | HIGH, 0, 0),
    "ioprio_user": call("ioprio_set", 3, 54321, 0),
}
print(json.dumps(out))
