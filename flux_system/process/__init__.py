"""Processes: argv-only children beneath a workspace, bounded output, no survivors.

The one spawn builder (``_spawn._build_spawn``) creates every process; the environment
starts empty (``_env``), output is drained under a cap (``_drain``) or streamed to a
consumer with back-pressure and stdin fed from a writer (``_stream``, ``_flowdrive``),
and every tree is killed and reaped on every path (``_reap``, ``_cgroup``). The modules
here are private; the public names are ``__all__`` and are re-exported by
:mod:`flux_system`. This subpackage imports :mod:`flux_system.workspace` and
:mod:`flux_system._exceptions` only.
"""

from __future__ import annotations

from flux_system.process._child import ChildOutput, ChildStatus, ManagedChild, OutputTotals
from flux_system.process._drain import LineObserver
from flux_system.process._env import DEFAULT_ENV_ALLOWLIST, is_denied_hook
from flux_system.process._limits import Limits, Privileges
from flux_system.process._result import DEFAULT_OUTPUT_CAP, RunResult
from flux_system.process._stream import ChildStdin, OutputChunk
from flux_system.process._system import System

__all__ = [
    "ChildOutput",
    "ChildStatus",
    "ChildStdin",
    "DEFAULT_ENV_ALLOWLIST",
    "DEFAULT_OUTPUT_CAP",
    "Limits",
    "LineObserver",
    "ManagedChild",
    "OutputChunk",
    "OutputTotals",
    "Privileges",
    "RunResult",
    "System",
    "is_denied_hook",
]
