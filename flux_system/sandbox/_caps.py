"""Drop every capability from the calling thread (bounding set, ambient, the three sets).

Used by the Landlock spawner thread: its children then run without capabilities even
when this process is root (with the bounding set empty, an exec by uid 0 gains none).
Capability sets are per thread, so the rest of the process keeps its own.

Guarantee: after :func:`drop_all` returns, the thread's effective, permitted,
inheritable and ambient sets are empty, and so is its bounding set when it could be
changed (an unprivileged thread without ``CAP_SETPCAP`` keeps it: its exec gains
nothing from it); any other failure raises ``OSError``.
"""

from __future__ import annotations

import ctypes
import os
import typing

__all__ = ["drop_all"]

_PR_CAPBSET_DROP = 24
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
_LINUX_CAPABILITY_VERSION_3 = 0x20080522


class _Header(ctypes.Structure):
    _fields_: typing.ClassVar = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _Data(ctypes.Structure):
    _fields_: typing.ClassVar = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def _last_cap() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap", encoding="ascii") as fh:
            return int(fh.read().strip())
    except (OSError, ValueError):
        return 63


def drop_all() -> None:
    """Empty every capability set of the calling thread (see the module docstring).

    Raises:
        OSError: a drop was refused.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.restype = ctypes.c_int
    for cap in range(_last_cap() + 1):
        if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            err = ctypes.get_errno()
            if err == 22:  # EINVAL: the kernel does not know this capability
                continue
            if err == 1 and os.geteuid() != 0:
                # EPERM without CAP_SETPCAP: an unprivileged thread, whose exec gains no
                # capability anyway (no_new_privs also blocks file capabilities).
                break
            raise OSError(err, f"prctl(PR_CAPBSET_DROP, {cap}): {os.strerror(err)}")
    if libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        if err != 22:
            raise OSError(err, f"prctl(PR_CAP_AMBIENT): {os.strerror(err)}")
    header = _Header(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_Data * 2)()
    if libc.capset(ctypes.byref(header), data) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"capset: {os.strerror(err)}")
