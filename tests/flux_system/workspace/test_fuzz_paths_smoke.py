"""A bounded smoke run of the atheris harness fuzz/fuzz_workspace_paths.py.

In-process: the harness's properties over seeded mutations of its seed paths (both
resolvers, canary outside, outside snapshot). Out of process: atheris itself for a
fixed number of runs. A negative control shows the harness notices an escape.
"""

from __future__ import annotations

import random
from types import ModuleType

import pytest

from tests._fuzz import load_harness, run_atheris

ALPHABET = ["/", "..", ".", "//", "esc", "abs", "chain1", "loop1", "proc", "fdlink", "dir",
            "sub", "up", "@named", "a.txt", "\x00", "\n", "\u00e9", "~", "*", " "]  # fmt: skip
RUNS = 400  # each input runs 3 reads x 2 resolvers plus writes; a few seconds at most


def _harness() -> ModuleType:
    return load_harness("fuzz_workspace_paths")


def _mutate(rng: random.Random, text: str) -> str:
    parts = text.split("/")
    for _ in range(rng.randint(1, 4)):
        pos = rng.randint(0, len(parts))
        if rng.random() < 0.7 or not parts:
            parts.insert(pos, rng.choice(ALPHABET))
        else:
            del parts[min(pos, len(parts) - 1)]
    return "/".join(parts)


def test_harness_properties_hold_on_mutated_seeds() -> None:
    module = _harness()
    rng = random.Random(20261130)
    with module.Harness() as h:
        for i in range(RUNS):
            h.check_path(_mutate(rng, module.SEEDS[i % len(module.SEEDS)]))
            module.check_input(h, rng.randbytes(rng.randint(0, 24)))


def test_harness_catches_an_escape() -> None:
    # Negative control: an unconfined workspace in place of the walk resolver must trip it.
    module = _harness()
    from flux_system import Workspace

    with module.Harness() as h:
        h.workspaces["walk"].close()
        h.workspaces["walk"] = Workspace(h.root, unconfined=True)
        with pytest.raises(AssertionError):
            h.check_path("../outside/canary")


def test_atheris_runs_the_harness() -> None:
    run_atheris("fuzz_workspace_paths", runs=200)
