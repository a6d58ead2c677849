"""The candidate index of the indexed evaluator: which rules a request could match.

Each rule is filed under the keys of *one* dimension, the one that narrows it most:

- ``subject``: its literal subjects after group expansion (only if none is a pattern);
- ``action``: its literal actions (only if none is a pattern);
- ``resource``: per resource pattern, the best of: the literal name itself; the
  *literal prefix* (whole segments before the first segment holding a wildcard, a
  node of a segment trie, which a request walks along its own segments); or a
  *required segment* — a segment of the pattern holding no wildcard, which every
  name the pattern matches holds as a whole segment (its ``/`` neighbours are
  literal, or the ends of the name: ``**/mod3/*.py`` requires ``mod3``); or its
  *literal suffix*, the text after its last wildcard (``**/*.x7`` -> ``.x7``).

"Narrows most" is measured on the policy itself: every key counts the rules that
could be filed under it; a rule goes where its worst key is least shared. A request
then looks up its subject, its action, its exact resource, every trie node along its
path, every one of its segments and its tail at each length a filed suffix has: a
handful of dictionary lookups, and only rules sharing one of those keys come back.

Guarantee: :meth:`CandidateIndex.candidates` returns a superset of the rules whose
subject, action and resource all match (each is filed under keys every match
requires); the caller checks each candidate fully.

Not guaranteed: a short list. A rule none of whose dimensions has a key (wildcard
subjects and actions, and resources that end in a wildcard and have no literal
segment, such as ``ws/*/t{i}-*``) is filed under the trie's root and offered to
every request. A policy with suffix keys of many different lengths costs every
request one lookup per length (at most ``MAX_PATTERN_LENGTH``).
"""

from __future__ import annotations

import typing
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

__all__ = ["CandidateIndex", "IndexedRule"]

# A key: (dimension, value); a trie node's value is its tuple of prefix segments.
_Key = tuple[str, str | tuple[str, ...]]
_SUBJECT, _ACTION, _EXACT, _PREFIX, _SEGMENT, _SUFFIX = "s", "a", "x", "p", "g", "t"


@typing.final
@dataclass(frozen=True, slots=True)
class IndexedRule:
    """What the index needs of a rule: its literal subjects and actions (``None`` when
    one of them is a pattern) and its resource patterns, after group expansion."""

    subjects: frozenset[str] | None
    actions: frozenset[str] | None
    resources: tuple[str, ...]


@dataclass(slots=True)
class _Node:
    rules: list[int] = field(default_factory=list)
    children: dict[str, _Node] = field(default_factory=dict)


def literal_prefix(pattern: str) -> tuple[str, ...]:
    """The whole segments of *pattern* before the first one holding a wildcard."""
    out: list[str] = []
    for segment in pattern.split("/"):
        if "*" in segment:
            break
        out.append(segment)
    return tuple(out)


def required_segments(pattern: str) -> set[str]:
    """Segments every name *pattern* matches holds: non-empty, wildcard-free segments
    of the pattern (a ``/`` of the pattern is matched by a ``/`` of the name, ``/**/``
    included, so the segment is delimited in the name as in the pattern)."""
    return {s for s in pattern.split("/") if s and "*" not in s}


def literal_suffix(pattern: str) -> str:
    """The literal text after the last wildcard of *pattern*: every name it matches
    ends with it (``**/*.py`` -> ``.py``; empty when a wildcard ends the pattern)."""
    return pattern[pattern.rfind("*") + 1 :]


def _resource_keys(pattern: str) -> list[_Key]:
    if "*" not in pattern:
        return [(_EXACT, pattern)]
    keys: list[_Key] = [(_PREFIX, literal_prefix(pattern))]
    keys += [(_SEGMENT, s) for s in sorted(required_segments(pattern))]
    tail = literal_suffix(pattern)
    if tail:
        keys.append((_SUFFIX, tail))
    return keys


@typing.final
class CandidateIndex:
    """Rules filed by subject, action or resource keys (see the module docstring).

    Args:
        rules: the rules, identified by their position in this sequence.
    """

    __slots__ = (
        "_actions",
        "_exact",
        "_root",
        "_segments",
        "_subjects",
        "_suffix_lengths",
        "_suffixes",
    )

    def __init__(self, rules: Sequence[IndexedRule]) -> None:
        self._subjects: dict[str, list[int]] = {}
        self._actions: dict[str, list[int]] = {}
        self._exact: dict[str, list[int]] = {}
        self._segments: dict[str, list[int]] = {}
        self._suffixes: dict[str, list[int]] = {}
        self._root = _Node()
        options = [self._options(rule) for rule in rules]
        counts: Counter[_Key] = Counter()
        for opts in options:
            counts.update({key for keys in opts for choice in keys for key in choice})
        for number, opts in enumerate(options):
            for key in self._choose(opts, counts):
                self._file(key, number)
        # a request looks up its own tail at each length some suffix key has
        self._suffix_lengths = sorted({len(s) for s in self._suffixes}, reverse=True)

    @staticmethod
    def _options(rule: IndexedRule) -> list[list[list[_Key]]]:
        """Per dimension that has keys: per pattern, the keys it could be filed under."""
        out: list[list[list[_Key]]] = []
        if rule.subjects is not None:
            out.append([[(_SUBJECT, s)] for s in sorted(rule.subjects)])
        if rule.actions is not None:
            out.append([[(_ACTION, a)] for a in sorted(rule.actions)])
        out.append([_resource_keys(p) for p in rule.resources])
        return out

    @staticmethod
    def _choose(options: list[list[list[_Key]]], counts: Counter[_Key]) -> list[_Key]:
        """The keys of the dimension whose most shared key is least shared, each
        pattern taking its least shared key."""
        best: list[_Key] = []
        best_cost = -1
        for per_pattern in options:
            keys = [min(choice, key=lambda k: (counts[k], k)) for choice in per_pattern]
            cost = max((counts[k] for k in keys), default=0)
            if best_cost < 0 or cost < best_cost:
                best, best_cost = keys, cost
        return best

    def _file(self, key: _Key, number: int) -> None:
        kind, value = key
        if isinstance(value, tuple):  # _PREFIX
            node = self._root
            for segment in value:
                node = node.children.setdefault(segment, _Node())
            node.rules.append(number)
            return
        table = {
            _SUBJECT: self._subjects,
            _ACTION: self._actions,
            _EXACT: self._exact,
            _SEGMENT: self._segments,
            _SUFFIX: self._suffixes,
        }[kind]
        table.setdefault(value, []).append(number)

    def candidates(self, subject: str, action: str, resource: str) -> set[int]:
        """Numbers of the rules sharing a key with the request (a superset of matches)."""
        found: set[int] = set(self._root.rules)
        lists: Iterable[list[int] | None] = (
            self._subjects.get(subject),
            self._actions.get(action),
            self._exact.get(resource),
        )
        for rules in lists:
            if rules:
                found.update(rules)
        segments = resource.split("/")
        node = self._root
        for segment in segments:
            child = node.children.get(segment)
            if child is None:
                break
            found.update(child.rules)
            node = child
        by_segment = self._segments
        for segment in set(segments):
            rules = by_segment.get(segment)
            if rules:
                found.update(rules)
        by_suffix = self._suffixes
        for length in self._suffix_lengths:
            if length <= len(resource):
                rules = by_suffix.get(resource[-length:])
                if rules:
                    found.update(rules)
        return found
