"""Precompiled pattern matchers for the indexed evaluator.

Each pattern (grammar in ``_pattern.py``) compiles once, at index time, to the cheapest
correct matcher for its shape:

- no wildcard: string equality;
- ``**`` alone: always true;
- literal + ``**`` at the end / ``**`` + literal: ``startswith`` / ``endswith``;
- at most two wildcard tokens: a regular expression (Python's backtracking engine is
  at worst quadratic in the name with two unbounded quantifiers, and names are at most
  ``MAX_NAME_LENGTH`` characters);
- more: a Thompson NFA simulation over a state set, O(len(name) x tokens) — never the
  exponential backtracking a regex with many stars can fall into.

This module shares no code with the reference matcher (``_reference.py``).
"""

from __future__ import annotations

import re
from collections.abc import Callable

__all__ = ["Matcher", "compile_pattern", "has_wildcard"]

Matcher = Callable[[str], bool]

_SPLIT = re.compile(r"(/\*\*/|\*\*|\*)")
_REGEX_MAX_WILDCARDS = 2  # see module docstring: bounds backtracking to quadratic


def has_wildcard(pattern: str) -> bool:
    return "*" in pattern


def _parts(pattern: str) -> list[str]:
    """Wildcard tokens and literal runs, in order (empty runs dropped)."""
    return [p for p in _SPLIT.split(pattern) if p]


def compile_pattern(pattern: str) -> Matcher:
    """Compile *pattern* (already validated at load) into a predicate on names."""
    parts = _parts(pattern)
    wild = [p for p in parts if p in ("*", "**", "/**/")]
    if not wild:
        return pattern.__eq__
    if parts == ["**"]:
        return _always
    if len(parts) == 2 and parts[1] == "**" and parts[0] not in wild:
        return _startswith(parts[0])
    if len(parts) == 2 and parts[0] == "**" and parts[1] not in wild:
        return _endswith(parts[1])
    if len(wild) <= _REGEX_MAX_WILDCARDS:
        return _regex_matcher(re.compile(_regex(parts), re.DOTALL))
    return _Nfa(parts)


def _always(name: str) -> bool:
    return True


def _startswith(prefix: str) -> Matcher:
    def match(name: str) -> bool:
        return name.startswith(prefix)

    return match


def _endswith(suffix: str) -> Matcher:
    def match(name: str) -> bool:
        return name.endswith(suffix)

    return match


def _regex_matcher(compiled: re.Pattern[str]) -> Matcher:
    fullmatch = compiled.fullmatch

    def match(name: str) -> bool:
        return fullmatch(name) is not None

    return match


def _regex(parts: list[str]) -> str:
    out = []
    for part in parts:
        if part == "/**/":
            out.append("/(?:.*/)?")
        elif part == "**":
            out.append(".*")
        elif part == "*":
            out.append("[^/]*")
        else:
            out.append(re.escape(part))
    return "".join(out)


# NFA instructions: (op, arg). "c": consume arg; "s": loop on non-"/" then go on;
# "g": loop on any char then go on; "e": go on, or jump forward by arg (epsilon only).
_Instr = tuple[str, int | str]


class _Nfa:
    """A Thompson NFA for one pattern; ``__call__`` simulates it over a state set."""

    __slots__ = ("end", "prog")

    def __init__(self, parts: list[str]) -> None:
        prog: list[_Instr] = []
        for part in parts:
            if part == "/**/":
                # "/" then either nothing more, or any run followed by "/"
                prog += [("c", "/"), ("e", 3), ("g", 0), ("c", "/")]
            elif part == "**":
                prog.append(("g", 0))
            elif part == "*":
                prog.append(("s", 0))
            else:
                prog += [("c", ch) for ch in part]
        self.prog = prog
        self.end = len(prog)

    def _close(self, states: set[int]) -> set[int]:
        todo = list(states)
        while todo:
            pc = todo.pop()
            if pc >= self.end:
                continue
            op, arg = self.prog[pc]
            nexts: tuple[int, ...] = ()
            if op in ("s", "g"):
                nexts = (pc + 1,)
            elif op == "e":
                assert isinstance(arg, int)
                nexts = (pc + 1, pc + arg)
            for nxt in nexts:
                if nxt not in states:
                    states.add(nxt)
                    todo.append(nxt)
        return states

    def __call__(self, name: str) -> bool:
        states = self._close({0})
        for ch in name:
            step: set[int] = set()
            for pc in states:
                if pc >= self.end:
                    continue
                op, arg = self.prog[pc]
                if (op == "c" and arg == ch) or (op == "s" and ch != "/") or op == "g":
                    step.add(pc + 1 if op == "c" else pc)
            if not step:
                return False
            states = self._close(step)
        return self.end in states
