"""The bubblewrap confinement of one workspace: a ``Launch`` per child.

Built once per ``System``: the workspace roots (by fd), the fixed system view, the
home directory and the paths visible inside. Per child: the protected paths are
opened again (they change between runs), the seccomp program is reopened (its own
file offset), and the whole command line goes into a sealed memfd for ``--args``.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import typing
import weakref
from collections.abc import Callable, Mapping

import flux_system.sandbox._bwrap as _bwrap
from flux_system._exceptions import (
    ProcessReason,
    SpawnError,
)
from flux_system.process import Limits
from flux_system.process._confine import Denials, Launch
from flux_system.sandbox._bwrap_init import reap_init, start_time
from flux_system.sandbox._confine_inputs import (
    check_home,
    check_profile_file,
    limits_of,
    workspace_roots,
)
from flux_system.sandbox._extra_paths import check_extra_paths
from flux_system.sandbox._extras import RunExtras
from flux_system.sandbox._protected import BUILTIN_PROTECTED, Found, find_protected

if typing.TYPE_CHECKING:
    from flux_system.sandbox._sandbox import Sandbox

__all__ = ["BwrapConfinement", "check_home", "limits_of", "workspace_roots"]

LAUNCHER_DIR = "/run/flux"  # where the launcher's directory is bound inside (strict)
_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty")
_FALLBACK_HOME = "/home/flux"


def _extra_dirs(paths: tuple[str, ...], owned: list[int]) -> list[tuple[int, str, bool]]:
    """The extra writable paths that are directories, opened ``O_PATH`` (fds to *owned*).

    Followed by name, as bwrap's ``--bind`` follows them: no symlink lies below a
    writable tree on the way to them (checked when the ``System`` was made), so a link
    on the way is the user's own.
    """
    out = []
    for path in paths:
        try:
            fd = os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            continue  # a file, or gone: it holds no protected path
        owned.append(fd)
        out.append((fd, path, True))
    return out


def _nested(found: list[tuple[str, Found]]) -> list[tuple[str, Found]]:
    """Drop entries below another bound entry (a later parent bind would undo it)."""
    leaves = {(base, f.rel) for base, f in found if f.fd is not None}
    out = []
    for base, f in found:
        parts = f.rel.split("/")
        if f.fd is not None and any(
            (base, "/".join(parts[:i])) in leaves for i in range(1, len(parts))
        ):
            continue
        out.append((base, f))
    return out


@typing.final
class BwrapConfinement:
    """What ``System`` holds for a bubblewrap sandbox (see the module docstring)."""

    def __init__(self, sandbox: Sandbox, ws: object) -> None:
        profile = sandbox.profile
        host = sandbox.host
        assert profile is not None and host is not None and host.bwrap.path is not None
        self._sandbox = sandbox
        self._bwrap = host.bwrap.path
        self._roots = workspace_roots(ws)
        check_home(self._roots, sandbox.settings.allow_home_workspace)
        self._fixed, visible = _bwrap.system_view(profile.read_only, profile.etc)
        settings = sandbox.settings
        check_extra_paths(
            (p for _, p, w in self._roots if w),
            settings.read_only,
            (*profile.read_write, *settings.read_write),
        )
        self._extra_ro = tuple(p for p in (*settings.read_only,) if os.path.exists(p))
        self._extra_rw = tuple(
            p for p in (*profile.read_write, *settings.read_write) if os.path.exists(p)
        )
        # Extra writable paths are writable roots too: not $HOME or / (unless allowed),
        # their protected paths bound read-only, and audited (decision 0119).
        check_home([(-1, p, True) for p in self._extra_rw], settings.allow_home_workspace)
        check_profile_file(profile, (*(p for _, p, w in self._roots if w), *self._extra_rw))
        self._visible = (
            visible | {p for _, p, _ in self._roots} | set(self._extra_ro) | set(self._extra_rw)
        )
        self._protected = (*BUILTIN_PROTECTED, *profile.protected)
        self._net = sandbox.network != "host"
        if sandbox.network == "proxy":
            from flux_system.sandbox._proxy_run import check_grants

            check_grants(settings, profile)  # not per launch: a typed error, here
        self._disable_userns = host.bwrap.disable_userns
        self._tmpfs_size = profile.tmpfs_size if host.bwrap.tmpfs_size else None
        self._seccomp = "seccomp" in sandbox._plan.active
        self._limits = limits_of(profile)
        self._plan = sandbox._plan
        self._unobserved = Denials((), observable=False, reason=self._plan.denial_reason)
        self._launcher: tuple[str, list[str]] | None = None
        needs_launcher = self._plan.landlock_inside or sandbox.network == "proxy"
        if needs_launcher and self._plan.python is not None:
            self._launcher = (self._plan.python, self._launcher_binds(self._plan.python))
        self._writable = (*(p for _, p, w in self._roots if w), *self._extra_rw)
        self._landlock_read = (
            *visible,
            *(p for _, p, w in self._roots if not w),
            *self._extra_ro,
            "/proc",
        )
        self._landlock_write = (
            *(p for _, p, w in self._roots if w),
            *self._extra_rw,
            "/tmp",
            "/dev/shm",
            *_DEVICES,
        )

    def _launcher_binds(self, python: str) -> list[str]:
        """Bind the launcher's directory (and the interpreter when outside the view)."""
        here = os.path.dirname(os.path.realpath(__file__))
        opts = ["--ro-bind", here, LAUNCHER_DIR]
        if not self._is_visible(python):
            prefix = os.path.dirname(os.path.dirname(python))
            opts += ["--ro-bind", prefix, prefix]
            self._visible = self._visible | {prefix}
        return opts

    def _launcher_spec(self, home: str) -> bytes:
        no_net = self._net and self._sandbox.network == "none"
        landlock = {
            "read": list(self._landlock_read),
            "write": [*self._landlock_write, home],
            "tcp_bind": [] if no_net else None,
            "tcp_connect": [] if no_net else None,
            "scope": True,
        }
        return json.dumps({"landlock": landlock, "rlimits": []}).encode()

    def default_limits(self) -> Limits | None:
        return self._limits

    def close(self) -> None:
        return None

    def _is_visible(self, path: str) -> bool:
        real = os.path.realpath(path)
        for candidate in (path, real):
            for base in self._visible:
                if candidate == base or candidate.startswith(base.rstrip("/") + "/"):
                    return True
        return False

    def _home(self, env: Mapping[str, str]) -> str:
        home = env.get("HOME", "")
        if not home.startswith("/") or os.path.normpath(home) in ("/", "/tmp", "/proc", "/dev"):
            return _FALLBACK_HOME
        home = os.path.normpath(home)
        if any(home == b or home.startswith(b.rstrip("/") + "/") for b in self._visible):
            return _FALLBACK_HOME  # a tmpfs there would hide a bound path
        return home

    def launch(
        self, argv: tuple[str, ...], executable: str, env: Mapping[str, str], cwd_fd: int
    ) -> Launch:
        exe = executable if executable.startswith("/") else None
        cwd = os.readlink(f"/proc/self/fd/{cwd_fd}")
        if exe is None:
            exe = os.path.normpath(os.path.join(cwd, executable))
        if not self._is_visible(exe):
            raise SpawnError(
                "the command is not visible inside the sandbox (outside its filesystem view)",
                op="run",
                target=argv[0],
                reason=ProcessReason.NOT_FOUND,
            )
        _check_executable(exe, argv[0])
        child_env = dict(env)
        home = self._home(child_env)
        child_env["HOME"] = home
        if "TMPDIR" in child_env and not child_env["TMPDIR"].startswith("/tmp"):
            child_env["TMPDIR"] = "/tmp"
        owned: list[int] = []
        extras: RunExtras | None = None
        info: _InitInfo | None = None
        launch = Launch(argv=(), executable=self._bwrap, env={}, owned_fds=owned)
        try:
            found: list[tuple[str, Found]] = []
            for fd, path, writable in (*self._roots, *_extra_dirs(self._extra_rw, owned)):
                if writable:
                    for f in find_protected(fd, self._protected):
                        if f.fd is not None:
                            owned.append(f.fd)
                            owned.extend(pfd for _, pfd in f.parents)
                        found.append((path, f))
            seccomp_fd = None
            if self._seccomp:
                memfd = self._sandbox._seccomp_memfd()
                seccomp_fd = os.open(f"/proc/self/fd/{memfd}", os.O_RDONLY | os.O_CLOEXEC)
                owned.append(seccomp_fd)
            extras = RunExtras(self._sandbox, self._writable, self._protected)
            info_r, info_w = os.pipe2(os.O_CLOEXEC)
            owned.append(info_w)
            info = _InitInfo(info_r)
            launch.started = info.started
            launch.exited = info.reap  # bwrap exited: its init is ending (reaped first)
            launch.finish = _finisher(info, extras, self._unobserved)
            if extras.proxy is not None:
                child_env.update(extras.proxy.env)
            command = [exe, *argv[1:]]
            spec_fd = -1
            if self._launcher is not None:
                python, _ = self._launcher
                command = [python, "-I", "-S", f"{LAUNCHER_DIR}/_launcher.py"]
                if self._plan.landlock_inside:
                    spec_fd = _bwrap.memfd_with("flux-launcher-spec", self._launcher_spec(home))
                    owned.append(spec_fd)
                    command += ["--spec", str(spec_fd)]
                if extras.proxy is not None:
                    command += list(extras.proxy.launcher_args)
                command += ["--", exe, *argv[1:]]
            opts, fds = _bwrap.command_line(
                fixed=self._fixed,
                roots=self._roots,
                protected=_nested(found),
                extra_ro=self._extra_ro,
                extra_rw=self._extra_rw,
                home=home,
                unshare_net=self._net,
                disable_userns=self._disable_userns,
                seccomp_fd=seccomp_fd,
                info_fd=info_w,
                cwd=cwd,
                env=child_env,
                tmpfs_size=self._tmpfs_size,
            )
            if self._launcher is not None:
                opts += self._launcher[1]
            if spec_fd >= 0:
                fds.append(spec_fd)
            if extras.proxy is not None:
                opts += list(extras.proxy.bwrap_args)
            opts += _bwrap.REMOUNT_RO  # after every bind: it needs its mount points made
            args_fd = _bwrap.memfd_with("flux-bwrap-args", _bwrap.encode_args(opts))
            owned.append(args_fd)
        except OSError as exc:
            launch.close_fds()
            if info is not None:
                info.close()
            if extras is not None:
                extras.abort()
            raise SpawnError(
                f"the sandbox could not be prepared: {exc.strerror}",
                op="run",
                target=argv[0],
                reason=ProcessReason.SPAWN_FAILED,
            ) from exc
        except BaseException:
            launch.close_fds()
            if info is not None:
                info.close()
            if extras is not None:
                extras.abort()
            raise
        launch.argv = (self._bwrap, "--args", str(args_fd), "--", *command)
        launch.pass_fds = (args_fd, *fds)
        return launch


@typing.final
class _InitInfo:
    """The read end of bwrap's ``--info-fd`` for one run; reaps bwrap's init after it."""

    __slots__ = ("__weakref__", "_fd", "_final", "_leader_start")

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._leader_start: int | None = None
        # A launch that never reaches finish (the spawn failed after the fork) still
        # closes it; detached on close(), so a reused fd number is never closed.
        self._final = weakref.finalize(self, _close_quietly, fd)

    def started(self, pid: int) -> None:
        self._leader_start = start_time(pid)

    def reap(self) -> None:
        if self._fd >= 0:
            reap_init(self._fd, self._leader_start)
            self.close()

    def close(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            self._final.detach()
            _close_quietly(fd)


def _check_executable(exe: str, target: str) -> None:
    """What exec would say, said before bwrap runs (inside, a failed exec is bwrap's exit 1).

    Only for the error's reason: the exec inside still decides (the file may change).
    """
    try:
        st = os.stat(exe)
    except FileNotFoundError:
        reason = ProcessReason.NOT_FOUND
    except OSError:
        reason = ProcessReason.NOT_EXECUTABLE
    else:
        if stat.S_ISREG(st.st_mode) and os.access(exe, os.X_OK):
            return
        reason = ProcessReason.NOT_EXECUTABLE
    raise SpawnError(
        "not found" if reason is ProcessReason.NOT_FOUND else "not executable",
        op="run",
        target=target,
        reason=reason,
    )


def _finisher(info: _InitInfo, extras: RunExtras, base: Denials) -> Callable[[int], Denials]:
    def finish(code: int) -> Denials:
        info.reap()  # first: the init must be gone before the audit looks
        return extras.finish(base)

    return finish


def _close_quietly(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)
