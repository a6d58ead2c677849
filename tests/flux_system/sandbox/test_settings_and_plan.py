"""SandboxSettings validation, and the backend/layer plan for a given host snapshot.

``plan`` is a pure function of (settings, profile, host probe): the snapshots below are
the probe results of hosts this machine is not (no bwrap, no Landlock), so the choice
logic is tested for them too; the real backends are tested against this host elsewhere.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from flux_system.sandbox import SandboxSettings, load_profile
from flux_system.sandbox._host import BwrapInfo, HostInfo
from flux_system.sandbox._layers import plan, report_of

FULL = HostInfo(
    bwrap=BwrapInfo("/usr/bin/bwrap", "0.8.0", True, True, ""),
    userns=True,
    userns_reason="",
    apparmor_restricts_userns=False,
    landlock_abi=7,
    seccomp=True,
    seccomp_notify=True,
    seccomp_reason="",
    libseccomp_version="2.5.4",
    cgroup="hybrid",
    tree_cgroups=True,
    euid=0,
)
NO_BWRAP = replace(
    FULL, bwrap=BwrapInfo(None, None, False, False, "bwrap not found (install bubblewrap)", "none")
)
NOTHING = replace(NO_BWRAP, landlock_abi=0, seccomp=False, seccomp_reason="no libseccomp")


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"mode": "maybe"}, ValueError),
        ({"backend": "docker"}, ValueError),
        ({"network": "wifi"}, ValueError),
        ({"read_only": ("relative/path",)}, ValueError),
        ({"read_write": "/a/string"}, TypeError),
        ({"allow_hosts": "example.com"}, TypeError),
        ({"allow_home_workspace": "yes"}, TypeError),
        ({"audit": 1}, TypeError),
        ({"profile": ""}, TypeError),
    ],
)
def test_settings_refuse_bad_values(kwargs: dict[str, object], error: type[Exception]) -> None:
    with pytest.raises(error):
        SandboxSettings(**kwargs)  # type: ignore[arg-type]


def test_full_host_default() -> None:
    p = plan(SandboxSettings(), load_profile("default"), FULL)
    assert (p.backend, sorted(p.active), p.missing) == ("bwrap", ["bubblewrap", "seccomp"], ())


def test_no_bwrap_require_names_bubblewrap() -> None:
    p = plan(SandboxSettings(mode="require"), load_profile("default"), NO_BWRAP)
    # seccomp has no backend to ride on either; resolve() names the first: bubblewrap
    assert p.missing == ("bubblewrap", "seccomp")
    assert "install bubblewrap" in p.reasons["bubblewrap"]


def test_no_bwrap_on_falls_back_to_landlock_and_says_so() -> None:
    settings = SandboxSettings(mode="on")
    p = plan(settings, load_profile("default"), NO_BWRAP)
    assert (p.backend, sorted(p.active)) == ("landlock", ["landlock", "seccomp"])
    rep = report_of(settings, load_profile("default"), NO_BWRAP, p)
    assert rep.missing == ("bubblewrap",)
    assert rep.guarantee("pid_namespace").enforced is False


def test_nothing_available_on_runs_unconfined_and_reports_it() -> None:
    settings = SandboxSettings(mode="on")
    p = plan(settings, load_profile("default"), NOTHING)
    assert (p.backend, p.active) == ("none", frozenset())
    rep = report_of(settings, load_profile("default"), NOTHING, p)
    assert rep.missing == ("bubblewrap", "seccomp")
    enforced = [g.name for g in rep.guarantees if g.enforced]
    assert enforced == ["process_tree"]  # the process layer's own pids cgroup (root)


def test_strict_without_landlock_is_missing_landlock() -> None:
    p = plan(SandboxSettings(), load_profile("strict"), replace(FULL, landlock_abi=0))
    assert p.missing == ("landlock",)


def test_auto_picks_landlock_only_where_the_profile_admits_it(tmp_path: object) -> None:
    from pathlib import Path

    path = Path(str(tmp_path)) / "ll.toml"
    path.write_text('require = ["landlock", "seccomp"]\n[filesystem]\nread_only = ["/usr"]\n')
    p = plan(SandboxSettings(mode="require"), load_profile(str(path)), NO_BWRAP)
    assert (p.backend, p.missing) == ("landlock", ())


def test_proxy_without_a_launcher_interpreter_is_missing_proxy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import flux_system.sandbox._layers as layers

    monkeypatch.setattr(layers, "launcher_python", lambda: (None, "no interpreter"))
    p = plan(SandboxSettings(), load_profile("net-proxy"), FULL)
    assert p.missing == ("proxy",) and p.network == "none"
