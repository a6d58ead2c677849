"""Host capability checks for tests. Skip only for what the host lacks."""

from __future__ import annotations

import os

import pytest

REQUIRE_ALL = os.environ.get("FLUX_TEST_REQUIRE_ALL") == "1"


def require(available: bool, what: str) -> None:
    """Skip (or, under ``FLUX_TEST_REQUIRE_ALL=1``, fail) when *what* is missing."""
    if available:
        return
    if REQUIRE_ALL:
        pytest.fail(f"capability required under FLUX_TEST_REQUIRE_ALL=1: {what}")
    pytest.skip(f"host lacks: {what}")
