"""Regressions from an adversarial review of flux_evidence: every record that ``append``
acknowledges can be read back anywhere, and the verifiers' loops and checks are bounded
and fail closed on hostile input."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from flux_evidence import EvidenceError, EvidenceLog, EvidenceReason, verify
from flux_evidence._canonical import MAX_DATA_DEPTH

# How much deeper in its stack a reader may be than the appender was (a framework, a
# CLI, a test runner): the records an append acknowledged must still read back there.
READER_EXTRA_FRAMES = 200


def _nested(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


def _in_fresh_thread(body: Callable[[], Any]) -> Any:
    """Run *body* in a new thread (a shallow stack); return its result or exception."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(body())
        except Exception as exc:  # handed back to the test
            out.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return out[0]


def _deeper(frames: int, body: Callable[[], Any]) -> Any:
    return body() if frames == 0 else _deeper(frames - 1, body)


@pytest.mark.parametrize(
    "depth", [MAX_DATA_DEPTH, MAX_DATA_DEPTH + 1, sys.getrecursionlimit() - 60]
)
def test_acknowledged_nested_record_reads_back_from_a_deeper_stack(
    tmp_path: Path, depth: int
) -> None:
    """An appender with a shallow stack must not get a record acknowledged that a reader
    deeper in its stack cannot decode: that made verify report tampering (BAD_JSON) and
    the writer's own reopen fail on a log nobody touched."""
    path = tmp_path / "log.jsonl"
    value = _nested(depth)

    def append() -> Any:
        with EvidenceLog.open(path, fsync="never") as log:
            return log.append("deep", value)

    outcome = _in_fresh_thread(append)
    if depth <= MAX_DATA_DEPTH:
        assert not isinstance(outcome, BaseException), outcome
    if isinstance(outcome, EvidenceError):
        assert outcome.reason is EvidenceReason.UNENCODABLE
        assert depth > MAX_DATA_DEPTH
        return
    assert not isinstance(outcome, BaseException), outcome

    def read_back() -> list[Any]:
        verify(path)
        with EvidenceLog.open(path, fsync="never") as log:
            return [r.data for r in log.query(kind="deep")]

    assert _deeper(READER_EXTRA_FRAMES, read_back) == [value]
