"""The result value of a finished child."""

from __future__ import annotations

import typing

from flux_system._values import record
from flux_system.process._confine import Denials
from flux_system.process._drain import decode_capped

__all__ = ["DEFAULT_OUTPUT_CAP", "RunResult"]

DEFAULT_OUTPUT_CAP = 1 << 20
"""Bytes kept per output stream of a run (the rest is drained and counted)."""


@typing.final
@record
class RunResult:
    """What a child did: exit status and its (capped) output.

    ``stdout``/``stderr`` are the raw captured bytes (at most the cap);
    ``stdout_text``/``stderr_text`` decode them (invalid UTF-8 replaced, never an
    exception) and end with a truncation notice when truncated. A child killed by a
    signal has ``exit_code == -N`` and ``signal == N``. A non-zero exit is a result.
    ``tree_contained`` says whether the tree had its own cgroup (so even daemonised
    descendants were killed); ``False`` means only its process group and live
    descendants were. ``denials`` (sandboxed runs only) lists what the sandbox refused,
    or says that the backend cannot observe it.
    """

    exit_code: int
    stdout: bytes
    stderr: bytes
    stdout_truncated: bool
    stderr_truncated: bool
    duration_s: float
    signal: int | None
    stdout_dropped: int = 0
    stderr_dropped: int = 0
    tree_contained: bool = True
    denials: Denials | None = None

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    @property
    def stdout_text(self) -> str:
        return decode_capped(
            self.stdout, truncated=self.stdout_truncated, dropped=self.stdout_dropped
        )

    @property
    def stderr_text(self) -> str:
        return decode_capped(
            self.stderr, truncated=self.stderr_truncated, dropped=self.stderr_dropped
        )
