"""The metrics capability: host figures, each measured or reported unavailable."""

from __future__ import annotations

import os
import time
import typing
from dataclasses import dataclass

__all__ = ["Metric", "Metrics", "MetricsPort", "measure_host"]


@typing.final
@dataclass(frozen=True, slots=True)
class Metric:
    """One figure. Exactly one of ``value`` and ``unavailable`` is set: a figure that
    could not be measured says why and is never reported as zero."""

    value: float | None
    unit: str
    unavailable: str | None = None

    def __post_init__(self) -> None:
        if (self.value is None) == (self.unavailable is None):
            raise ValueError("a Metric has either a value or an unavailable reason")


@typing.final
@dataclass(frozen=True, slots=True)
class Metrics:
    """Host figures at one instant (``taken_at``: seconds since the epoch)."""

    taken_at: float
    cpu_percent: Metric
    load_1m: Metric
    memory_used: Metric
    memory_total: Metric
    swap_used: Metric
    disk_used: Metric
    disk_total: Metric
    uptime: Metric


@typing.runtime_checkable
class MetricsPort(typing.Protocol):
    def metrics(self) -> Metrics: ...


def _probe(unit: str, read: typing.Callable[[], float]) -> Metric:
    try:
        return Metric(float(read()), unit)
    except Exception as exc:  # any failure is "unavailable", with its reason
        return Metric(None, unit, unavailable=f"{type(exc).__name__}: {exc}"[:200])


def measure_host(disk_path: str | os.PathLike[str] = "/") -> Metrics:
    """Measure this host with psutil. Guarantee: each figure is either measured now or
    carries the reason it could not be (never a default of 0). Not guaranteed: a
    consistent snapshot across figures."""
    import psutil

    def uptime() -> float:
        return time.time() - psutil.boot_time()

    return Metrics(
        taken_at=time.time(),
        cpu_percent=_probe("percent", lambda: psutil.cpu_percent(interval=0.05)),
        load_1m=_probe("load", lambda: os.getloadavg()[0]),
        memory_used=_probe("bytes", lambda: psutil.virtual_memory().used),
        memory_total=_probe("bytes", lambda: psutil.virtual_memory().total),
        swap_used=_probe("bytes", lambda: psutil.swap_memory().used),
        disk_used=_probe("bytes", lambda: psutil.disk_usage(os.fspath(disk_path)).used),
        disk_total=_probe("bytes", lambda: psutil.disk_usage(os.fspath(disk_path)).total),
        uptime=_probe("seconds", uptime),
    )
