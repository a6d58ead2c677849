"""A bounded smoke run of the atheris harness fuzz/fuzz_url_guard.py.

In-process: the harness's property check over a few thousand seeded mutations of its
seed corpus. Out of process: atheris itself for a fixed number of runs.
"""

from __future__ import annotations

import random
from types import ModuleType

from tests._fuzz import load_harness, run_atheris

ALPHABET = [
    "@", "\\", "%", "%25", ":", "[", "]", ".", "..", "0x", "0", "07", "\u3002", "\uff0e",
    "\x00", "\t", " ", "#", "?", "/", "xn--", "::ffff:", "127", "255", "localhost",
    "\u00fc", "\u200b", "-", "_", "65535", "99999", "\u2460", "A",
]  # fmt: skip
RUNS = 3000  # a few seconds at most; the real hunting is `python fuzz/fuzz_url_guard.py`


def _harness() -> ModuleType:
    return load_harness("fuzz_url_guard")


def _mutate(rng: random.Random, text: str) -> str:
    chars = list(text)
    for _ in range(rng.randint(1, 4)):
        op = rng.random()
        pos = rng.randint(0, len(chars))
        if op < 0.5:
            chars[pos:pos] = list(rng.choice(ALPHABET))
        elif op < 0.8 and chars:
            del chars[min(pos, len(chars) - 1)]
        else:
            chars[pos:pos] = [chr(rng.randint(0, 0x2FFF))]
    return "".join(chars)


def test_harness_properties_hold_on_mutated_seeds() -> None:
    harness = _harness()
    rng = random.Random(20261129)
    for i in range(RUNS):
        seed = harness.SEEDS[i % len(harness.SEEDS)]
        harness.check_url(_mutate(rng, seed))
        harness.test_one_input(rng.randbytes(rng.randint(0, 40)))


def test_harness_catches_a_broken_guard() -> None:
    # Negative control: a guard that lets a blocked address through must trip it.
    harness = _harness()
    from flux_system import net

    real = net.guard_url

    def broken(url: str, **kw: object) -> net.GuardedTarget:
        target = real(url, **kw)  # type: ignore[arg-type]
        return net.GuardedTarget(
            target.url,
            target.scheme,
            target.host,
            target.port,
            (
                *target.addresses,
                harness.POOL[3],
            ),
        )

    net.guard_url = broken
    try:
        try:
            harness.check_url("http://example.com/")
        except AssertionError:
            return
        raise AssertionError("the harness did not notice a blocked address")
    finally:
        net.guard_url = real


def test_atheris_runs_the_harness() -> None:
    run_atheris("fuzz_url_guard", runs=400, timeout=60)
