"""The process capability: run and spawn argv beneath the substrate's workspace."""

from __future__ import annotations

import typing
from collections.abc import Mapping, Sequence

from flux_system.process import ChildOutput, ChildStatus, RunResult

__all__ = ["ChildPort", "ProcessPort"]


@typing.runtime_checkable
class ChildPort(typing.Protocol):
    """A background child started through a :class:`ProcessPort`.

    :class:`flux_system.ManagedChild` satisfies this. ``status()`` reports the exit
    exactly once it is known; a remote child whose end could not be observed raises
    :class:`~flux_system.UnknownOutcomeError` rather than inventing an exit code.
    """

    @property
    def pid(self) -> int: ...

    def read_output(self) -> ChildOutput: ...

    def status(self) -> ChildStatus: ...

    def kill(self) -> None: ...

    def join(self, timeout: float | None = None) -> bool: ...


@typing.runtime_checkable
class ProcessPort(typing.Protocol):
    """argv-only processes with the guarantees of DESIGN §2.3 on the serving side.

    :class:`flux_system.System` satisfies this structurally. Guarantee: no shell is
    built, output is capped, and no process of a tree outlives its run — on the side
    that runs it. Not guaranteed: a remote side's sandbox beyond what it reported.

    Raises: the :class:`~flux_system.ProcessError` family; the
    :class:`~flux_system.PortError` family for transport failures.
    """

    def run(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        stdin: bytes | None = None,
        timeout: float | None = 60.0,
        cwd: str = ".",
    ) -> RunResult: ...

    def spawn(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        stdin: bytes | None = None,
        timeout: float | None = None,
        cwd: str = ".",
    ) -> ChildPort: ...
