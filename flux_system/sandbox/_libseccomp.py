"""A minimal ctypes binding to libseccomp (Debian ``libseccomp2``): filters, not BPF.

Only what the filter builder needs: a context, rules with argument comparisons,
attributes, BPF export to an fd, loading into the calling thread and the user
notification calls. The library is found by its soname (``libseccomp.so.2``); nothing
is compiled. Hand-written BPF is avoided on purpose: libseccomp emits the architecture
check, the x32 guard and the 64-bit argument splits that are easy to get wrong.

Guarantee: every call's return code is checked; a failure raises ``OSError`` with the
errno libseccomp returned (negative values), which the caller translates.
Not guaranteed: anything on a host without libseccomp (:func:`load` returns ``None``).
"""

from __future__ import annotations

import ctypes
import os
import threading
import typing
from collections.abc import Iterator

__all__ = [
    "ACT_ALLOW",
    "ACT_KILL_PROCESS",
    "ACT_NOTIFY",
    "ATTR_ACT_BADARCH",
    "ATTR_CTL_NNP",
    "ATTR_CTL_TSYNC",
    "CMP_EQ",
    "CMP_GE",
    "CMP_MASKED_EQ",
    "CMP_NE",
    "ArgCmp",
    "LibSeccomp",
    "NotifReq",
    "NotifResp",
    "act_errno",
    "install_bpf",
    "load",
]

ACT_KILL_PROCESS = 0x80000000
ACT_ALLOW = 0x7FFF0000
ACT_NOTIFY = 0x7FC00000
_ACT_ERRNO = 0x00050000

ATTR_ACT_BADARCH = 2
ATTR_CTL_NNP = 3
ATTR_CTL_TSYNC = 4

CMP_NE = 1  # enum scmp_compare
CMP_EQ = 4
CMP_GE = 5
CMP_MASKED_EQ = 7


def act_errno(err: int) -> int:
    """The action "fail with *err*"."""
    return _ACT_ERRNO | (err & 0xFFFF)


class ArgCmp(ctypes.Structure):
    """``struct scmp_arg_cmp``."""

    _fields_: typing.ClassVar = [
        ("arg", ctypes.c_uint),
        ("op", ctypes.c_int),
        ("datum_a", ctypes.c_uint64),
        ("datum_b", ctypes.c_uint64),
    ]


class _SeccompData(ctypes.Structure):
    _fields_: typing.ClassVar = [
        ("nr", ctypes.c_int),
        ("arch", ctypes.c_uint32),
        ("instruction_pointer", ctypes.c_uint64),
        ("args", ctypes.c_uint64 * 6),
    ]


class NotifReq(ctypes.Structure):
    """``struct seccomp_notif``."""

    _fields_: typing.ClassVar = [
        ("id", ctypes.c_uint64),
        ("pid", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
        ("data", _SeccompData),
    ]


class NotifResp(ctypes.Structure):
    """``struct seccomp_notif_resp``."""

    _fields_: typing.ClassVar = [
        ("id", ctypes.c_uint64),
        ("val", ctypes.c_int64),
        ("error", ctypes.c_int32),
        ("flags", ctypes.c_uint32),
    ]


def _check(rc: int, what: str) -> int:
    if rc < 0:
        raise OSError(-rc, f"{what}: {os.strerror(-rc)}")
    return rc


@typing.final
class LibSeccomp:
    """The loaded library with typed entry points (one per process)."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self._lib = lib
        lib.seccomp_init.restype = ctypes.c_void_p
        lib.seccomp_init.argtypes = [ctypes.c_uint32]
        lib.seccomp_release.restype = None
        lib.seccomp_release.argtypes = [ctypes.c_void_p]
        lib.seccomp_attr_set.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32]
        lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
        lib.seccomp_syscall_resolve_name.restype = ctypes.c_int
        lib.seccomp_rule_add_array.argtypes = [
            ctypes.c_void_p,
            ctypes.c_uint32,
            ctypes.c_int,
            ctypes.c_uint,
            ctypes.POINTER(ArgCmp),
        ]
        lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
        lib.seccomp_load.argtypes = [ctypes.c_void_p]
        lib.seccomp_notify_fd.argtypes = [ctypes.c_void_p]
        lib.seccomp_notify_alloc.argtypes = [
            ctypes.POINTER(ctypes.POINTER(NotifReq)),
            ctypes.POINTER(ctypes.POINTER(NotifResp)),
        ]
        lib.seccomp_notify_free.restype = None
        lib.seccomp_notify_free.argtypes = [
            ctypes.POINTER(NotifReq),
            ctypes.POINTER(NotifResp),
        ]
        lib.seccomp_notify_receive.argtypes = [ctypes.c_int, ctypes.POINTER(NotifReq)]
        lib.seccomp_notify_respond.argtypes = [ctypes.c_int, ctypes.POINTER(NotifResp)]
        lib.seccomp_syscall_resolve_num_arch.restype = ctypes.c_void_p
        lib.seccomp_syscall_resolve_num_arch.argtypes = [ctypes.c_uint32, ctypes.c_int]
        lib.seccomp_arch_native.restype = ctypes.c_uint32
        lib.seccomp_version.restype = ctypes.c_void_p

    def version(self) -> str:
        ptr = self._lib.seccomp_version()
        major, minor, micro = ctypes.cast(ptr, ctypes.POINTER(ctypes.c_uint * 3)).contents
        return f"{major}.{minor}.{micro}"

    def init(self, default_action: int) -> int:
        ctx = self._lib.seccomp_init(default_action)
        if not ctx:
            raise OSError(0, "seccomp_init failed")
        return int(ctx)

    def release(self, ctx: int) -> None:
        self._lib.seccomp_release(ctx)

    def attr_set(self, ctx: int, attr: int, value: int) -> None:
        _check(self._lib.seccomp_attr_set(ctx, attr, value), "seccomp_attr_set")

    def resolve(self, name: str) -> int | None:
        nr = int(self._lib.seccomp_syscall_resolve_name(name.encode()))
        return None if nr == -1 else nr  # __NR_SCMP_ERROR: no such syscall anywhere

    def name_of(self, nr: int) -> str:
        ptr = self._lib.seccomp_syscall_resolve_num_arch(self._lib.seccomp_arch_native(), nr)
        if not ptr:
            return f"syscall#{nr}"
        name = ctypes.string_at(ptr).decode()
        ctypes.CDLL(None).free(ctypes.c_void_p(ptr))
        return name

    def rule(self, ctx: int, action: int, nr: int, cmps: tuple[ArgCmp, ...] = ()) -> None:
        arr = (ArgCmp * len(cmps))(*cmps) if cmps else None
        _check(
            self._lib.seccomp_rule_add_array(ctx, action, nr, len(cmps), arr),
            "seccomp_rule_add",
        )

    def export_bpf(self, ctx: int, fd: int) -> None:
        _check(self._lib.seccomp_export_bpf(ctx, fd), "seccomp_export_bpf")

    def load_ctx(self, ctx: int) -> None:
        _check(self._lib.seccomp_load(ctx), "seccomp_load")

    def notify_fd(self, ctx: int) -> int:
        return _check(self._lib.seccomp_notify_fd(ctx), "seccomp_notify_fd")

    def notify_alloc(self) -> tuple[typing.Any, typing.Any]:
        req = ctypes.POINTER(NotifReq)()
        resp = ctypes.POINTER(NotifResp)()
        _check(
            self._lib.seccomp_notify_alloc(ctypes.byref(req), ctypes.byref(resp)),
            "seccomp_notify_alloc",
        )
        return req, resp

    def notify_free(self, req: typing.Any, resp: typing.Any) -> None:
        self._lib.seccomp_notify_free(req, resp)

    def notify_receive(self, fd: int, req: typing.Any) -> None:
        _check(self._lib.seccomp_notify_receive(fd, req), "seccomp_notify_receive")

    def notify_respond(self, fd: int, resp: typing.Any) -> None:
        _check(self._lib.seccomp_notify_respond(fd, resp), "seccomp_notify_respond")


_SECCOMP_SET_MODE_FILTER = 1
_SECCOMP_FILTER_FLAG_NEW_LISTENER = 1 << 3


class _SockFprog(ctypes.Structure):
    _fields_: typing.ClassVar = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install_bpf(lib: LibSeccomp, program: bytes, *, new_listener: bool) -> int:
    """Install the BPF *program* on the calling thread; return its listener fd (or -1).

    The ``seccomp(2)`` call is made here rather than by ``seccomp_load``: libseccomp
    keeps one notification fd per process, which two spawners would share (and one
    would close under the other). Requires ``no_new_privs`` (or CAP_SYS_ADMIN).

    Raises:
        OSError: the kernel refused the program.
    """
    if len(program) % 8 or not program:
        raise OSError(22, "malformed BPF program")
    buf = ctypes.create_string_buffer(program, len(program))
    prog = _SockFprog(len(program) // 8, ctypes.cast(buf, ctypes.c_void_p))
    nr = lib.resolve("seccomp")
    if nr is None:
        raise OSError(38, "no seccomp syscall")
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    flags = _SECCOMP_FILTER_FLAG_NEW_LISTENER if new_listener else 0
    rc = int(
        libc.syscall(
            ctypes.c_long(nr),
            ctypes.c_uint(_SECCOMP_SET_MODE_FILTER),
            ctypes.c_uint(flags),
            ctypes.byref(prog),
        )
    )
    if rc < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"seccomp(SET_MODE_FILTER): {os.strerror(err)}")
    if new_listener:
        os.set_inheritable(rc, False)
        return rc
    return -1


_lock = threading.Lock()
_loaded: list[LibSeccomp | None] = []


def _candidates() -> Iterator[str]:
    yield "libseccomp.so.2"
    import ctypes.util  # here: it imports tempfile, shutil and subprocess's helpers

    found = ctypes.util.find_library("seccomp")
    if found:
        yield found


def load() -> LibSeccomp | None:
    """The process's libseccomp, or ``None`` when the host has none (cached)."""
    with _lock:
        if not _loaded:
            lib: LibSeccomp | None = None
            # The soname first; find_library (which runs `ldconfig -p` as a child
            # process) only when the soname is not found.
            for name in _candidates():
                try:
                    lib = LibSeccomp(ctypes.CDLL(name, use_errno=True))
                    break
                except (OSError, AttributeError):
                    continue
            _loaded.append(lib)
        return _loaded[0]
