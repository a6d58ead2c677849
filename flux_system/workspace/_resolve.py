"""Resolution of a relative path *beneath* an open directory fd.

Two implementations with identical semantics (those of Linux ``RESOLVE_BENEATH``):

- ``openat2``: one ``openat2(2)`` call with ``RESOLVE_BENEATH|RESOLVE_NO_MAGICLINKS``
  through ``ctypes`` (Linux >= 5.6). The kernel checks every step, including ``..``
  against concurrent renames (it fails with ``EAGAIN``, retried a bounded number of
  times, then :attr:`ConfinementReason.RACE`).
- ``walk``: a per-component walk from the root fd. Every component is opened with
  ``O_NOFOLLOW`` so the kernel never follows a symlink; a symlink is read with
  ``readlinkat`` and its text is resolved by this walk (absolute targets refused,
  ``..`` never above the root, at most :data:`_MAX_SYMLINKS` links).

Semantics shared by both: ``..`` may never take resolution above the root, even
transiently (``a/../../root/b`` is refused); absolute symlink targets are refused even
when they point inside the root; magic links (``/proc/self/fd/N``, ``/proc/self/root``)
are refused. Mount points inside the root are crossed (no ``RESOLVE_NO_XDEV``): see
docs/decisions/0010-resolver-openat2-and-walk.md.

Not guaranteed by ``walk``: a directory that a third party moves *out of* the root
while a resolution is inside it (needs write access outside the root) — ``openat2``
detects that case, the walk cannot. The walk holds one fd per directory level of the
lookup (``..`` pops one), so a path nested deeper than ``RLIMIT_NOFILE`` fails with a
typed error instead of resolving.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
import typing

from flux_system._exceptions import ConfinementReason, PathEscapeError

__all__ = [
    "OPENERS",
    "RESOLVERS",
    "Opener",
    "link_free",
    "openat2_available",
]

RESOLVERS = ("openat2", "walk")

_MAX_SYMLINKS = 40  # Linux MAXSYMLINKS: the kernel's own budget per lookup
_MAX_RACE_RETRIES = 16  # openat2 EAGAIN retries before reporting ConfinementReason.RACE
# Steps one walk may take: one per component of the path and of every followed link
# text (each under PATH_MAX bytes, so at most PATH_MAX components: ``a//b`` has an
# empty one), and the final open of a path that ends in ``.``, ``..`` or ``/``.
_MAX_STEPS = (_MAX_SYMLINKS + 1) * 4096 + 1

RESOLVE_NO_XDEV = 0x01
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_BENEATH = 0x08
RESOLVE_NO_SYMLINKS = 0x04
_RESOLVE = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS

# openat2 is in the unified syscall table (asm-generic, Linux 5.6) at 437 on every
# architecture below; alpha/mips/ia64 use other numbers and fall back to the walk.
_OPENAT2_NR = 437
_OPENAT2_ARCHES = frozenset(
    {"x86_64", "amd64", "aarch64", "arm64", "i386", "i686", "armv7l", "armv8l"}
    | {"riscv64", "ppc64le", "ppc64", "s390x", "loongarch64"}
)
_PROC_SUPER_MAGIC = 0x9FA0

_DIR_STEP = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_PATH_ONLY = os.O_PATH | os.O_DIRECTORY
_CREATE_FLAGS = os.O_CREAT | getattr(os, "O_TMPFILE", 0)


class _OpenHow(ctypes.Structure):
    _fields_ = (
        ("flags", ctypes.c_uint64),
        ("mode", ctypes.c_uint64),
        ("resolve", ctypes.c_uint64),
    )


_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long
_syscall.argtypes = (ctypes.c_long, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t)
_fstatfs = _libc.fstatfs
_fstatfs.restype = ctypes.c_int
_fstatfs.argtypes = (ctypes.c_int, ctypes.c_void_p)
_get_errno = ctypes.get_errno
_HOW_SIZE = ctypes.sizeof(_OpenHow)

# (flags, mode, resolve) -> (struct kept alive, its address). Flags come from this
# package only, so the table stays a handful of entries. Entries are never replaced:
# the address handed to the kernel must stay valid (see _how).
_hows: dict[tuple[int, int, int], tuple[_OpenHow, int]] = {}
_openat2_state: list[bool] = []


def _how(flags: int, mode: int, resolve: int = _RESOLVE) -> int:
    key = (flags, mode, resolve)
    entry = _hows.get(key)
    if entry is None:
        how = _OpenHow(flags, mode if flags & _CREATE_FLAGS else 0, resolve)
        # setdefault, not assignment: two threads may build the same key at once, and
        # the loser's struct dies when this returns; hand out only the one kept.
        entry = _hows.setdefault(key, (how, ctypes.addressof(how)))
    return entry[1]


def openat2_available() -> bool:
    """Whether this kernel (and any seccomp filter around us) lets ``openat2`` run."""
    if _openat2_state:
        return _openat2_state[0]
    ok = False
    if os.uname().sysname == "Linux" and os.uname().machine.lower() in _OPENAT2_ARCHES:
        fd = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            res = _syscall(_OPENAT2_NR, fd, b".", _how(os.O_PATH | os.O_CLOEXEC, 0), _HOW_SIZE)
            if res >= 0:
                os.close(res)
                ok = True
        finally:
            os.close(fd)
    _openat2_state.append(ok)
    return ok


_NO_LINKS = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_SYMLINKS


def link_free(rootfd: int, path: bytes) -> bool:
    """Whether *path* exists beneath *rootfd* reached through no symlink at all.

    One ``openat2(O_PATH, RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS)``
    (and its ``close``); for one name directly in *rootfd* (no ``/``, not ``..``), one
    ``lstat`` of it instead, which answers the same: nothing is traversed on the way.
    True only when the kernel found every component, none of them a link. False for
    anything else — a link anywhere, a missing component, no ``openat2`` here — which
    means "cannot tell", not "has a link".
    """
    if not openat2_available():
        return False
    if b"/" not in path and path != b"..":  # one name in the root's own directory
        # The same answer in one plain syscall: no component is traversed on the way to
        # it, so it is link-free exactly when it exists and is no link itself (a magic
        # link is a link to lstat, and "." is the root).
        try:
            return not stat.S_ISLNK(os.stat(path, dir_fd=rootfd, follow_symlinks=False).st_mode)
        except OSError:
            return False
    fd: int = _syscall(_OPENAT2_NR, rootfd, path, _how(_LINK_FREE_FLAGS, 0, _NO_LINKS), _HOW_SIZE)
    if fd < 0:
        return False
    os.close(fd)
    return True


_LINK_FREE_FLAGS = os.O_PATH | os.O_CLOEXEC


def _escape(op: str, display: str, reason: ConfinementReason, what: str) -> PathEscapeError:
    return PathEscapeError(f"{op}: {what}", op=op, path=display, reason=reason)


def _openat2(
    rootfd: int, path: bytes, flags: int, mode: int, *, follow: bool, op: str, display: str
) -> int:
    """One ``openat2(RESOLVE_BENEATH|RESOLVE_NO_MAGICLINKS)``: see :class:`Opener`."""
    flags |= os.O_CLOEXEC
    if not follow:
        flags |= os.O_NOFOLLOW
    how = _how(flags, mode)
    for _ in range(_MAX_RACE_RETRIES):
        fd: int = _syscall(_OPENAT2_NR, rootfd, path, how, _HOW_SIZE)
        if fd >= 0:
            return fd
        err = _get_errno()
        if err not in (errno.EAGAIN, errno.EINTR):
            break
    else:
        raise _escape(op, display, ConfinementReason.RACE, "concurrent rename during lookup")
    if err == errno.EXDEV:
        _diagnose(rootfd, path, follow, op, display)
        raise _escape(op, display, ConfinementReason.ESCAPE, "path leaves the root")
    if err == errno.ELOOP and (follow or flags & os.O_PATH):
        _diagnose(rootfd, path, follow, op, display)
        raise _escape(op, display, ConfinementReason.SYMLINK_LOOP, "too many symlinks")
    raise OSError(err, os.strerror(err))


def _diagnose(rootfd: int, path: bytes, follow: bool, op: str, display: str) -> None:
    """Name the precise reason of an openat2 refusal by replaying it with the walk.

    The walk raises the specific :class:`PathEscapeError` (absolute symlink, magic
    link, ...). If it does not (the tree changed meanwhile), the caller reports the
    generic reason: openat2's refusal stands either way.
    """
    try:
        fd = walk_open(rootfd, path, os.O_PATH, 0, follow=follow, op=op, display=display)
    except OSError:
        return
    os.close(fd)


def _readlink_or_none(name: bytes, dirfd: int) -> bytes | None:
    try:
        return os.readlink(name, dir_fd=dirfd)
    except OSError:
        return None


def _on_procfs(fd: int) -> bool:
    buf = (ctypes.c_long * 32)()
    if _fstatfs(fd, ctypes.addressof(buf)) != 0:
        return True  # cannot tell: treat as procfs, which refuses (fail closed)
    return bool(buf[0] == _PROC_SUPER_MAGIC)


def walk_open(
    rootfd: int, path: bytes, flags: int, mode: int, *, follow: bool, op: str, display: str
) -> int:
    """The fallback resolver: see the module docstring. Same contract as :class:`Opener`."""
    pending = path.split(b"/")
    pending.reverse()
    held: list[int] = []  # directories opened so far; ".." pops one, never below the root
    links = 0
    steps = 0
    final_flags = flags | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        while True:
            steps += 1
            if steps > _MAX_STEPS:  # unreachable with valid input; a guard, not a limit
                raise _escape(op, display, ConfinementReason.SYMLINK_LOOP, "lookup too long")
            cur = held[-1] if held else rootfd
            if not pending:
                return os.open(b".", final_flags, mode, dir_fd=cur)
            name = pending.pop()
            if name in (b"", b"."):
                continue
            if name == b"..":
                if not held:
                    raise _escape(op, display, ConfinementReason.ESCAPE, "'..' above the root")
                os.close(held.pop())
                continue
            if pending:
                try:
                    held.append(os.open(name, _DIR_STEP, dir_fd=cur))
                    continue
                except OSError as exc:
                    if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
                        raise
                    target = _readlink_or_none(name, cur)
                    if target is None:
                        raise
            else:
                try:
                    fd = os.open(name, final_flags, mode, dir_fd=cur)
                except OSError as exc:
                    if not follow or exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                        raise
                    target = _readlink_or_none(name, cur)
                    if target is None:
                        raise
                else:
                    # Only an O_PATH|O_NOFOLLOW open can return a symlink itself; with
                    # O_DIRECTORY too it fails (ENOTDIR, followed above) instead.
                    if not follow or flags & _PATH_ONLY != os.O_PATH:
                        return fd
                    if not stat.S_ISLNK(os.fstat(fd).st_mode):
                        return fd
                    os.close(fd)
                    target = os.readlink(name, dir_fd=cur)
            links += 1
            if links > _MAX_SYMLINKS:
                raise _escape(op, display, ConfinementReason.SYMLINK_LOOP, "too many symlinks")
            if (target.startswith(b"/") or b":" in target) and _on_procfs(cur):
                raise _escape(op, display, ConfinementReason.MAGIC_LINK, "magic link")
            if target.startswith(b"/"):
                raise _escape(
                    op, display, ConfinementReason.ABSOLUTE_SYMLINK, "absolute symlink target"
                )
            if not target:
                raise OSError(errno.ENOENT, os.strerror(errno.ENOENT))
            parts = target.split(b"/")
            parts.reverse()
            pending.extend(parts)
    finally:
        for held_fd in held:
            os.close(held_fd)


def open_unconfined(
    rootfd: int, path: bytes, flags: int, mode: int, *, follow: bool, op: str, display: str
) -> int:
    """``openat`` with host semantics: the ``unconfined=True`` hatch. No confinement at all."""
    del op, display  # nothing to refuse, so nothing to name
    flags |= os.O_CLOEXEC
    if not follow:
        flags |= os.O_NOFOLLOW
    return os.open(path, flags, mode, dir_fd=rootfd)


class Opener(typing.Protocol):
    """Open *path* beneath *rootfd* and return the new fd (``O_CLOEXEC`` always).

    Guarantee (``openat2`` and ``walk``): the object opened lies beneath *rootfd*; no
    step of the resolution left it. With ``follow=False`` a final symlink is not
    followed (pass ``O_PATH`` to get a handle on the link itself). ``unconfined``
    guarantees nothing.

    Raises:
        PathEscapeError: ``ESCAPE``, ``ABSOLUTE_SYMLINK``, ``MAGIC_LINK``,
            ``SYMLINK_LOOP`` or ``RACE``.
        OSError: anything else (``ENOENT``, ``ENOTDIR``, ...), for the caller to map.
    """

    def __call__(
        self,
        rootfd: int,
        path: bytes,
        flags: int,
        mode: int,
        *,
        follow: bool,
        op: str,
        display: str,
    ) -> int: ...


OPENERS: dict[str, Opener] = {
    "openat2": _openat2,
    "walk": walk_open,
    "unconfined": open_unconfined,
}
