"""A total deadline expressed as httpcore's per-phase timeouts.

httpx/httpcore timeouts are per phase (connect, each read, each write, pool wait).
:class:`DeadlineTimeouts` is the mapping httpcore reads them from, and answers each
lookup with ``min(phase timeout, time left before the deadline)``. httpcore looks a
phase up once and reuses the value for every read of a response head (and loops over
``1xx`` responses without bound), so that alone does not make the deadline total: the
pinned network streams also cap every socket operation by the time left
(:func:`._pins.capped`), which stops a server dripping header bytes or flooding
``100 Continue``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Final, final

__all__ = ["MIN_TIMEOUT", "DeadlineTimeouts"]

#: What an expired deadline turns into: a timeout short enough to fail the next socket
#: operation at once (0 would mean non-blocking, which httpcore does not expect).
MIN_TIMEOUT: Final = 0.001

_PHASES: Final = ("connect", "read", "write", "pool")


@final
class DeadlineTimeouts(Mapping[str, float | None]):
    """Per-phase timeouts capped by a monotonic deadline (see the module docstring)."""

    __slots__ = ("_base", "_clock", "deadline")

    def __init__(
        self,
        base: Mapping[str, float | None],
        *,
        deadline: float,
        clock: Callable[[], float],
    ) -> None:
        self._base = {k: base.get(k) for k in _PHASES}
        self.deadline = deadline
        self._clock = clock

    def remaining(self) -> float:
        """Seconds left (never below :data:`MIN_TIMEOUT`)."""
        return max(self.deadline - self._clock(), MIN_TIMEOUT)

    def expired(self) -> bool:
        return self._clock() >= self.deadline

    def __getitem__(self, key: str) -> float | None:
        base = self._base[key]
        left = max(self.deadline - self._clock(), MIN_TIMEOUT)
        return left if base is None else min(base, left)

    def get(self, key: str, default: object = None) -> float | None:
        """As ``Mapping.get``; httpcore calls it before every socket operation."""
        if key not in self._base:
            return default  # type: ignore[return-value]
        base = self._base[key]
        left = self.deadline - self._clock()
        left = max(left, MIN_TIMEOUT)
        return left if base is None or base > left else base

    def __iter__(self) -> Iterator[str]:
        return iter(self._base)

    def __len__(self) -> int:
        return len(self._base)
