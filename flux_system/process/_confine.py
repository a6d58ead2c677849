"""What the spawn builder needs from a sandbox: a Protocol, so ``process`` never imports it.

A sandbox (``flux_system.sandbox.Sandbox``) satisfies :class:`SandboxLike`. ``System``
asks it once for a :class:`Confinement` bound to its workspace; the one spawn builder
asks that, for every child, for a :class:`Launch`: the argv, executable, environment
and fds actually exec'd (e.g. ``bwrap`` reading the real argv from an fd), optionally a
confined thread to fork from (the Landlock-only backend), and a ``finish`` hook that
returns what the sandbox denied during the run.

Guarantee: the builder creates every process itself (the sandbox never forks); the fds
of a launch are closed in the parent once the child has started, whatever happened.
"""

from __future__ import annotations

import threading
import typing
from collections.abc import Callable, Mapping

from flux_system._values import field, record
from flux_system.process._limits import Limits

__all__ = ["Confinement", "Denial", "Denials", "Launch", "SandboxLike"]


@typing.final
@record
class Denial:
    """One thing the sandbox refused: the layer, the syscall or path, the errno returned."""

    layer: str
    what: str
    errno: int | None
    pid: int | None = None
    detail: str = ""


@typing.final
@record
class Denials:
    """What a sandboxed run was denied, as far as the host could observe.

    ``records`` holds every denial seen (seccomp on the Landlock backend, the egress
    proxy's refusals, the protected-path audit). ``observable`` is ``False`` when some
    layer's denials cannot be seen at all (``reason`` says which and why): an empty
    ``records`` then does not mean nothing was denied.
    """

    records: tuple[Denial, ...] = ()
    observable: bool = True
    reason: str = ""


@typing.final
@record(frozen=False)
class Launch:
    """What to exec for one confined child (built per spawn by the confinement).

    ``fork`` (when set) runs the given callable — the fork and exec — on a confined
    thread and returns when it has; ``tid`` is that thread's native id (ASCII), which
    the builder moves into the child's cgroup instead of its own.
    """

    argv: tuple[str, ...]
    executable: str
    env: dict[str, str]
    pass_fds: tuple[int, ...] = ()
    fork: Callable[[Callable[[], None]], None] | None = None
    tid: bytes | None = None
    started: Callable[[int], None] | None = None  # told the child's pid once it runs
    finish: Callable[[int], Denials] | None = None
    # told once the leader exited, before the tree kill: reap a helper the confinement
    # knows is ending (bwrap's init), so the kill finds the tree empty; never raises
    exited: Callable[[], None] | None = None
    serial: threading.Lock | None = None  # held by the builder from cgroup entry to exit
    owned_fds: list[int] = field(default_factory=list)

    def close_fds(self) -> None:
        """Close the fds this launch opened for the child (idempotent)."""
        import os

        fds, self.owned_fds = self.owned_fds, []
        for fd in fds:
            try:  # noqa: SIM105 - hot path
                os.close(fd)
            except OSError:
                pass


class Confinement(typing.Protocol):
    """A sandbox bound to one workspace (what ``System`` holds)."""

    def launch(
        self, argv: tuple[str, ...], executable: str, env: Mapping[str, str], cwd_fd: int
    ) -> Launch:
        """The launch of *argv* (resolved to *executable*) with cwd *cwd_fd*.

        Raises:
            SandboxUnavailableError: a required layer cannot be applied.
            SpawnError: the command cannot run inside the sandbox.
        """
        ...

    def default_limits(self) -> Limits | None:
        """The limits a run gets when its caller gives none."""
        ...

    def close(self) -> None:
        """Release what the confinement holds (threads, fds). Idempotent."""
        ...


class SandboxLike(typing.Protocol):
    """What ``System(ws, sandbox=...)`` accepts."""

    def confine(self, ws: object) -> Confinement:
        """Bind the sandbox to workspace *ws*.

        Raises:
            SandboxUnavailableError: the sandbox cannot confine this workspace here.
        """
        ...
