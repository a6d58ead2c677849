"""A small ctypes binding to Landlock (ABI-aware), standard library only.

Why not the ``landlock`` package: it covers filesystem rights only and stops before
ABI 4, so TCP bind/connect rules (ABI 4), device ioctl (ABI 5) and the abstract-unix
and signal scopes (ABI 6) are out of its reach (docs/decisions/0082). This module is
also loaded by the in-sandbox launcher by file path, so it imports nothing from flux.

Guarantee: :func:`restrict` handles every access right the running kernel knows for
the ABI it reports (older kernels get the subset they have; nothing is assumed), and
after it returns the calling thread (and what it forks) is restricted; any failure
raises ``OSError`` before the thread is restricted, or after a partial rule set with
the thread not yet restricted.
Not guaranteed: UDP, pathname unix sockets and ``/proc`` access to processes of the
same domain — Landlock does not cover them at ABI 7.
"""

from __future__ import annotations

import ctypes
import os
import stat
import typing

__all__ = ["FS_READ", "FS_WRITE", "Ruleset", "abi_version", "restrict"]

_NR = {  # the generic syscall numbers (same on x86_64, aarch64, riscv64, ...)
    "landlock_create_ruleset": 444,
    "landlock_add_rule": 445,
    "landlock_restrict_self": 446,
}
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_RULE_NET_PORT = 2
_PR_SET_NO_NEW_PRIVS = 38

# Filesystem rights by the ABI that introduced them.
EXECUTE = 1 << 0
WRITE_FILE = 1 << 1
READ_FILE = 1 << 2
READ_DIR = 1 << 3
REMOVE_DIR = 1 << 4
REMOVE_FILE = 1 << 5
MAKE_CHAR = 1 << 6
MAKE_DIR = 1 << 7
MAKE_REG = 1 << 8
MAKE_SOCK = 1 << 9
MAKE_FIFO = 1 << 10
MAKE_BLOCK = 1 << 11
MAKE_SYM = 1 << 12
REFER = 1 << 13  # ABI 2
TRUNCATE = 1 << 14  # ABI 3
IOCTL_DEV = 1 << 15  # ABI 5
NET_BIND_TCP = 1 << 0  # ABI 4
NET_CONNECT_TCP = 1 << 1  # ABI 4
SCOPE_ABSTRACT_UNIX = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1  # ABI 6

FS_READ = EXECUTE | READ_FILE | READ_DIR
FS_WRITE = (
    WRITE_FILE
    | REMOVE_DIR
    | REMOVE_FILE
    | MAKE_CHAR
    | MAKE_DIR
    | MAKE_REG
    | MAKE_SOCK
    | MAKE_FIFO
    | MAKE_BLOCK
    | MAKE_SYM
    | REFER
    | TRUNCATE
    | IOCTL_DEV
)
_FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV


def _fs_rights(abi: int) -> int:
    rights = (1 << 13) - 1
    if abi >= 2:
        rights |= REFER
    if abi >= 3:
        rights |= TRUNCATE
    if abi >= 5:
        rights |= IOCTL_DEV
    return rights


class _RulesetAttr(ctypes.Structure):
    _fields_: typing.ClassVar = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_: typing.ClassVar = [
        ("allowed_access", ctypes.c_uint64),
        ("parent_fd", ctypes.c_int32),
    ]


class _NetPort(ctypes.Structure):
    _fields_: typing.ClassVar = [
        ("allowed_access", ctypes.c_uint64),
        ("port", ctypes.c_uint64),
    ]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.prctl.restype = ctypes.c_int


def _syscall(name: str, *args: object) -> int:
    if os.uname().sysname != "Linux":
        raise OSError(38, "Landlock is Linux-only")
    rc = int(_libc.syscall(ctypes.c_long(_NR[name]), *args))
    if rc < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{name}: {os.strerror(err)}")
    return rc


def abi_version() -> int:
    """The kernel's Landlock ABI (0 when Landlock is absent or disabled)."""
    try:
        return _syscall(
            "landlock_create_ruleset",
            None,
            ctypes.c_size_t(0),
            ctypes.c_uint32(_CREATE_RULESET_VERSION),
        )
    except OSError:
        return 0


class Ruleset(typing.NamedTuple):
    """What to allow (everything else the ABI handles is denied).

    ``tcp_bind``/``tcp_connect`` are port allow-lists (ABI ≥ 4; empty denies all);
    ``scope`` closes abstract unix sockets and signals to processes outside (ABI ≥ 6).
    """

    read: tuple[str, ...]
    write: tuple[str, ...]
    tcp_bind: tuple[int, ...] | None = ()
    tcp_connect: tuple[int, ...] | None = ()
    scope: bool = True


def restrict(rules: Ruleset, abi: int | None = None) -> dict[str, bool]:
    """Restrict the calling thread to *rules*; return which parts were enforced.

    Paths that do not exist are skipped. ``no_new_privs`` is set on the thread first.
    Returns ``{"fs": ..., "tcp": ..., "scope": ...}``.

    Raises:
        OSError: Landlock is unavailable, or a rule was refused.
    """
    abi = abi_version() if abi is None else abi
    if abi < 1:
        raise OSError(38, "Landlock is not available")
    handled_fs = _fs_rights(abi)
    net = abi >= 4 and (rules.tcp_bind is not None or rules.tcp_connect is not None)
    handled_net = 0
    if abi >= 4 and rules.tcp_bind is not None:
        handled_net |= NET_BIND_TCP
    if abi >= 4 and rules.tcp_connect is not None:
        handled_net |= NET_CONNECT_TCP
    scoped = SCOPE_ABSTRACT_UNIX | SCOPE_SIGNAL if abi >= 6 and rules.scope else 0
    attr = _RulesetAttr(handled_fs, handled_net, scoped)
    size = ctypes.sizeof(_RulesetAttr) if abi >= 6 else (16 if abi >= 4 else 8)
    rfd = _syscall("landlock_create_ruleset", ctypes.byref(attr), ctypes.c_size_t(size), 0)
    try:
        for paths, access in ((rules.read, FS_READ), (rules.write, FS_READ | FS_WRITE)):
            for path in paths:
                _add_path(rfd, path, access & handled_fs)
        for ports, right in ((rules.tcp_bind, NET_BIND_TCP), (rules.tcp_connect, NET_CONNECT_TCP)):
            if handled_net & right and ports:
                for port in ports:
                    rule = _NetPort(right, port)
                    _syscall("landlock_add_rule", rfd, _RULE_NET_PORT, ctypes.byref(rule), 0)
        if _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            err = ctypes.get_errno()
            raise OSError(err, "prctl(PR_SET_NO_NEW_PRIVS)")
        _syscall("landlock_restrict_self", rfd, 0)
    finally:
        os.close(rfd)
    return {"fs": True, "tcp": net, "scope": bool(scoped)}


def _add_path(rfd: int, path: str, access: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # a missing path grants nothing
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            access &= _FILE_RIGHTS  # directory-only rights are refused on a file
        rule = _PathBeneath(access, fd)
        _syscall("landlock_add_rule", rfd, _RULE_PATH_BENEATH, ctypes.byref(rule), 0)
    finally:
        os.close(fd)
