"""Approvers: who says yes to a batch or to one operation.

Guarantee: only the exact answer ``True`` approves. A missing answer, ``None``, any
other value, an exception in the approver, end of input: all deny
(:func:`ask`). :class:`TerminalApprover` accepts only ``y`` or ``yes``.
"""

from __future__ import annotations

import sys
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TextIO

__all__ = [
    "ApprovalRequest",
    "Approver",
    "AutoLowApprover",
    "HeadlessApprover",
    "ScriptedApprover",
    "TerminalApprover",
    "ask",
]


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """What is to be approved: a batch (digest + actions) or one operation."""

    kind: str  # "batch" | "operation"
    digest: str
    actions: tuple[dict[str, Any], ...]
    risks: tuple[str, ...]
    reason: str

    def describe(self) -> str:
        """The prompt: one line per action naming its op, then every input field on a
        line of its own, each value cut by itself at :data:`FIELD_SHOWN` characters (a
        long value can never push another field — a path, a URL, a header — out of
        sight), the fields that name a target first. Values are shown as ``repr`` and
        names with control characters escaped: nothing in an input can add a line to
        the prompt or send the terminal an escape sequence."""
        lines = [f"approve {self.kind} {self.digest[:23]} ({self.reason})?"]
        for i, (a, risk) in enumerate(zip(self.actions, self.risks, strict=True), 1):
            lines.append(f"  {i}. [{_plain(risk)}] {_plain(a['op'])}")
            inp = a["input"]
            if not isinstance(inp, dict):
                lines.append(f"       {_shown(inp)}")
                continue
            for key in sorted(inp, key=lambda k: (k not in _TARGET_FIELDS, str(k))):
                lines.append(f"       {_plain(key)[:60]}: {_shown(inp[key])}")
        return "\n".join(lines)


FIELD_SHOWN = 300  # characters of one input value in an approval prompt
# Fields that say where an effect lands: shown before the others.
_TARGET_FIELDS = frozenset({"path", "paths", "url", "argv", "cwd", "env", "headers", "method"})


def _plain(name: object) -> str:
    """*name* on one line: a control character (newline, escape) shown as its escape,
    so an input key cannot forge a line of the prompt or drive the terminal."""
    text = str(name)
    return text if text.isprintable() else repr(text)[1:-1]


def _shown(value: object) -> str:
    text = repr(value)
    if len(text) <= FIELD_SHOWN:
        return text
    return f"{text[:FIELD_SHOWN]}... ({len(text) - FIELD_SHOWN} more characters)"


@typing.runtime_checkable
class Approver(typing.Protocol):
    def approve(self, request: ApprovalRequest) -> object: ...


def ask(approver: Approver, request: ApprovalRequest) -> bool:
    """True only for an explicit ``True``; everything else (and any exception) denies."""
    try:
        answer = approver.approve(request)
    except Exception:
        return False
    return answer is True


class HeadlessApprover:
    """Denies everything (no one is there to ask)."""

    def approve(self, request: ApprovalRequest) -> object:
        return False


class AutoLowApprover:
    """Approves requests whose every action is low risk; denies the rest."""

    def approve(self, request: ApprovalRequest) -> object:
        return bool(request.risks) and all(r == "low" for r in request.risks)


class ScriptedApprover:
    """Answers from a list, in order (tests); when it runs out the answer is ``None``."""

    def __init__(self, answers: Iterable[object]) -> None:
        self._answers = list(answers)
        self.seen: list[ApprovalRequest] = []

    def approve(self, request: ApprovalRequest) -> object:
        self.seen.append(request)
        return self._answers.pop(0) if self._answers else None


class TerminalApprover:
    """Shows the request on *out* and reads one line from *inp*: ``y``/``yes`` approves."""

    def __init__(
        self,
        inp: TextIO | None = None,
        out: TextIO | None = None,
        redact: Callable[[str], str] = lambda s: s,
    ) -> None:
        self._in = inp if inp is not None else sys.stdin
        self._out = out if out is not None else sys.stderr
        self._redact = redact

    def approve(self, request: ApprovalRequest) -> object:
        self._out.write(self._redact(request.describe()) + "\n[y/N] ")
        self._out.flush()
        line = self._in.readline()
        if not self._in.isatty():
            self._out.write("\n")
        return line.strip().lower() in ("y", "yes")
