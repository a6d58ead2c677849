"""Crash test: a child appending in a loop is SIGKILLed at random moments; every time
the log opens, verifies, and has lost at most the record in flight."""

from __future__ import annotations

import os
import random
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

from flux_evidence import EvidenceLog, verify

TRIALS = 30
# Mostly small records, now and then a 256 KiB one (a kill may land inside its write);
# a short pause per append keeps the log small so each reopen stays cheap.
CHILD = """
import os, sys, time
from flux_evidence import EvidenceLog
log = EvidenceLog.open(sys.argv[1], fsync=sys.argv[2])
start = sum(1 for r in log if r.kind == "tick")
i = start
big = "x" * (256 * 1024)
out = sys.stdout.fileno()
while True:
    log.append("tick", {"i": i, "pad": big if i % 10 == 5 else ""})
    os.write(out, b"%d\\n" % i)
    i += 1
    time.sleep(0.0005)
"""


def _acked(stdout: int, deadline: float, want: int) -> list[int]:
    """Read acknowledged indices until *want* arrived (or the child stopped)."""
    buf = b""
    while buf.count(b"\n") < want and time.monotonic() < deadline:
        ready, _, _ = select.select([stdout], [], [], 0.5)
        if ready:
            chunk = os.read(stdout, 65536)
            if not chunk:
                break
            buf += chunk
    return [int(x) for x in buf.split(b"\n") if x]


def _drain(stdout: int) -> list[int]:
    buf = b""
    while chunk := os.read(stdout, 65536):
        buf += chunk
    return [int(x) for x in buf.split(b"\n") if x]


def test_sigkill_loses_at_most_the_record_in_flight(tmp_path: Path) -> None:
    path = tmp_path / "ev.jsonl"
    rng = random.Random(2024)
    expected = 0  # ticks known durable so far
    recoveries = 0
    for trial in range(TRIALS):
        mode = ("never", "batch", "always")[trial % 3]
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(path), mode], stdout=subprocess.PIPE
        )
        assert child.stdout is not None
        fd = child.stdout.fileno()
        try:
            acked = _acked(fd, time.monotonic() + 30, rng.randint(1, 12))
            time.sleep(rng.random() * 0.005)  # a random moment, not just after an ack
            child.send_signal(signal.SIGKILL)
            acked += _drain(fd)
        finally:
            child.kill()
            child.wait()
            child.stdout.close()
        assert child.returncode == -signal.SIGKILL
        if acked:
            assert acked == list(range(expected, acked[-1] + 1))
        acknowledged = len(acked)

        with EvidenceLog.open(path) as log:  # recovers a torn tail, if any
            head = log.head()
            ticks = [r.data["i"] for r in log if r.kind == "tick"]
            recoveries += sum(1 for r in log if r.kind == "recovery") > 0
        verify(path, expect_head=head)
        # Every acknowledged record survived, and at most one more (the one in flight).
        assert ticks == list(range(len(ticks)))
        assert expected + acknowledged <= len(ticks) <= expected + acknowledged + 1
        expected = len(ticks)
    assert expected > TRIALS
