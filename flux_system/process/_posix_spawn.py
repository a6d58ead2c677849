"""The default spawn through the C library's ``posix_spawn`` (decision 0138).

Why: ``subprocess.Popen`` costs about 35 us more per spawn than the same child made by
``posix_spawn`` on this kind of host (its Python set-up and the ``errpipe`` round trip),
a third of what ``System.run`` adds to a bare ``subprocess.run``. The interpreter's own
``os.posix_spawn`` has no ``chdir`` and no ``closefrom`` action (both needed: the pinned
cwd, and no inherited fd beyond 0-2), so the C library's is called through ``ctypes``.

Guarantee: the child is what ``_build_spawn``'s ``Popen`` path makes for the same
request — fds 0/1/2 from the given fds and nothing else open (``closefrom(3)``), cwd the
given directory fd (``fchdir``), its own session (``setsid``), ``SIGPIPE`` and
``SIGXFSZ`` back to their defaults (as ``restore_signals`` does), the signal mask of
the thread that asked for the spawn (the fork may be handed to another thread), every
handled signal reset (the C library does it for a child sharing our memory; its own two
signals too, which it would leave ignored unless we ignore them), then ``execve`` of
*executable* with exactly *argv* and *env*. The C library blocks all signals in the
calling thread while the child shares its memory, and reaps a child whose exec failed
itself: a failure leaves no process behind. A test holds both paths' children equal.

Not guaranteed: anything beyond that request — no uid/gid drop, umask, rlimits or
``preexec_fn`` (those spawns stay on ``Popen``), and it is used only where the C library
has ``posix_spawn_file_actions_addfchdir_np`` and ``..._addclosefrom_np`` (glibc 2.34 or
later); elsewhere every spawn takes the ``Popen`` path. A failed spawn reports only an
errno, so the caller repeats it through ``Popen`` to say precisely what failed.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
import typing

__all__ = ["Leader", "available", "spawn"]

# Buffers larger than glibc's structs on any ABI (80 and 336 bytes on x86_64): the
# functions only write within their own struct.
_FILE_ACTIONS_SIZE = 512
_ATTR_SIZE = 1024
_SIGSET_SIZE = 128
_POSIX_SPAWN_SETSIGDEF = 0x04
_POSIX_SPAWN_SETSIGMASK = 0x08
_MAX_MASKS = 64  # distinct caller signal masks whose attribute sets are kept
_POSIX_SPAWN_SETSID = 0x80


class _Lib:
    """The C library's spawn functions and the prepared attribute sets, one per signal
    mask a caller had (a caller's mask rarely changes: a handful at most)."""

    __slots__ = (
        "_attrs",
        "_defaults",
        "_lock",
        "_setup",
        "addclosefrom",
        "adddup2",
        "addfchdir",
        "destroy",
        "init",
        "spawn",
    )

    def __init__(self) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        self.spawn = libc.posix_spawn
        self.init = libc.posix_spawn_file_actions_init
        self.destroy = libc.posix_spawn_file_actions_destroy
        self.adddup2 = libc.posix_spawn_file_actions_adddup2
        self.addfchdir = libc.posix_spawn_file_actions_addfchdir_np
        self.addclosefrom = libc.posix_spawn_file_actions_addclosefrom_np
        self._setup = (
            libc.posix_spawnattr_init,
            libc.posix_spawnattr_setsigdefault,
            libc.posix_spawnattr_setsigmask,
            libc.posix_spawnattr_setflags,
        )
        self._defaults = _sigset(_default_signals())
        self._attrs: dict[frozenset[int], ctypes.Array[ctypes.c_char]] = {}
        self._lock = threading.Lock()
        self.attr(frozenset())  # fails here, not at the first spawn, if it cannot

    def attr(self, mask: frozenset[int]) -> ctypes.Array[ctypes.c_char]:
        """The attribute set for a child whose signal mask is *mask* (never destroyed:
        kept for the process's life, at most :data:`_MAX_MASKS` of them)."""
        found = self._attrs.get(mask)
        if found is not None:
            return found
        init, setsigdefault, setsigmask, setflags = self._setup
        attr = ctypes.create_string_buffer(_ATTR_SIZE)
        flags = _POSIX_SPAWN_SETSIGDEF | _POSIX_SPAWN_SETSIGMASK | _POSIX_SPAWN_SETSID
        if (
            init(attr)
            or setsigdefault(attr, self._defaults)
            or setsigmask(attr, _sigset(mask))
            or setflags(attr, ctypes.c_short(flags))
        ):
            raise OSError("posix_spawn attributes could not be set up")
        with self._lock:
            if len(self._attrs) < _MAX_MASKS:
                self._attrs[mask] = attr
        return attr


def _sigset(signals: frozenset[int]) -> ctypes.Array[ctypes.c_ulong]:
    """A ``sigset_t`` holding *signals*, its bits set directly (``sigaddset`` refuses
    the C library's own signals)."""
    word = 8 * ctypes.sizeof(ctypes.c_ulong)
    bits = (ctypes.c_ulong * (_SIGSET_SIZE * 8 // word))()
    for sig in signals:
        bits[(sig - 1) // word] |= 1 << ((sig - 1) % word)
    return bits


def _default_signals() -> frozenset[int]:
    """The signals the child gets back at their default: ``SIGPIPE`` and ``SIGXFSZ``
    (Python ignores them; ``restore_signals`` resets them), and the C library's own
    signals below ``SIGRTMIN`` (32 and 33 for glibc) unless this process has them
    ignored: its ``posix_spawn`` would otherwise leave them ignored across the exec,
    where a ``Popen`` child has them as this process has (ignored stays ignored, a
    handler becomes the default). Read when this module is set up (``SigIgn``); a
    handler the C library installs later for one ignored then is not seen."""
    ignored = 0
    with contextlib.suppress(OSError, ValueError), open("/proc/self/status", "rb") as fh:
        for line in fh:
            if line.startswith(b"SigIgn:"):
                ignored = int(line.split()[1], 16)
    own = {sig for sig in range(32, signal.SIGRTMIN) if not ignored & (1 << (sig - 1))}
    return frozenset({int(signal.SIGPIPE), int(signal.SIGXFSZ), *own})


_lib: _Lib | None = None
_lib_failed = False
_lib_lock = threading.Lock()


def available() -> bool:
    """Whether this C library offers everything :func:`spawn` needs (looked up once)."""
    global _lib, _lib_failed  # noqa: PLW0603 - set up once per process
    if _lib is not None:
        return True
    if _lib_failed:
        return False
    with _lib_lock:
        if _lib is None and not _lib_failed:
            try:
                _lib = _Lib()
            except (OSError, AttributeError):  # no such symbol: an older or other libc
                _lib_failed = True
    return _lib is not None


@typing.final
class Leader:
    """A child made by :func:`spawn`: its pid, and its reap (what ``Popen`` offers).

    The pid lives in the C int the C library writes, so an interrupt landing right
    after the call cannot lose it.
    """

    __slots__ = ("_box", "returncode")

    def __init__(self) -> None:
        self._box = ctypes.c_int(0)
        self.returncode: int | None = None

    @property
    def pid(self) -> int | None:
        """The child's pid once spawned, else ``None``."""
        return self._box.value or None

    def wait(self) -> int:
        """Reap the child (blocking) and return its status as ``Popen`` does: the exit
        code, or ``-N`` for signal N. A child reaped elsewhere reads as 0, as with
        ``Popen`` (its status is gone)."""
        if self.returncode is not None:
            return self.returncode
        pid = self._box.value
        try:
            _, status = os.waitpid(pid, 0)
        except ChildProcessError:
            status = 0
        self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode


def spawn(
    leader: Leader,
    executable: bytes,
    argv: list[bytes],
    env: list[bytes],
    *,
    fds: tuple[int, int, int],
    cwd_fd: int,
    mask: frozenset[int],
) -> int:
    """Start *executable* as the child described in the module docstring.

    *fds* become the child's 0, 1 and 2 (each must be >= 3, so that ``dup2`` never
    leaves one close-on-exec); no item of *argv* or *env* may contain a NUL byte (the
    caller checked); *mask* is the child's signal mask (the requesting thread's, which
    may not be the calling one). Raises the ``os.posix_spawn`` audit event first, as
    ``os.posix_spawn`` does: a hook that refuses it stops the spawn. Returns 0, with the
    pid in *leader*, or the errno of the failure (then no child exists). Call only
    when :func:`available` said so.
    """
    lib = _lib
    assert lib is not None
    sys.audit("os.posix_spawn", executable, argv, env)
    attr = lib.attr(mask)
    actions = ctypes.create_string_buffer(_FILE_ACTIONS_SIZE)
    err = lib.init(actions)
    if err:
        return int(err)
    try:
        for target, fd in enumerate(fds):
            err = err or lib.adddup2(actions, fd, target)
        err = err or lib.addfchdir(actions, cwd_fd) or lib.addclosefrom(actions, 3)
        if err:
            return int(err)
        c_argv = (ctypes.c_char_p * (len(argv) + 1))(*argv)
        c_env = (ctypes.c_char_p * (len(env) + 1))(*env)
        return int(lib.spawn(ctypes.byref(leader._box), executable, actions, attr, c_argv, c_env))
    finally:
        lib.destroy(actions)
