"""The one private builder that creates processes (DESIGN §2.3; enforced by a test).

Every mode goes through :func:`_build_spawn`. The default request (no uid/gid drop,
umask, limits or sandbox) is spawned by the C library's ``posix_spawn`` (decision 0138:
``fchdir`` to a directory fd opened beneath the workspace root, ``closefrom(3)``,
``setsid``); the others by ``Popen``, which runs no Python code between fork and exec
either (CPython then uses ``vfork``): the cwd is pinned by ``chdir`` into
``/proc/self/fd/N`` of that fd (the child chdirs before it closes inherited fds), the
process group, umask and uid/gid drop are done by ``_posixsubprocess`` itself. Only
rlimits and ``no_new_privs`` need a ``preexec_fn``, paid when asked.

Guarantee: the child gets only fds 0/1/2 (``close_fds``), an environment built by
:func:`flux_system.process._env.build_env` (the allow-listed part snapshotted when the
``System`` was created) and :func:`~flux_system.process._env.over`, its own session and
process group (``setsid``: no controlling terminal, so no ``/dev/tty`` and no ``TIOCSTI``
into the caller's terminal) and (when the host allows) its own cgroup (v1 pids or v2);
an error leaves no process and no fd behind.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import resource
import signal
import subprocess
import sys
import threading
import time
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

import flux_system.process._posix_spawn as posix_spawn
from flux_system._exceptions import ProcessError, ProcessReason, SpawnError
from flux_system._values import record
from flux_system.process._cgroup import CgroupPool
from flux_system.process._confine import Confinement, Denials, Launch
from flux_system.process._drain import devnull
from flux_system.process._env import over, resolve_argv0
from flux_system.process._limits import Limits, Privileges, make_preexec
from flux_system.process._reap import Tree, ensure_subreaper

__all__ = ["DirAuthority", "Spawned", "_build_spawn", "check_argv"]


class DirAuthority(typing.Protocol):
    """What the builder needs from a workspace: a directory fd opened beneath its root."""

    def _open_dir_fd(self, path: str = ".") -> int: ...


class ChildHandle(typing.Protocol):
    """What the run needs of a spawned leader: a ``Popen`` or a ``posix_spawn`` one."""

    @property
    def pid(self) -> int | None: ...

    @property
    def returncode(self) -> int | None: ...

    def wait(self) -> int: ...


class SpawnSpec(NamedTuple):
    """What to start (immutable; a tuple: built on every run's hot path)."""

    argv: tuple[str, ...]
    env: Mapping[str, str] | None
    base_env: Mapping[str, str]  # the allow-listed snapshot; never modified
    cwd: str
    with_stdin: bool
    limits: Limits | None
    privileges: Privileges
    cgroups: CgroupPool
    confine: Confinement | None = None  # the sandbox (DESIGN §2.5): None runs unconfined


@typing.final
@record(frozen=False)
class Spawned:
    """A started child: its handle (for reaping), pidfd, tree and our pipe ends."""

    child: ChildHandle
    pidfd: int
    tree: Tree
    stdin_fd: int | None
    stdin_probe: int | None  # our dup of the child's stdin read end: counts unread bytes
    stdout_fd: int
    stderr_fd: int
    target: str
    launch: Launch | None = None  # the sandbox's launch of this child (its denials)
    denials: Denials | None = None  # what the sandbox refused (set once it was reaped)

    @property
    def pid(self) -> int:
        return typing.cast(int, self.child.pid)

    def settle(self, code: int) -> None:
        """After the reap: let the sandbox conclude the run (proxy, audit, denials)."""
        launch = self.launch
        if launch is not None and launch.finish is not None and self.denials is None:
            try:
                self.denials = launch.finish(code)
            except Exception as exc:  # never lose the result for a report: say it failed
                self.denials = Denials(
                    (),
                    observable=False,
                    reason=f"the sandbox's post-run step failed ({type(exc).__name__})",
                )

    def close_fds(self) -> None:
        for fd in (self.stdin_fd, self.stdin_probe, self.stdout_fd, self.stderr_fd, self.pidfd):
            if fd is not None and fd >= 0:
                try:  # noqa: SIM105 - not contextlib.suppress: every run's hot path
                    os.close(fd)
                except OSError:
                    pass
        self.stdin_fd = self.stdin_probe = None
        self.stdout_fd = self.stderr_fd = self.pidfd = -1


def check_argv(argv: object) -> tuple[str, ...]:
    """Validate *argv* at the public boundary: a non-empty sequence of ``str``."""
    if isinstance(argv, (str, bytes, bytearray)):
        raise TypeError(f"argv must be a sequence of str, not {type(argv).__name__}")
    if not isinstance(argv, Sequence):
        raise TypeError(f"argv must be a sequence of str, not {type(argv).__name__}")
    items = tuple(argv)
    if not all(isinstance(a, str) for a in items):
        raise TypeError("argv must be a sequence of str")
    if not items or not items[0]:
        raise SpawnError("argv is empty", op="run", reason=ProcessReason.INVALID_ARGV)
    joined = "".join(items)  # one pass each (code points never merge across items)
    if "\0" in joined:
        raise SpawnError(
            "argv contains a NUL byte", op="run", target=None, reason=ProcessReason.INVALID_ARGV
        )
    try:  # what exec would do after the fork machinery is set up
        os.fsencode(joined)
        encodable = True
    except UnicodeEncodeError:
        encodable = False
    if not encodable:  # raised outside the handler: no __context__ holding the argument
        raise SpawnError(
            "argv is not encodable", op="run", target=None, reason=ProcessReason.INVALID_ARGV
        )
    return items


def _translate(
    exc: BaseException, target: str, cwd_link: str, *, entry_failed: bool = False
) -> ProcessError:
    if isinstance(exc, OSError):
        if exc.filename == cwd_link:
            reason = ProcessReason.BAD_CWD
        elif exc.errno == errno.ENOENT:
            reason = ProcessReason.NOT_FOUND
        elif exc.errno in (errno.EACCES, errno.ENOEXEC, errno.EISDIR):
            reason = ProcessReason.NOT_EXECUTABLE
        else:
            reason = ProcessReason.SPAWN_FAILED
        return SpawnError(f"spawn failed: {exc.strerror}", op="run", target=target, reason=reason)
    # Only the preexec_fn raises in the child: the v2 cgroup entry, or the limits.
    if entry_failed:
        return SpawnError(
            "the child could not enter its tree's cgroup",
            op="run",
            target=target,
            reason=ProcessReason.SPAWN_FAILED,
        )
    return SpawnError(
        "a requested limit could not be applied in the child",
        op="run",
        target=target,
        reason=ProcessReason.LIMIT_UNENFORCEABLE,
    )


_SPAWN_FAILED = ProcessReason.SPAWN_FAILED
# signal.getsignal without its enum conversion (every spawn asks): an int for SIG_DFL and
# SIG_IGN, the handler otherwise.
# (_signal, which the signal module wraps, is loaded with it and has no type stubs;
# its pthread_sigmask returns plain ints too.)
_getsignal: Callable[[int], object] = sys.modules["_signal"].getsignal
_SIGCHLD = int(signal.SIGCHLD)
_SIG_IGN = int(signal.SIG_IGN)
_sigmask: Callable[[int, object], set[int]] = sys.modules["_signal"].pthread_sigmask
_SIG_BLOCK = int(signal.SIG_BLOCK)
_SIG_SETMASK = int(signal.SIG_SETMASK)
# The C library's own signals (32 and 33 for glibc): never passed on in a mask (setting
# them is refused with a warning; they are the library's business).
_LIBC_OWN = frozenset(range(32, signal.SIGRTMIN))
_NO_SIGNALS: frozenset[int] = frozenset()
_FS_ENCODING = sys.getfilesystemencoding()
_FS_ERRORS = sys.getfilesystemencodeerrors()


_LOST_CHILD_LOOKS = 20  # x 5 ms


def _no_survivor(tree: Tree, child: ChildHandle, pidfd: int, pipe_fd: int | None) -> int:
    """After a failed spawn: kill and reap the child if one was forked; return *pidfd*.

    Popen (and the C library's posix_spawn) reaps a child whose exec failed. Any other
    exception after the fork (a signal: ``KeyboardInterrupt``) leaves it running; when
    it came before Popen stored the pid (right after ``fork_exec`` returned; a
    posix_spawn leader holds its pid from the C call on), the pid is found as our direct child
    in the tree's cgroup, or else (a v2 child not yet in it, or no cgroup) as our child
    holding the spawn's own pipe *pipe_fd*.
    """
    pid: int | None = getattr(child, "pid", None)
    lost = pid is None
    if pid is None:
        found: list[int] = []
        # Looked for a few times: a child in the middle of its exec (or a v2 child just
        # entering its cgroup) can briefly show in neither place. Only this path (a
        # signal between the fork and Popen storing the pid) pays the wait.
        for _ in range(_LOST_CHILD_LOOKS):
            found = tree.our_members()
            if not found and pipe_fd is not None:
                holder = tree.holder_of(os.fstat(pipe_fd).st_ino)
                found = [] if holder is None else [holder]
            if found:
                break
            time.sleep(0.005)
        if not found:
            return pidfd
        pid = found[0]
    elif child.returncode is not None:
        return pidfd
    if pidfd < 0:  # pins the leader (our unreaped child) for the kill
        with contextlib.suppress(OSError):
            pidfd = os.pidfd_open(pid)
    tree.started(pid, pidfd)
    tree.kill()
    lost_pid = pid
    tree.reap((lambda: os.waitpid(lost_pid, 0)[1]) if lost else child.wait)
    return pidfd


def _build_spawn(spec: SpawnSpec, ws: DirAuthority) -> Spawned:
    """Create the child described by *spec*, with its cwd pinned beneath *ws*.

    Raises:
        SpawnError: not found, not executable, bad cwd, limit unenforceable, other.
        ConfinementError, WorkspaceError: the cwd was refused by the workspace.
    """
    target = spec.argv[0]
    if _getsignal(_SIGCHLD) == _SIG_IGN:
        # The kernel would reap every child at once: its exit status would be lost (a
        # failure read as exit 0) and pidfd_open could miss it. Also inherited through
        # exec from a parent that ignores SIGCHLD. Not seen: SA_NOCLDWAIT set from C.
        raise SpawnError(
            "SIGCHLD is ignored in this process: exit statuses would be lost",
            op="run",
            target=target,
            reason=ProcessReason.STATUS_UNAVAILABLE,
        )
    env = over(spec.base_env, spec.env)
    executable = resolve_argv0(target, env)
    limits = spec.limits
    if limits is None and spec.confine is not None:
        limits = spec.confine.default_limits()
    priv = spec.privileges
    child_uid = priv.uid if priv.uid is not None else os.geteuid()
    nproc = limits.nproc if limits is not None else None
    ensure_subreaper()
    tree = Tree(spec.cgroups, nproc=nproc)
    if nproc is not None and child_uid == 0 and not tree.limits_processes:
        tree.release()
        raise SpawnError(
            "a process limit cannot be enforced for a root child without a pids-limited cgroup",
            op="run",
            target=target,
            reason=ProcessReason.LIMIT_UNENFORCEABLE,
        )
    rlimits = limits.rlimits() if limits is not None else ()
    if nproc is not None and child_uid == 0 and tree.limits_processes:
        # The tree's pids cgroup bounds a root child (which RLIMIT_NPROC would not):
        # without the rlimit no code runs between fork and exec for it (vfork).
        rlimits = tuple(pair for pair in rlimits if pair[0] != resource.RLIMIT_NPROC)
    inner = make_preexec(rlimits, no_new_privs=priv.no_new_privs)
    preexec = tree.child_preexec(inner)  # v2: the child enters its cgroup first
    ours: list[int] = []
    theirs: list[int] = []
    cwd_fd = -1
    pidfd = -1
    probe: int | None = None
    launch: Launch | None = None
    # Made before its __init__ runs: a signal (KeyboardInterrupt) raised out of Popen's
    # constructor after the fork (its wait for the exec) still leaves us the child's pid.
    popen: subprocess.Popen[bytes] = subprocess.Popen.__new__(subprocess.Popen)
    child: ChildHandle = popen
    try:
        cwd_fd = ws._open_dir_fd(spec.cwd)
        try:
            if cwd_fd < 3:  # 0-2 closed in this process: the child's dup2 would clobber it
                low, cwd_fd = cwd_fd, fcntl.fcntl(cwd_fd, fcntl.F_DUPFD_CLOEXEC, 3)
                os.close(low)
            if spec.with_stdin:
                r, w = os.pipe2(os.O_CLOEXEC)
                theirs.append(r)
                ours.append(w)
                probe = os.dup(r)  # O_CLOEXEC by default
            out_r, out_w = os.pipe2(os.O_CLOEXEC)
            ours.append(out_r)
            theirs.append(out_w)
            err_r, err_w = os.pipe2(os.O_CLOEXEC)
            ours.append(err_r)
            theirs.append(err_w)
        except OSError as exc:  # EMFILE/ENFILE: out of fds
            raise SpawnError(
                f"spawn failed: {exc.strerror}", op="run", target=target, reason=_SPAWN_FAILED
            ) from exc
        cwd_link = f"/proc/self/fd/{cwd_fd}"
        argv = spec.argv
        if spec.confine is not None:  # the sandbox rewrites what is exec'd (never forks)
            launch = spec.confine.launch(argv, executable, env, cwd_fd)
            argv, executable, env = launch.argv, launch.executable, launch.env
        tid = b"%d" % threading.get_native_id()
        if launch is not None and launch.tid is not None:
            tid = launch.tid  # the confined spawner thread forks: it joins the cgroup
        serial = launch.serial if launch is not None else None
        # v1: the thread living in the tree's cgroup forks (nothing migrates per spawn,
        # decision 0028) unless the sandbox's own spawner thread must fork.
        resident = tree.resident if launch is None or launch.tid is None else None
        if serial is not None:
            serial.acquire()
        try:
            if resident is None:
                tree.enter(tid)  # v1: this thread joins the tree's cgroup for the fork
            else:
                tree.before_resident_fork()
        except BaseException as exc:
            if serial is not None:
                serial.release()
            if isinstance(exc, OSError):  # ENODEV: the cgroup was removed under us
                raise SpawnError(
                    f"the tree's cgroup could not be entered: {exc.strerror}",
                    op="run",
                    target=target,
                    reason=_SPAWN_FAILED,
                ) from exc
            raise

        stdin_fd = theirs[0] if spec.with_stdin else devnull()
        # The default spawn (decision 0138): the C library's posix_spawn, where nothing
        # it cannot do is asked and no fd would land below 3 (dup2 onto itself would
        # leave it close-on-exec). Its failure is repeated through Popen, which says
        # precisely what failed (nothing ran: the exec itself failed).
        fast = (
            preexec is None
            and launch is None
            and priv.uid is None
            and priv.gid is None
            and priv.umask is None
            and min(stdin_fd, out_w, err_w) >= 3
            and posix_spawn.available()
        )
        if fast:
            leader = posix_spawn.Leader()
            child = leader
            c_argv = [a.encode(_FS_ENCODING, _FS_ERRORS) for a in argv]  # as os.fsencode
            c_env = [f"{k}={v}".encode(_FS_ENCODING, _FS_ERRORS) for k, v in env.items()]
            c_exe = executable.encode(_FS_ENCODING, _FS_ERRORS)

        # The child's signal mask is this thread's, whichever thread forks (a resident
        # or the sandbox's spawner has its own, inherited from whoever started it).
        blocked = _sigmask(_SIG_BLOCK, ())
        mask = frozenset(blocked - _LIBC_OWN) if blocked else _NO_SIGNALS
        caller = threading.get_ident()

        def fork() -> None:
            nonlocal child
            if fast:
                if not posix_spawn.spawn(
                    leader,
                    c_exe,
                    c_argv,
                    c_env,
                    fds=(stdin_fd, out_w, err_w),
                    cwd_fd=cwd_fd,
                    mask=mask,
                ):
                    return
                child = popen
            if threading.get_ident() == caller:
                popen_init()
                return
            own = _sigmask(_SIG_SETMASK, mask)  # Popen's child takes the forking thread's
            try:
                popen_init()
            finally:
                _sigmask(_SIG_SETMASK, own)

        def popen_init() -> None:
            subprocess.Popen.__init__(
                popen,
                argv,
                executable=executable,
                stdin=stdin_fd,
                stdout=out_w,
                stderr=err_w,
                cwd=cwd_link,
                env=env,
                close_fds=True,
                pass_fds=launch.pass_fds if launch is not None else (),
                start_new_session=True,  # own group, and no controlling terminal
                umask=priv.umask if priv.umask is not None else -1,
                user=priv.uid,
                group=priv.gid,
                extra_groups=[] if priv.uid is not None or priv.gid is not None else None,
                preexec_fn=preexec,  # only for limits; no locks taken
            )

        try:
            try:
                if launch is not None and launch.fork is not None:
                    launch.fork(fork)
                elif resident is not None:
                    resident.run(fork)
                else:
                    fork()
            except (OSError, subprocess.SubprocessError) as exc:
                entry_failed = preexec is not inner and (inner is None or tree.cgroup_gone())
                raise _translate(exc, target, cwd_link, entry_failed=entry_failed) from exc
        finally:
            if resident is None:
                tree.leave(tid)
            if serial is not None:
                serial.release()
            if launch is not None:
                launch.close_fds()
        try:
            pidfd = os.pidfd_open(child_pid := typing.cast(int, child.pid))
        except OSError as exc:  # pragma: no cover - pidfd_open on a just-forked child
            raise SpawnError(
                "pidfd_open failed", op="run", target=target, reason=_SPAWN_FAILED
            ) from exc
        tree.started(child_pid, pidfd)
        if launch is not None and launch.started is not None:
            launch.started(child_pid)
        for fd in ours:
            os.set_blocking(fd, False)
        return Spawned(
            child=child,
            pidfd=pidfd,
            tree=tree,
            stdin_fd=ours[0] if spec.with_stdin else None,
            stdin_probe=probe,
            stdout_fd=out_r,
            stderr_fd=err_r,
            target=target,
            launch=launch,
        )
    except BaseException:
        for fd in ours:
            os.close(fd)
        if probe is not None:
            os.close(probe)
        pidfd = _no_survivor(tree, child, pidfd, theirs[-1] if theirs else None)
        if pidfd >= 0:
            os.close(pidfd)
        tree.release()
        raise
    finally:
        for fd in theirs:
            os.close(fd)
        if launch is not None:
            launch.close_fds()
        if cwd_fd >= 0:
            os.close(cwd_fd)
