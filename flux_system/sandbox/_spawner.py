"""A confined spawner thread and its seccomp user-notification listener (Landlock backend).

Landlock domains and seccomp filters are per thread and inherited across fork and
exec. So one thread is restricted once — ``no_new_privs``, Landlock, then a seccomp
filter whose denials *notify* — and every child is forked from it: no Python code runs
between fork and exec (no ``preexec_fn``), and the parent's other threads stay
unrestricted. The filter's listener fd stays in this process; a listener thread (not
restricted) receives each denied syscall, records it (pid, syscall, arguments), and
answers it with the errno the filter would have returned.

Guarantee: the spawner thread runs only the callables it is handed (the spawn
builder's fork); it is restricted before it runs any; a failed restriction fails every
later call with the same ``OSError``. A denied syscall is answered ``EPERM``
(``EAFNOSUPPORT`` for ``socket``), never allowed. If the listener is gone, the kernel
answers ``ENOSYS``: still denied.
Not guaranteed: attribution of a denial to its run when the denying process was
re-parented away from the run's leader (it is then listed as unattributed).
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import errno
import os
import select
import threading
import typing
from collections.abc import Callable

import flux_system.sandbox._caps as _caps
import flux_system.sandbox._landlock as _landlock
import flux_system.sandbox._libseccomp as _libseccomp
import flux_system.sandbox._seccomp as _seccomp
import flux_system.sandbox._undumpable as _undumpable
from flux_system.process._confine import Denial
from flux_system.process._resident import Jobs, hand_off, serve

__all__ = ["Spawner"]

_POLL_MS = 200  # the listener checks for close() this often
_MAX_RECORDS = 1024  # denials kept per run (a loop of denied calls must not grow memory)
_MAX_CHAIN = 64  # parent links walked to attribute a denial to a run


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    try:
        return int(data[data.rindex(b")") + 2 :].split()[1])
    except (ValueError, IndexError):
        return None


@typing.final
class Spawner:
    """One restricted thread forking children, plus the unrestricted listener."""

    def __init__(self, rules: _landlock.Ruleset, spec: _seccomp.FilterSpec) -> None:
        self._jobs = Jobs()
        self._ready = threading.Event()
        self._error: OSError | None = None
        self._notify_fd = -1
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._runs: dict[int, list[Denial]] = {}
        self._unattributed: list[Denial] = []
        self._pending: list[tuple[frozenset[int], Denial]] = []
        self.enforced: dict[str, bool] = {}
        self.tid: bytes = b""
        self._undumpable = False
        self.serial = threading.Lock()
        self._lib = _libseccomp.load()
        self._thread = threading.Thread(
            target=self._main, args=(rules, spec), name="flux-sandbox-spawner", daemon=True
        )
        self._thread.start()
        self._ready.wait()
        self._listener: threading.Thread | None = None
        if self._error is None and self._notify_fd >= 0:
            self._listener = threading.Thread(
                target=self._listen, name="flux-sandbox-listener", daemon=True
            )
            self._listener.start()

    @property
    def error(self) -> OSError | None:
        return self._error

    # -- the restricted thread ---------------------------------------------------------

    def _main(self, rules: _landlock.Ruleset, spec: _seccomp.FilterSpec) -> None:
        self.tid = b"%d" % threading.get_native_id()
        try:
            self._restrict(rules, spec)
        except OSError as exc:
            self._error = exc
        except Exception as exc:  # a ctypes failure: fail closed, keep the reason
            self._error = OSError(errno.EINVAL, f"restriction failed: {exc}")
        finally:
            self._ready.set()
        serve(self._jobs, self._error)

    def _restrict(self, rules: _landlock.Ruleset, spec: _seccomp.FilterSpec) -> None:
        lib = self._lib
        if lib is None:
            raise OSError(errno.ENOSYS, "libseccomp.so.2 not found")
        _caps.drop_all()  # this thread only: an exec by root then gains no capability
        # The children share this thread's Landlock domain: its memory, environment
        # and fds are kept from them (non-dumpable), so are signals aimed at it.
        _undumpable.hold()
        self._undumpable = True
        self.enforced = _landlock.restrict(rules)  # sets no_new_privs on this thread
        spec = dataclasses.replace(spec, guard_tid=threading.get_native_id())
        program = _seccomp.export_bytes(lib, spec)
        # This thread only (no TSYNC); our own listener fd (not libseccomp's global one).
        self._notify_fd = _libseccomp.install_bpf(lib, program, new_listener=spec.notify)

    def run(self, fn: Callable[[], None]) -> None:
        """Run *fn* on the restricted thread; re-raise what it raised.

        Waits for the job even through ``KeyboardInterrupt`` (re-raised afterwards): the
        caller must never clean up a fork that is still in progress.
        """
        if self._closed.is_set():
            raise OSError(errno.ESHUTDOWN, "the sandbox spawner is closed")
        hand_off(self._jobs, fn)

    # -- denials -----------------------------------------------------------------------

    def started(self, pid: int) -> None:
        """A run led by *pid* began: claim the denials its tree made before this call."""
        with self._lock:
            bucket: list[Denial] = []
            keep = []
            for chain, record in self._pending:
                if pid in chain:
                    bucket.append(record)
                else:
                    keep.append((chain, record))
            self._pending = keep
            self._runs[pid] = bucket

    def finish(self, pid: int) -> tuple[tuple[Denial, ...], int]:
        """The denials of the run led by *pid* and how many unattributed ones exist."""
        with self._lock:
            records = self._runs.pop(pid, [])
            return tuple(records), len(self._unattributed)

    def _attribute(self, pid: int, record: Denial) -> None:
        chain: list[int] = []
        at: int | None = pid
        while at is not None and at > 1 and len(chain) < _MAX_CHAIN:
            chain.append(at)
            at = _parent(at)
        with self._lock:
            for link in chain:
                bucket = self._runs.get(link)
                if bucket is not None:
                    if len(bucket) < _MAX_RECORDS:
                        bucket.append(record)
                    return
            if os.getpid() in chain:
                # Our own descendant whose run is not registered yet (it denied a call
                # before the builder could tell us its pid): held for started().
                if len(self._pending) < _MAX_RECORDS:
                    self._pending.append((frozenset(chain), record))
                return
            if len(self._unattributed) < _MAX_RECORDS:
                self._unattributed.append(record)

    def _listen(self) -> None:
        lib = self._lib
        assert lib is not None
        fd = self._notify_fd
        req, resp = lib.notify_alloc()
        try:
            poller = select.poll()
            poller.register(fd, select.POLLIN)
            while not self._closed.is_set():
                events = poller.poll(_POLL_MS)
                if not events:
                    continue
                bad = any(ev & (select.POLLHUP | select.POLLERR) for _, ev in events)
                if bad and not any(ev & select.POLLIN for _, ev in events):
                    return
                ctypes.memset(req, 0, ctypes.sizeof(_libseccomp.NotifReq))
                try:
                    lib.notify_receive(fd, req)
                except OSError:
                    continue  # the task died before we read it (ENOENT), or interrupted
                r = req.contents
                name = lib.name_of(r.data.nr)
                err = errno.EAFNOSUPPORT if name == "socket" else errno.EPERM
                args = tuple(int(a) for a in r.data.args)
                record = Denial(
                    layer="seccomp",
                    what=name,
                    errno=err,
                    pid=int(r.pid),
                    detail=_detail(name, args),
                )
                # Recorded before the answer: until then the caller is blocked, so its
                # run cannot end (and be collected) without this record.
                self._attribute(int(r.pid), record)
                ctypes.memset(resp, 0, ctypes.sizeof(_libseccomp.NotifResp))
                resp.contents.id = r.id
                resp.contents.error = -err
                resp.contents.val = 0
                resp.contents.flags = 0
                with contextlib.suppress(OSError):  # ENOENT: it died meanwhile
                    lib.notify_respond(fd, resp)
        finally:
            lib.notify_free(req, resp)

    def close(self) -> None:
        """Stop both threads and close the listener fd (idempotent)."""
        if self._closed.is_set():
            return
        self._closed.set()
        self._jobs.close()
        self._thread.join(5)
        if self._listener is not None:
            self._listener.join(5)
        if self._notify_fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._notify_fd)
            self._notify_fd = -1
        if self._undumpable:
            self._undumpable = False
            _undumpable.release()


def _detail(name: str, args: tuple[int, ...]) -> str:
    if name == "socket":
        return f"family={args[0] & 0xFFFFFFFF}"
    if name == "ioctl":
        return f"cmd={args[1] & 0xFFFFFFFF:#x}"
    if name == "clone":
        return f"flags={args[0]:#x}"
    return ""
