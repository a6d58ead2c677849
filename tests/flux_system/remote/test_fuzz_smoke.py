"""A bounded smoke run of the atheris harness fuzz/fuzz_port_frames.py."""

from __future__ import annotations

import random

from tests._fuzz import load_harness, run_atheris

RUNS = 3000


def test_harness_properties_hold_on_mutated_seeds() -> None:
    harness = load_harness("fuzz_port_frames")
    rng = random.Random(20261201)
    for i in range(RUNS):
        seed = bytearray(harness._frame(harness.SEEDS[i % len(harness.SEEDS)]))
        for _ in range(rng.randint(0, 4)):
            pos = rng.randrange(len(seed))
            seed[pos] = rng.randrange(256)
        harness.check_bytes(bytes(seed))
        harness.test_one_input(rng.randbytes(rng.randint(0, 64)))


def test_harness_catches_a_decoder_that_drops_a_split_frame() -> None:
    harness = load_harness("fuzz_port_frames")
    from flux_system.remote import _frame

    real = _frame.FrameDecoder.feed

    def forgetful(self: _frame.FrameDecoder, data: bytes) -> list[dict[str, object]]:
        out = real(self, data)
        self._buf.clear()  # loses a partial frame at the end of each feed
        self._need = None
        return out

    _frame.FrameDecoder.feed = forgetful  # type: ignore[method-assign]
    try:
        for seed in harness.SEEDS:  # some split lands inside a frame
            try:
                harness.check_bytes(harness._frame(seed) * 2)
            except AssertionError:
                return
        raise AssertionError("the harness did not notice a lost message")
    finally:
        _frame.FrameDecoder.feed = real  # type: ignore[method-assign]


def test_atheris_runs_the_harness() -> None:
    run_atheris("fuzz_port_frames", runs=400, timeout=90)


def test_harness_catches_a_binary_decoder_that_trusts_the_size() -> None:
    harness = load_harness("fuzz_port_frames")
    from flux_system.remote import _binary

    real = _binary.decode_binary

    def trusting(body: bytes) -> _binary.BinaryResult | _binary.BinaryChunk:
        got = real(body)
        return got._replace(data=got.data + b"!")  # more bytes than were sent

    _binary.decode_binary = trusting
    try:
        harness.check_binary(harness.SEEDS[-2])
    except AssertionError:
        return
    finally:
        _binary.decode_binary = real
    raise AssertionError("the harness did not notice a binary decoder that disagrees")
