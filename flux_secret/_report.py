"""What was masked, by secret name, without any value: for the evidence log."""

from __future__ import annotations

import threading
import typing
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["RedactionReport"]


@typing.final
@dataclass(frozen=True, slots=True)
class RedactionReport:
    """Counts of masked regions per secret name (``detected:<detector>`` for the
    detection layer). A region that merges several secrets counts once for each.

    Guarantee: holds names and counts only — never a value, an offset or a length.

    Not guaranteed: names are the caller's labels; a caller who names a secret after
    its value defeats this (the redactor refuses a name that contains the value).
    """

    counts: tuple[tuple[str, int], ...] = ()

    @property
    def total(self) -> int:
        """Masked regions counted over all names."""
        return sum(n for _, n in self.counts)

    def as_dict(self) -> dict[str, int]:
        """The counts as a plain mapping (e.g. for a JSON evidence record)."""
        return dict(self.counts)


@typing.final
class _Tally:
    """A thread-safe running count that snapshots into a :class:`RedactionReport`."""

    __slots__ = ("_counts", "_lock")

    def __init__(self) -> None:
        self._counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def add(self, names: Iterable[tuple[str, ...]]) -> None:
        local: Counter[str] = Counter()
        for group in names:
            local.update(group)
        if local:
            with self._lock:
                self._counts.update(local)

    def report(self) -> RedactionReport:
        with self._lock:
            return RedactionReport(tuple(sorted(self._counts.items())))
