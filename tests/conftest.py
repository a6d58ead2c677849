"""Shared test configuration.

- Hypothesis profiles: ``ci`` (bounded, derandomized; the default) and ``deep``
  (select with ``HYPOTHESIS_PROFILE=deep``) for local hunting.
- ``FLUX_TEST_REQUIRE_ALL=1`` turns every skip into a failure: CI has every
  capability, so a skip there hides a missing feature.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    max_examples=60,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.register_profile(
    "deep",
    max_examples=5000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

REQUIRE_ALL = os.environ.get("FLUX_TEST_REQUIRE_ALL") == "1"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    outcome = yield
    report = outcome.get_result()
    # An expected failure (xfail, strict for open escape findings) is no skipped capability.
    if REQUIRE_ALL and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"skipped under FLUX_TEST_REQUIRE_ALL=1: {reason}"
