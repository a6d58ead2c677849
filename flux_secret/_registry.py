"""The registry of secrets behind a redactor, and its matcher snapshots.

Redaction reads an immutable :class:`Snapshot`; registration changes the registry under
a lock and bumps a version, and the next redaction rebuilds the snapshot (once, under
the lock). Rebuilding is tiered so that registering while redacting stays cheap: values
added since the last full build go into a small second automaton, and the full
automaton is rebuilt only when that part outgrows an eighth of it, or after a removal.
Total build work is therefore amortised linear in the number of registrations.
"""

from __future__ import annotations

import threading
import typing
from dataclasses import dataclass

from flux_secret._detect import Detector, DetectorSet
from flux_secret._escapes import EscapeMatcher
from flux_secret._exceptions import RegistrationError, RegistrationReason
from flux_secret._matcher import Interval, Matcher

__all__ = ["Registry", "Snapshot"]

_MAX_SECRETS = 100_000  # registered values: bounds automaton size and rebuild time
_RECENT_MIN = 512  # patterns the small automaton may always hold before a full rebuild


@typing.final
@dataclass(frozen=True, slots=True)
class Snapshot:
    """An immutable view of the registry: its automatons and detectors."""

    version: int
    matchers: tuple[Matcher, ...]
    dset: DetectorSet
    escapes: tuple[EscapeMatcher, ...] = ()

    @property
    def detectors(self) -> tuple[Detector, ...]:
        return self.dset.detectors

    @property
    def longest(self) -> int:
        """The longest pattern, in bytes (0 with no secrets)."""
        return max((m.longest for m in self.matchers), default=0)

    def find(self, data: bytes, *, head: bool = False, more: bool = False) -> list[Interval]:
        """Every occurrence of every pattern in *data* (see :meth:`Matcher.find`), and
        every escaped occurrence of a raw secret (see :meth:`EscapeMatcher.find` for
        *head* and *more*, which a stream passes)."""
        out = self.matchers[0].find(data) if len(self.matchers) == 1 else []
        if len(self.matchers) > 1:
            for matcher in self.matchers:
                out += matcher.find(data)
        for escapes in self.escapes:
            out += escapes.find(data, head=head, more=more)
        return out

    def frontier(self, data: bytes, end: int) -> int:
        """For a stream whose retained *data* ends at absolute *end*: every occurrence
        not yet reported by ``find(data, more=True)`` starts at or after this."""
        frontier = end - max(self.longest - 1, 0)
        for escapes in self.escapes:
            bound = escapes.frontier(data, end)
            if bound is not None:
                frontier = min(frontier, bound)
        return frontier


def _build(entries: list[tuple[str, list[bytes]]]) -> tuple[Matcher, EscapeMatcher, int]:
    """The automaton over every form, and the escape matcher over the raw secrets (the
    first form of each entry, as :func:`variants` orders them)."""
    owners: dict[bytes, set[str]] = {}
    raw: dict[bytes, set[str]] = {}
    for name, forms in entries:
        for form in forms:
            owners.setdefault(form, set()).add(name)
        raw.setdefault(forms[0], set()).add(name)
    patterns = list(owners)
    matcher = Matcher(patterns, [tuple(sorted(owners[p])) for p in patterns])
    escapes = EscapeMatcher(list(raw), [tuple(sorted(raw[p])) for p in raw])
    return matcher, escapes, len(patterns)


@typing.final
class Registry:
    """Secret values by name (several per name), thread-safe."""

    def __init__(self, dset: DetectorSet) -> None:
        self._dset = dset
        self._lock = threading.Lock()
        self._entries: dict[str, list[tuple[int, list[bytes]]]] = {}
        self._count = 0
        self._next_id = 0
        self._serial = 0
        self._version = 0
        self._base: tuple[Matcher, EscapeMatcher] | None = None
        self._base_upto = -1  # values with an id up to this are in the base automaton
        self._base_patterns = 0
        self._removed = False  # a removal since the base build: rebuild it fully
        self._snap = Snapshot(0, (), dset)

    def names(self) -> list[str]:
        with self._lock:
            return sorted(self._entries)

    def add(self, name: str | None, forms: list[bytes]) -> str:
        with self._lock:
            if self._count >= _MAX_SECRETS:
                raise RegistrationError(
                    "too many secrets", reason=RegistrationReason.TOO_MANY, name=name
                )
            if name is None:
                self._serial += 1
                name = f"secret-{self._serial}"
                while name in self._entries:
                    self._serial += 1
                    name = f"secret-{self._serial}"
            self._entries.setdefault(name, []).append((self._next_id, forms))
            self._next_id += 1
            self._count += 1
            self._version += 1
            return name

    def known(self, name: str) -> int:
        """How many values *name* has; raises ``UNKNOWN_NAME`` when none."""
        with self._lock:
            if name not in self._entries:
                raise RegistrationError(
                    "no secret of that name", reason=RegistrationReason.UNKNOWN_NAME, name=name
                )
            return len(self._entries[name])

    def remove(self, name: str, *, oldest: int | None = None) -> None:
        """Forget all values of *name* (or only its *oldest* ones)."""
        with self._lock:
            entries = self._entries.get(name)
            if entries is None:
                raise RegistrationError(
                    "no secret of that name", reason=RegistrationReason.UNKNOWN_NAME, name=name
                )
            cut = len(entries) if oldest is None else oldest
            if cut >= len(entries):
                del self._entries[name]
            else:
                self._entries[name] = entries[cut:]
            self._count -= min(cut, len(entries))
            self._removed = True
            self._version += 1

    def snapshot(self) -> Snapshot:
        snap = self._snap
        if snap.version == self._version:
            return snap
        with self._lock:
            if self._snap.version == self._version:
                return self._snap
            recent = [
                (name, forms)
                for name, values in self._entries.items()
                for vid, forms in values
                if vid > self._base_upto
            ]
            size = sum(len(forms) for _, forms in recent)
            if (
                self._base is None
                or self._removed
                or size > max(_RECENT_MIN, self._base_patterns // 8)
            ):
                everything = [
                    (name, forms) for name, values in self._entries.items() for _, forms in values
                ]
                matcher, escapes, self._base_patterns = _build(everything)
                self._base = (matcher, escapes)
                self._base_upto = self._next_id - 1
                self._removed = False
                tiers = [self._base]
            else:
                matcher, escapes, _ = _build(recent)
                tiers = [self._base, (matcher, escapes)]
            self._snap = Snapshot(
                self._version,
                tuple(m for m, _ in tiers),
                self._dset,
                tuple(e for _, e in tiers),
            )
            return self._snap
