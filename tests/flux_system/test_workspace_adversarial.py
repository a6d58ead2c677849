"""Third (adversarial) review of the Workspace: one regression test per hole found.

See docs/decisions/0014-workspace-review.md (section "Third review"). Nothing here is
mocked: gates on constructors or os functions only decide *when* something happens.
"""

from __future__ import annotations

import os
import threading

import pytest

from flux_system import _resolve


class _GatedHow(_resolve._OpenHow):
    """An ``open_how`` whose construction waits until two threads construct at once."""

    gate = threading.Barrier(2, timeout=5)

    def __init__(self, *args: int) -> None:
        self.gate.wait()
        super().__init__(*args)


def test_openat2_how_handed_out_is_the_one_kept_alive(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two threads building the ``open_how`` of one (flags, mode) for the first time.

    The address given to ``openat2`` must be that of a struct the table keeps alive:
    otherwise the kernel reads freed memory (flags and *resolve* bits included, so
    ``RESOLVE_BENEATH`` could be lost).
    """
    flags = os.O_PATH | os.O_CLOEXEC | os.O_NOATIME | os.O_DIRECTORY  # a key nothing else uses
    monkeypatch.setattr(_resolve, "_OpenHow", _GatedHow)
    monkeypatch.setattr(_resolve, "_hows", {})
    got: list[int] = []

    def build() -> None:
        got.append(_resolve._how(flags, 0))

    threads = [threading.Thread(target=build) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert len(got) == 2
    kept = _resolve._hows[(flags, 0)]
    assert got == [kept[1], kept[1]]
