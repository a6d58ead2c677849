"""How network ``proxy`` is planned on each backend, from host facts (``plan`` is a pure
function of the settings, the profile and a ``HostInfo``: hosts without bubblewrap are
described, not simulated by patching the probe)."""

from __future__ import annotations

import dataclasses

import pytest

from flux_system.sandbox import SandboxSettings, load_profile
from flux_system.sandbox._host import BwrapInfo, HostInfo, probe
from flux_system.sandbox._layers import plan


def _host(*, bwrap: bool) -> HostInfo:
    real = probe(trial=False)
    info = BwrapInfo("/usr/bin/bwrap", "0.8.0", True, bwrap, "" if bwrap else "not installed")
    return dataclasses.replace(
        real, bwrap=info, userns=True, landlock_abi=max(real.landlock_abi, 4), seccomp=True
    )


@pytest.mark.parametrize("network", ["none", "proxy"])
def test_mode_on_without_bubblewrap_still_confines_with_landlock(network: str) -> None:
    """Regression: the proxy check's ``elif`` once caught every host without bwrap and
    planned backend ``none`` — an unsandboxed run — even with Landlock active."""
    settings = SandboxSettings(mode="on", profile="default", network=network)
    p = plan(settings, load_profile("default"), _host(bwrap=False))
    assert p.backend == "landlock"
    assert "landlock" in p.active
    assert p.network == "none"  # proxy has no namespace to live in: no network at all


def test_proxy_with_bubblewrap_keeps_the_proxy() -> None:
    settings = SandboxSettings(mode="require", profile="net-proxy")
    p = plan(settings, load_profile("net-proxy"), _host(bwrap=True))
    assert (p.backend, p.network) == ("bwrap", "proxy")
    assert p.python is not None  # the launcher that starts the forwarder
    assert "proxy" not in p.missing


def test_proxy_on_landlock_is_missing_under_require() -> None:
    settings = SandboxSettings(mode="require", profile="net-proxy", backend="landlock")
    p = plan(settings, load_profile("net-proxy"), _host(bwrap=True))
    assert "proxy" in p.missing
    assert p.network == "none"
