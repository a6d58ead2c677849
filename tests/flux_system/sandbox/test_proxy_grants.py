"""Bad proxy grants are refused when a ``System`` is made, as typed errors.

With the old code a bad ``allow_hosts`` pattern or ``allow_private`` CIDR (from the
settings, ``--allow-host``/``--allow-private``, or a profile) passed
``Sandbox.resolve`` and raised a bare ``ValueError`` out of every ``System.run``
(``flux exec`` printed a traceback and exited 1). They are checked where the
confinement is made, not in ``Sandbox.resolve``: that is light (``flux doctor``
resolves every built-in profile without importing the egress guard).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from flux_system import SandboxReason, SandboxUnavailableError, System, Workspace
from flux_system.sandbox import Sandbox, SandboxSettings
from flux_system.sandbox._profile import profile_dirs
from tests.flux_system.sandbox._support import require_bwrap


@pytest.mark.parametrize(
    ("hosts", "cidrs", "layer"),
    [
        (("[::1]",), (), "allow_hosts"),
        (("ok.example", "bad host"), (), "allow_hosts"),
        ((), ("not-a-cidr",), "allow_private"),
        ((), ("10.0.0.0/33",), "allow_private"),
    ],
)
def test_bad_settings_grant_is_refused_at_confine(
    hosts: tuple[str, ...], cidrs: tuple[str, ...], layer: str, tmp_path: Path
) -> None:
    require_bwrap()
    settings = SandboxSettings(mode="on", network="proxy", allow_hosts=hosts, allow_private=cidrs)
    sandbox = Sandbox.resolve(settings)
    with Workspace(tmp_path) as ws, pytest.raises(SandboxUnavailableError) as err:
        System(ws, sandbox=sandbox)
    assert err.value.reason is SandboxReason.BAD_SETTING
    assert err.value.layer == layer
    assert str(err.value).startswith(layer)


def test_bad_profile_grant_names_file_and_key(tmp_path: Path) -> None:
    text = (profile_dirs()[0] / "net-proxy.toml").read_text()
    text = text.replace("allow_private = []", 'allow_private = ["10.0.0.0/40"]')
    assert "10.0.0.0/40" in text
    require_bwrap()
    path = tmp_path / "bad.toml"  # outside the workspace (decision 0120)
    path.write_text(text)
    (tmp_path / "ws").mkdir()
    sandbox = Sandbox.resolve(SandboxSettings(mode="on", profile=str(path)))
    with Workspace(tmp_path / "ws") as ws, pytest.raises(SandboxUnavailableError) as err:
        System(ws, sandbox=sandbox)
    assert err.value.reason is SandboxReason.BAD_PROFILE
    assert err.value.layer == f"{path}:network.allow_private"


def test_grants_are_not_checked_without_the_proxy(tmp_path: Path) -> None:
    require_bwrap()
    # network none: the patterns are never used, so nothing imports the egress guard
    sb = Sandbox.resolve(SandboxSettings(mode="on", network="none", allow_hosts=("[::1]",)))
    assert sb.network == "none"
    with Workspace(tmp_path) as ws:
        System(ws, sandbox=sb).close()


def test_control_good_grants_resolve_and_run(tmp_path: Path) -> None:
    require_bwrap()
    settings = SandboxSettings(
        mode="require",
        network="proxy",
        allow_hosts=("ok.example", "*.ok.example", "::1"),
        allow_private=("10.0.0.0/8", "fd00::/8"),
    )
    sb = Sandbox.resolve(settings)
    with Workspace(tmp_path) as ws, System(ws, sandbox=sb) as system:
        assert system.run(["/bin/true"], timeout=60).exit_code == 0
