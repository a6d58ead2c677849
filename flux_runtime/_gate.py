"""Which files an operation that walks the workspace may look into (per file, by policy).

``grep`` and ``glob`` are decided on the directory they are given; the files they walk
are then each held to the same policy: the executor sets a gate for the handler's run
that says whether the operation, on ``workspace/<name>``, is allowed without asking.
A file it is not allowed on is skipped — its name and its content never reach the
result (the default policy's ``.env`` deny holds for ``grep .`` as for ``read .env``).

Guarantee: inside :meth:`Executor.dispatch` every walking handler consults the gate.
Not guaranteed: anything for a handler called outside the executor (no gate: every
name passes, as the handler's own caller decided).
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar

__all__ = ["WALK_GATE", "visible"]

WALK_GATE: ContextVar[Callable[[str], bool] | None] = ContextVar("flux_walk_gate", default=None)


def visible(name: str) -> bool:
    """Whether the running operation may look at workspace file *name*."""
    gate = WALK_GATE.get()
    return True if gate is None else gate(name)
