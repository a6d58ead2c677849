"""The Landlock-only backend: children forked from one restricted spawner thread.

For hosts where bubblewrap cannot run (an unprivileged container, AppArmor's
user-namespace restriction). The spawner thread of :mod:`._spawner` is restricted once
per ``System``: reads (and execution) of the profile's system paths, the read roots and
the extra read-only paths; writes to the writable roots, the extra writable paths and
a private per-``System`` temporary directory (``TMPDIR`` and ``HOME`` of the children);
no TCP bind or connect when the network is ``none`` (ABI ≥ 4) and ``socket(AF_INET*)``
refused by seccomp; abstract unix sockets and signals scoped to the sandbox (ABI ≥ 6).
The seccomp filter notifies a listener, so denials are observable here.

Not given (reported as not enforced): a private ``/tmp`` view, pid and network
namespaces, read-only protected paths inside a writable root (Landlock cannot deny
below an allowed directory; the post-run audit covers them), pathname unix sockets.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import typing
from collections.abc import Mapping

import flux_system.sandbox._landlock as _landlock
import flux_system.sandbox._seccomp as _seccomp
from flux_system._exceptions import SandboxReason, SandboxUnavailableError
from flux_system.process import Limits
from flux_system.process._confine import Denials, Launch
from flux_system.sandbox._confine_inputs import (
    check_home,
    check_profile_file,
    limits_of,
    workspace_roots,
)
from flux_system.sandbox._extra_paths import check_extra_paths
from flux_system.sandbox._extras import RunExtras
from flux_system.sandbox._protected import BUILTIN_PROTECTED
from flux_system.sandbox._spawner import Spawner

if typing.TYPE_CHECKING:
    from flux_system.sandbox._sandbox import Sandbox

__all__ = ["LandlockConfinement"]

_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")


@typing.final
class LandlockConfinement:
    """What ``System`` holds for a Landlock-only sandbox (see the module docstring)."""

    def __init__(self, sandbox: Sandbox, ws: object) -> None:
        profile = sandbox.profile
        assert profile is not None
        settings = sandbox.settings
        roots = workspace_roots(ws)
        check_home(roots, settings.allow_home_workspace)
        extra_rw = tuple(
            p for p in (*profile.read_write, *settings.read_write) if os.path.isdir(p)
        )  # writable roots too (decision 0119): not $HOME or /, and audited
        check_home([(-1, p, True) for p in extra_rw], settings.allow_home_workspace)
        check_profile_file(profile, (*(p for _, p, w in roots if w), *extra_rw))
        check_extra_paths(
            (p for _, p, w in roots if w),
            settings.read_only,
            (*profile.read_write, *settings.read_write),
        )
        self._tmp = tempfile.mkdtemp(prefix="flux-sandbox-")
        read = [
            *profile.read_only,
            *(f"/etc/{name}" for name in profile.etc),
            *(p for _, p, w in roots if not w),
            *settings.read_only,
            "/proc",
        ]
        write = [
            *(p for _, p, w in roots if w),
            *profile.read_write,
            *settings.read_write,
            self._tmp,
            *_DEVICES,
        ]
        no_net = sandbox.network == "none"
        rules = _landlock.Ruleset(
            read=tuple(read),
            write=tuple(write),
            tcp_bind=() if no_net else None,
            tcp_connect=() if no_net else None,
            scope=True,
        )
        spec = _seccomp.FilterSpec(
            allow_netlink=profile.allow_netlink,
            deny_inet=no_net,
            notify=True,
            extra_denied=_seccomp.METADATA_SYSCALLS
            + _seccomp.IPC_SYSCALLS
            + (_seccomp.ROOT_METADATA_SYSCALLS if os.geteuid() == 0 else ()),
        )
        self._spawner = Spawner(rules, spec)
        if self._spawner.error is not None:
            err = self._spawner.error
            self.close()
            raise SandboxUnavailableError(
                f"the Landlock spawner could not be restricted: {err.strerror or err}",
                op="confine",
                layer="landlock",
                reason=SandboxReason.LAYER_UNAVAILABLE,
            )
        self._limits = limits_of(profile)
        self._sandbox = sandbox
        self._writable = (*(p for _, p, w in roots if w), *extra_rw)
        self._protected = (*BUILTIN_PROTECTED, *profile.protected)

    @property
    def enforced(self) -> dict[str, bool]:
        """What the kernel accepted: ``{"fs", "tcp", "scope"}``."""
        return dict(self._spawner.enforced)

    def default_limits(self) -> Limits | None:
        return self._limits

    def launch(
        self, argv: tuple[str, ...], executable: str, env: Mapping[str, str], cwd_fd: int
    ) -> Launch:
        child_env = dict(env)
        child_env["TMPDIR"] = self._tmp
        child_env["HOME"] = self._tmp
        spawner = self._spawner
        pid_box: list[int] = []

        def started(pid: int) -> None:
            pid_box.append(pid)
            spawner.started(pid)

        extras = RunExtras(self._sandbox, self._writable, self._protected)

        def finish(code: int) -> Denials:
            if not pid_box:
                return extras.finish(Denials(()))
            records, unattributed = spawner.finish(pid_box[0])
            reason = (
                f"{unattributed} denial(s) of re-parented processes could not be attributed"
                if unattributed
                else ""
            )
            return extras.finish(Denials(records, observable=True, reason=reason))

        return Launch(
            argv=argv,
            executable=executable,
            env=child_env,
            fork=spawner.run,
            tid=spawner.tid,
            serial=spawner.serial,
            started=started,
            finish=finish,
        )

    def close(self) -> None:
        spawner = getattr(self, "_spawner", None)
        if spawner is not None:
            spawner.close()
        with contextlib.suppress(OSError):
            shutil.rmtree(self._tmp)
