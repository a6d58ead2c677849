"""Resource limits and privilege settings for a child, applied before exec.

Guarantee: each limit set on :class:`Limits` is either enforced on the child or the
spawn fails with ``SpawnError(reason=LIMIT_UNENFORCEABLE)`` — never silently ignored.
``RLIMIT_NPROC`` is not enforced by the kernel for root (or ``CAP_SYS_RESOURCE``), so a
process limit on a root child is enforced by the pids cgroup of its tree, or refused.
Not guaranteed: ``cpu_s`` and ``address_space`` are per process, not per tree.
"""

from __future__ import annotations

import ctypes
import resource
import typing
from collections.abc import Callable

from flux_system._values import record

__all__ = ["Limits", "Privileges", "make_preexec"]

_PR_SET_NO_NEW_PRIVS = 38


def _check(name: str, value: int | None, *, minimum: int) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int or None")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}")


@typing.final
@record
class Limits:
    """Per-child resource limits (``None`` = inherit). ``timeout`` is the wall-time limit.

    Attributes:
        cpu_s: CPU seconds (``RLIMIT_CPU``; SIGXCPU then SIGKILL).
        address_space: bytes of virtual memory (``RLIMIT_AS``).
        open_files: open file descriptors (``RLIMIT_NOFILE``).
        file_size: bytes a file may grow to (``RLIMIT_FSIZE``; SIGXFSZ).
        nproc: processes/threads (``RLIMIT_NPROC`` for an unprivileged uid, the pids
            cgroup of the tree for root; refused when neither can enforce it).
    """

    cpu_s: int | None = None
    address_space: int | None = None
    open_files: int | None = None
    file_size: int | None = None
    nproc: int | None = None

    def __post_init__(self) -> None:
        _check("cpu_s", self.cpu_s, minimum=1)
        _check("address_space", self.address_space, minimum=1 << 20)
        _check("open_files", self.open_files, minimum=3)
        _check("file_size", self.file_size, minimum=0)
        _check("nproc", self.nproc, minimum=1)

    def rlimits(self) -> tuple[tuple[int, int], ...]:
        """The ``(resource, value)`` pairs to set in the child."""
        pairs = (
            (resource.RLIMIT_CPU, self.cpu_s),
            (resource.RLIMIT_AS, self.address_space),
            (resource.RLIMIT_NOFILE, self.open_files),
            (resource.RLIMIT_FSIZE, self.file_size),
            (resource.RLIMIT_NPROC, self.nproc),
        )
        return tuple((r, v) for r, v in pairs if v is not None)


@typing.final
@record
class Privileges:
    """Privilege settings for children.

    Attributes:
        no_new_privs: set ``PR_SET_NO_NEW_PRIVS`` (setuid bits and file capabilities
            no longer raise privileges).
        uid, gid: drop to this uid/gid (supplementary groups cleared) — only possible
            when the parent may (root); otherwise the spawn fails. A uid needs a gid
            (``ValueError``): a uid alone would keep the root group.
        umask: the child's umask.
    """

    no_new_privs: bool = False
    uid: int | None = None
    gid: int | None = None
    umask: int | None = None

    def __post_init__(self) -> None:
        _check("uid", self.uid, minimum=0)
        _check("gid", self.gid, minimum=0)
        _check("umask", self.umask, minimum=0)
        if self.uid is not None and self.gid is None:
            # setuid alone keeps gid 0: root's group would stay with the child.
            raise ValueError("gid must be given with uid")
        if self.umask is not None and self.umask > 0o777:
            raise ValueError("umask must be <= 0o777")
        if not isinstance(self.no_new_privs, bool):
            raise TypeError("no_new_privs must be a bool")


_prctl: Callable[..., int] | None = None


def _load_prctl() -> Callable[..., int]:
    global _prctl  # noqa: PLW0603 - loaded once, before any fork
    if _prctl is None:
        libc = ctypes.CDLL(None, use_errno=True)  # libc is in the process: no ldconfig run
        fn = libc.prctl
        fn.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
        fn.restype = ctypes.c_int
        _prctl = fn
    return _prctl


def make_preexec(
    rlimits: tuple[tuple[int, int], ...], *, no_new_privs: bool
) -> Callable[[], None] | None:
    """Return the function run in the child before exec, or ``None`` when nothing is asked.

    The default path has no ``preexec_fn`` (it forces fork instead of vfork, ~3.5x
    slower); this is paid only when limits or ``no_new_privs`` are requested.
    Everything the child needs is prepared here, in the parent.
    """
    if not rlimits and not no_new_privs:
        return None
    prctl = _load_prctl() if no_new_privs else None
    setrlimit = resource.setrlimit

    def _preexec() -> None:
        for res, value in rlimits:
            setrlimit(res, (value, value))
        if prctl is not None and prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")

    return _preexec
