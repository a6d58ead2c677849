"""``System``: argv-only process execution beneath a workspace (DESIGN §2.3)."""

from __future__ import annotations

import atexit
import contextlib
import math
import os
import threading
import time
import typing
import weakref
from collections.abc import Iterator, Mapping, Sequence

from flux_system._exceptions import (
    ProcessError,
    ProcessReason,
    ProcessTimeoutError,
    SpawnError,
)
from flux_system.process._cgroup import CgroupPool, remove_leftovers
from flux_system.process._child import ManagedChild
from flux_system.process._confine import Confinement, SandboxLike
from flux_system.process._drain import Capture, LineObserver
from flux_system.process._env import DEFAULT_ENV_ALLOWLIST, build_env
from flux_system.process._limits import Limits, Privileges
from flux_system.process._result import DEFAULT_OUTPUT_CAP, RunResult
from flux_system.process._run import Session, drive_async, drive_sync
from flux_system.process._spawn import DirAuthority, Spawned, SpawnSpec, _build_spawn, check_argv
from flux_system.process._stream import Flow
from flux_system.process._warm import warm_up

__all__ = ["System"]

_systems: weakref.WeakSet[System] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    """Interpreter exit: kill and reap every child first, then remove the cgroups.

    Registered after :mod:`flux_system.process._cgroup`'s own hook (imported above), so it runs
    before it; the cgroups are removed here explicitly too, in that order.
    """
    for system in list(_systems):
        system.close()  # a System of the parent (inherited by fork) does nothing here
    remove_leftovers()


def _check_timeout(timeout: float | None) -> float | None:
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError("timeout must be a number of seconds or None")
    try:
        value = float(timeout)
    except OverflowError:  # an int beyond float range
        raise ValueError("timeout must be a positive finite number") from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError("timeout must be a positive finite number")
    return value


def _check_stdin(stdin: bytes | None) -> bytes | None:
    if stdin is None or isinstance(stdin, bytes):
        return stdin
    if isinstance(stdin, (bytearray, memoryview)):
        return bytes(stdin)
    raise TypeError("stdin must be bytes or None")


@typing.final
class System:
    """Runs argv-only children with their cwd pinned beneath a workspace.

    Guarantee: no shell; an environment built from an allow-list (hooks never copied);
    only fds 0/1/2 reach the child; output capped per stream while drained to EOF;
    each child in its own process group and, where the host allows, its own pids
    cgroup; on exit, timeout, cancellation, ``kill()``, ``close()``, interpreter exit
    or ``KeyboardInterrupt`` its whole tree is killed and reaped.
    With a *sandbox* every child — ``run``, ``arun``, ``spawn`` — is started confined
    by it (the one spawn builder applies it); ``result.denials`` then says what it
    refused, as far as the host can observe.
    Not guaranteed: confinement of what the child does with ``sandbox=None`` — it runs
    with this process's authority.

    Args:
        ws: the workspace whose root pins every child's cwd.
        sandbox: ``None`` (unconfined) or a :class:`flux_system.sandbox.Sandbox` (any
            object with its ``confine(ws)``).
        env_allowlist: variable names copied from this process's environment. They
            are copied once, when the ``System`` is created: later changes to
            ``os.environ`` do not reach its children (pass ``env`` per call, or create
            a new ``System``). The per-call ``env`` is applied over that snapshot.
        output_cap: bytes kept per stream of a ``run`` (default 1 MiB).
        max_children: cap on children running at once (``None``: no cap).
        privileges: no_new_privs / uid-gid drop / umask for every child.
        _contain: private knob; ``False`` gives trees no cgroup (the path of a
            host without one), so ``tree_contained`` is ``False`` and a process limit
            for a root child is refused.

    Raises:
        SandboxUnavailableError: the sandbox cannot confine this workspace here.
    """

    def __init__(
        self,
        ws: DirAuthority,
        *,
        sandbox: SandboxLike | None = None,
        env_allowlist: frozenset[str] | Sequence[str] = DEFAULT_ENV_ALLOWLIST,
        output_cap: int = DEFAULT_OUTPUT_CAP,
        max_children: int | None = None,
        privileges: Privileges | None = None,
        _contain: bool = True,
    ) -> None:
        if not callable(getattr(ws, "_open_dir_fd", None)):
            raise TypeError("ws must be a Workspace")
        if sandbox is not None and not callable(getattr(sandbox, "confine", None)):
            raise TypeError("sandbox must be a Sandbox or None")
        if isinstance(env_allowlist, str) or not all(isinstance(n, str) for n in env_allowlist):
            raise TypeError("env_allowlist must be a collection of str")
        if isinstance(output_cap, bool) or not isinstance(output_cap, int) or output_cap < 0:
            raise ValueError("output_cap must be a non-negative int")
        if max_children is not None and (
            isinstance(max_children, bool) or not isinstance(max_children, int) or max_children < 1
        ):
            raise ValueError("max_children must be a positive int or None")
        if privileges is not None and not isinstance(privileges, Privileges):
            raise TypeError("privileges must be a Privileges")
        self._ws = ws
        # Snapshot (built once: the hot path copies it instead of scanning os.environ).
        self._base_env = build_env(frozenset(env_allowlist), None)
        self._cap = output_cap
        self._max = max_children
        self._priv = privileges or Privileges()
        self._lock = threading.Lock()
        self._live: dict[int, Session] = {}
        self._children: set[ManagedChild] = set()
        self._slots = 0
        self._closed = False
        self._pid = os.getpid()  # a forked child refuses to use it (FORKED, decision 0022)
        self._confine: Confinement | None = None
        if sandbox is not None:
            self._confine = sandbox.confine(ws)
        self._cgroups = CgroupPool(enabled=bool(_contain))
        weakref.finalize(self, self._cgroups.close)
        if self._confine is not None:
            weakref.finalize(self, self._confine.close)
        _systems.add(self)

    # -- admission -------------------------------------------------------------------

    def _start(
        self,
        argv: object,
        env: Mapping[str, str] | None,
        stdin: bytes | None,
        cwd: str,
        limits: Limits | None,
        *,
        with_stdin: bool = False,
    ) -> Spawned:
        items = check_argv(argv)
        if limits is not None and not isinstance(limits, Limits):
            raise TypeError("limits must be a Limits or None")
        if not isinstance(cwd, str):
            raise TypeError("cwd must be a str")
        if os.getpid() != self._pid:  # before the lock: another thread may have held it
            raise ProcessError(
                "System was created by the parent process",
                op="run",
                reason=ProcessReason.FORKED,
            )
        with self._lock:
            if self._closed:
                raise ProcessError("System is closed", op="run", reason=ProcessReason.CLOSED)
            if self._max is not None and self._slots >= self._max:
                raise SpawnError(
                    "too many children running",
                    op="run",
                    target=items[0],
                    reason=ProcessReason.TOO_MANY_CHILDREN,
                )
            self._slots += 1
        piped = with_stdin or stdin is not None
        spec = SpawnSpec(
            items,
            env,
            self._base_env,
            cwd,
            piped,
            limits,
            self._priv,
            self._cgroups,
            self._confine,
        )
        try:
            return _build_spawn(spec, self._ws)
        except BaseException:
            self._release()
            raise

    def _release(self) -> None:
        with self._lock:
            self._slots -= 1

    def _child_done(self, child: ManagedChild) -> None:
        with self._lock:
            self._children.discard(child)
        self._release()

    # -- run / arun ----------------------------------------------------------------------

    def _result(self, sess: Session, out: Capture, err: Capture, code: int, t0: float) -> RunResult:
        if code == 0 and sess.stdin_left:
            raise ProcessError(
                "the child exited 0 without reading all of its stdin",
                op="run",
                target=sess.sp.target,
                reason=ProcessReason.STDIN_NOT_CONSUMED,
            )
        return RunResult(
            exit_code=code,
            stdout=out.data,
            stderr=err.data,
            stdout_truncated=out.truncated,
            stderr_truncated=err.truncated,
            duration_s=time.monotonic() - t0,
            signal=-code if code < 0 else None,
            stdout_dropped=out.dropped,
            stderr_dropped=err.dropped,
            tree_contained=sess.sp.tree.contained,
            denials=sess.sp.denials,
        )

    @contextlib.contextmanager
    def _running(
        self,
        argv: object,
        *,
        env: Mapping[str, str] | None,
        data: bytes | None,
        cwd: str,
        limits: Limits | None,
        observer: LineObserver | None,
    ) -> Iterator[tuple[Session, Capture, Capture]]:
        """Admit and start one run; on any exception kill and reap its tree, then raise.

        Shared by :meth:`run` and :meth:`arun`. The slot and the live entry are given
        back whatever happens; a ``close()`` that ran after admission is honoured here.
        """
        sp = self._start(argv, env, data, cwd, limits)
        sess: Session | None = None
        try:
            sess, out, err = self._admit(sp, data, observer)
            yield sess, out, err
        except BaseException:
            self._abort(sp, sess)
            raise
        finally:
            self._leave(sess)

    def _admit(
        self, sp: Spawned, data: bytes | None, observer: LineObserver | None
    ) -> tuple[Session, Capture, Capture]:
        """Make the session of started *sp* and list it live (``close()`` sees it)."""
        out = Capture("stdout", self._cap, observer)
        err = Capture("stderr", self._cap, observer)
        sess = Session(sp, data, out, err)
        with self._lock:
            self._live[id(sess)] = sess
            closed = self._closed  # close() ran after admission: it could not see sess
        if closed:
            raise ProcessError("System is closed", op="run", reason=ProcessReason.CLOSED)
        return sess, out, err

    @staticmethod
    def _abort(sp: Spawned, sess: Session | None) -> None:
        """On any exception: kill and reap the tree of *sp* (before or after admission)."""
        if sess is None:  # interrupted before the session existed: the same cleanup
            sess = Session(sp, None, Capture("stdout", 0, None), Capture("stderr", 0, None))
        sess.kill()
        sess.finish()

    def _leave(self, sess: Session | None) -> None:
        """Whatever happened: drop the live entry and give back the slot (one lock)."""
        with self._lock:
            if sess is not None:
                self._live.pop(id(sess), None)
            self._slots -= 1

    @staticmethod
    def _conclude(sess: Session, finished: bool) -> int:
        """After the driver: on timeout kill the tree and collect what is left; reap."""
        if not finished:
            sess.kill()
            sess.drain_after_kill()
        return sess.finish()

    def _outcome(
        self,
        sess: Session,
        out: Capture,
        err: Capture,
        code: int,
        *,
        t0: float,
        timed_out_after: float | None,
    ) -> RunResult:
        if timed_out_after is not None:
            raise ProcessTimeoutError(
                f"timed out after {timed_out_after} s",
                op="run",
                target=sess.sp.target,
                timeout=timed_out_after,
                stdout=out.data,
                stderr=err.data,
            )
        return self._result(sess, out, err, code, t0)

    def run(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        stdin: bytes | None = None,
        timeout: float | None = 60.0,
        cwd: str = ".",
        limits: Limits | None = None,
        observer: LineObserver | None = None,
    ) -> RunResult:
        """Run *argv* to completion with its cwd pinned at *cwd* beneath the workspace.

        Guarantee: when this returns or raises (``KeyboardInterrupt`` included), no
        process of the child's tree is left running. A non-zero exit is a result.

        Args:
            argv: non-empty sequence of str; ``argv[0]`` is resolved on the child's PATH.
            env: applied last over the allow-listed environment.
            stdin: bytes fed to the child (any size); ``None`` gives it ``/dev/null``.
            timeout: wall-time limit in seconds (``None``: none).
            cwd: workspace-relative directory.
            limits: resource limits applied in the child before exec.
            observer: called with ``(stream, line)`` for every output line, live.

        Raises:
            TypeError: argv is a str, or a wrong type elsewhere.
            SpawnError: not found, not executable, bad cwd, limit unenforceable, cap.
            ProcessTimeoutError: the timeout expired (carries the captured output).
            ProcessError: ``STDIN_NOT_CONSUMED`` (exit 0, stdin left unread), ``CLOSED``,
                ``FORKED`` (called in a child forked from the System's creator).
            ConfinementError, WorkspaceError: the cwd was refused by the workspace.
        """
        timeout = _check_timeout(timeout)
        data = _check_stdin(stdin)
        t0 = time.monotonic()
        # As _running, inlined (no generator context manager on every run's hot path).
        sp = self._start(argv, env, data, cwd, limits)
        sess: Session | None = None
        try:
            sess, out, err = self._admit(sp, data, observer)
            finished = drive_sync(sess, None if timeout is None else t0 + timeout)
            code = self._conclude(sess, finished)
        except BaseException:
            self._abort(sp, sess)
            raise
        finally:
            self._leave(sess)
        if finished:
            return self._result(sess, out, err, code, t0)
        return self._outcome(sess, out, err, code, t0=t0, timed_out_after=timeout)

    async def arun(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        stdin: bytes | None = None,
        timeout: float | None = 60.0,
        cwd: str = ".",
        limits: Limits | None = None,
        observer: LineObserver | None = None,
    ) -> RunResult:
        """As :meth:`run`, on the running asyncio loop.

        Guarantee: when the awaiting task is cancelled, the tree is killed and reaped
        before ``CancelledError`` propagates.
        """
        timeout = _check_timeout(timeout)
        data = _check_stdin(stdin)
        t0 = time.monotonic()
        run = self._running(argv, env=env, data=data, cwd=cwd, limits=limits, observer=observer)
        with run as (sess, out, err):
            finished = await drive_async(sess, timeout)
            code = self._conclude(sess, finished)
        timed_out_after = None if finished else timeout
        return self._outcome(sess, out, err, code, t0=t0, timed_out_after=timed_out_after)

    # -- background ----------------------------------------------------------------------

    def spawn(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        stdin: bytes | None = None,
        timeout: float | None = None,
        cwd: str = ".",
        limits: Limits | None = None,
        observer: LineObserver | None = None,
        buffer_cap: int = DEFAULT_OUTPUT_CAP,
        stream_output: bool = False,
        output_cap: int | None = None,
        stream_stdin: bool = False,
    ) -> ManagedChild:
        """Start *argv* in the background and return its :class:`ManagedChild`.

        Guarantee: as :meth:`run`; the tree is killed and reaped when the child
        exits, on ``kill()``, on *timeout* and when this ``System`` closes.

        Args:
            stdin: bytes fed to the child; ``None`` (and no ``stream_stdin``) gives it
                ``/dev/null``.
            observer: called with ``(stream, line)`` for every output line, live.
            buffer_cap: bytes the ring buffer behind ``read_output()`` keeps per stream.
            stream_output: take the output as :class:`OutputChunk` values with
                ``child.chunks()`` / ``child.achunks()`` — every byte, in order, at the
                consumer's pace (back-pressure) — instead of the ring buffer.
            output_cap: with ``stream_output``, bytes delivered per stream (``None``:
                no cap); later bytes are drained and counted, and the chunk that meets
                the cap says ``truncated``.
            stream_stdin: give the child a pipe fed through ``child.stdin``
                (:class:`ChildStdin`); a child that exits without reading it all is
                not an error (unlike a ``bytes`` stdin given to :meth:`run`).

        Raises: as :meth:`run` (except ``ProcessTimeoutError``: see ``status()``);
            ``ValueError`` for ``stdin`` bytes together with ``stream_stdin``, or an
            ``output_cap`` without ``stream_output``.
        """
        timeout = _check_timeout(timeout)
        data = _check_stdin(stdin)
        if isinstance(buffer_cap, bool) or not isinstance(buffer_cap, int) or buffer_cap < 1:
            raise ValueError("buffer_cap must be a positive int")
        if output_cap is not None and (
            isinstance(output_cap, bool) or not isinstance(output_cap, int) or output_cap < 0
        ):
            raise ValueError("output_cap must be a non-negative int or None")
        if output_cap is not None and not stream_output:
            raise ValueError("output_cap applies to stream_output=True")
        if stream_stdin and data is not None:
            raise ValueError("stdin bytes and stream_stdin=True exclude each other")
        sp = self._start(argv, env, data, cwd, limits, with_stdin=bool(stream_stdin))
        child: ManagedChild | None = None
        flow: Flow | None = None
        try:
            if stream_output or stream_stdin:
                cap = output_cap if stream_output else None
                flow = Flow(cap=cap, stdin=bool(stream_stdin), target=sp.target)
            with self._lock:
                child = ManagedChild(
                    sp,
                    stdin=data,
                    buffer_cap=buffer_cap,
                    observer=observer,
                    timeout=timeout,
                    on_done=self._child_done,
                    flow=flow,
                    stream_output=bool(stream_output),
                )
                self._children.add(child)
                closed = self._closed
            if closed:  # close() ran after admission and could not see this child
                raise ProcessError("System is closed", op="run", reason=ProcessReason.CLOSED)
            child._start()
        except BaseException:  # no survivor: the thread limit, a signal, close()
            if child is None:
                if flow is not None:
                    flow.end()
                self._abort(sp, None)
                self._release()
            else:  # its on_done gives back the slot, once
                child._abandon()
                child.join()
            raise
        return child

    # -- lifetime ------------------------------------------------------------------------

    @staticmethod
    def warm_up() -> None:
        """Start making, in the background, the tree cgroup this process's first spawn
        takes (decision 0029).

        On cgroup v1 the first spawn of a process otherwise waits for an RCU grace
        period (15-25 ms on an idle host) while its cgroup is set up; a program that
        spawns soon after it starts can call this first and let that wait overlap its
        other start-up work. Optional and idempotent; does nothing on a host without
        usable cgroups. What no ``System`` takes is removed at interpreter exit.
        """
        warm_up()

    def close(self) -> None:
        """Kill every child still running (and its tree) and refuse new ones. Idempotent.

        Guarantee: the background children are reaped before this returns, and once
        every ``run`` in flight has returned, no cgroup of this System remains.
        In a child forked from the process that created it, this does nothing: the
        children, trees and cgroups are the parent's (its inherited pidfds would kill
        them, and its drain threads do not exist in the child to be joined).
        """
        if os.getpid() != self._pid:
            return
        with self._lock:
            self._closed = True
            sessions = list(self._live.values())
            children = list(self._children)
        for sess in sessions:
            sess.sp.tree.kill()
        for child in children:
            child.kill()
        for child in children:
            child.join()
        self._cgroups.close()
        if self._confine is not None:
            self._confine.close()

    def __enter__(self) -> System:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
