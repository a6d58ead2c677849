"""The bubblewrap backend, for real: what it shows, hides and reports (root here)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import psutil
import pytest

from flux_system import SandboxReason, SandboxUnavailableError, SpawnError, System, Workspace
from flux_system.sandbox import Sandbox, SandboxSettings
from flux_system.sandbox._layers import BWRAP_DENIALS
from tests.flux_system.sandbox._support import require_bwrap, sh


@pytest.fixture(scope="module")
def sandbox() -> Sandbox:
    require_bwrap()
    return Sandbox.resolve(SandboxSettings(mode="require", profile="default"))


def test_true_runs_confined_and_reports_unobservable_denials(system: System) -> None:
    r = system.run(["/bin/true"])
    assert r.exit_code == 0
    assert r.denials is not None
    assert r.denials.observable is False
    assert r.denials.records == ()
    assert r.denials.reason == BWRAP_DENIALS


def test_report_lists_each_guarantee(sandbox: Sandbox) -> None:
    rep = sandbox.report()
    assert rep.backend == "bwrap"
    assert rep.active_layers == ("bubblewrap", "seccomp")
    assert rep.missing == ()
    enforced = {g.name: g.enforced for g in rep.guarantees}
    assert enforced == {
        "filesystem_view": True,
        "file_metadata": True,
        "private_tmp": True,
        "pid_namespace": True,
        "process_tree": True,
        "net_namespace": True,
        "ipc_uts_namespaces": True,
        "user_namespaces_closed": True,
        "seccomp": True,
        "landlock": False,
        "protected_paths": True,
        "denial_reporting": False,
    }
    assert rep.guarantee("landlock").reason == "not required by this profile"
    assert "unobservable" in rep.guarantee("denial_reporting").reason


def test_no_new_privs_no_caps_seccomp_and_own_pid_namespace(system: System) -> None:
    code, out, _ = sh(system, "grep -E '^(NoNewPrivs|CapEff|Seccomp):' /proc/self/status")
    assert code == 0
    assert "NoNewPrivs:\t1" in out
    assert "CapEff:\t0000000000000000" in out
    assert "Seccomp:\t2" in out
    _, listing, _ = sh(system, "ls /proc")
    pids = sorted(int(x) for x in listing.split() if x.isdigit())
    assert pids[0] == 1 and len(pids) < 10  # only the sandbox's own processes


def test_view_is_minimal_and_read_only(system: System, tmp_path: Path) -> None:
    secret = tmp_path / "outside.txt"
    secret.write_text("host secret")
    _code, out, err = sh(
        system,
        f"cat {secret}; ls /etc; echo x > /usr/flux-probe; echo y > /etc/flux-probe; "
        "ls -A $HOME | wc -l; echo ok",
    )
    assert "host secret" not in out
    assert "passwd" not in out.split() and "shadow" not in out.split()
    assert "ld.so.cache" in out.split()
    assert "Read-only file system" in err or "No such file" in err
    assert not os.path.exists("/usr/flux-probe") and not os.path.exists("/etc/flux-probe")
    assert out.strip().endswith("0\nok")  # $HOME is a fresh, empty tmpfs


def test_workspace_writable_at_its_own_path(system: System, ws_path: Path) -> None:
    code, out, _ = sh(system, "pwd; echo hi > made.txt")
    assert code == 0
    assert out.strip() == os.path.realpath(ws_path)
    assert (ws_path / "made.txt").read_text() == "hi\n"


def test_private_tmp(system: System) -> None:
    marker = f"/tmp/flux-sandbox-probe-{os.getpid()}"
    code, _, _ = sh(system, f"echo inside > {marker}")
    assert code == 0
    assert not os.path.exists(marker)


def test_env_never_on_bwraps_command_line(system: System) -> None:
    """bwrap's host-visible argv and its environment hold none of the child's env."""
    secret = "s3cr3t-value-probe"
    child = system.spawn(["/bin/sleep", "30"], env={"FLUX_PROBE": secret})
    try:
        bwraps = [p for p in psutil.Process().children() if p.name() == "bwrap"]
        assert bwraps
        for p in bwraps:
            with open(f"/proc/{p.pid}/cmdline", "rb") as fh:
                cmdline = fh.read()
            with open(f"/proc/{p.pid}/environ", "rb") as fh:
                environ = fh.read()
            assert secret.encode() not in cmdline
            assert cmdline.startswith(b"/usr/bin/bwrap\0--args\0")
            assert environ == b""
    finally:
        child.kill()
        child.join(30)
    r = system.run(["/bin/sh", "-c", "echo $FLUX_PROBE"], env={"FLUX_PROBE": "v"})
    assert r.stdout_text == "v\n"  # the child itself gets its environment


def test_pid_1_is_bwraps_init_with_an_empty_environment(system: System) -> None:
    r = system.run(
        ["/bin/sh", "-c", "tr '\\0' ' ' < /proc/1/cmdline; echo; wc -c < /proc/1/environ"],
        env={"FLUX_PROBE": "s3cr3t"},
    )
    cmdline, size = r.stdout_text.strip().split("\n")
    assert cmdline.startswith("/usr/bin/bwrap --args ")
    assert "s3cr3t" not in cmdline and size.strip() == "0"


def test_the_command_keeps_its_signal_semantics(system: System) -> None:
    """Regression: with --as-pid-1 the command was init and ignored its own SIGTERM."""
    r = system.run(["/bin/sh", "-c", "kill -TERM $$; echo survived"])
    assert r.stdout_text == ""
    assert r.exit_code == 128 + 15  # bwrap passes a signal death on as 128+N


def test_no_zombie_is_left_by_bwraps_init(system: System) -> None:
    """Regression: bwrap's init outlives bwrap; an adopted zombie was left per run."""
    for _ in range(5):
        system.run(["/bin/sh", "-c", "sleep 0.05 & setsid sleep 0.05 & echo"])
    # bwrap's init (a zombie child of ours if unreaped); other tests' children aside
    left = [p for p in psutil.Process().children() if p.name() == "bwrap"]
    assert left == []


def test_no_inherited_fds(system: System) -> None:
    _code, out, _ = sh(system, "ls /proc/self/fd")
    assert sorted(int(x) for x in out.split()) == [0, 1, 2, 3]  # 3: ls's own directory


def test_protected_paths_are_read_only_and_parents_unrenameable(
    system: System, ws_path: Path
) -> None:
    (ws_path / ".git" / "hooks").mkdir(parents=True)
    (ws_path / ".git" / "objects").mkdir()
    (ws_path / ".git" / "config").write_text("[core]\n")
    (ws_path / ".bashrc").write_text("# rc\n")
    (ws_path / ".vscode").mkdir()
    _code, out, err = sh(
        system,
        "touch .git/hooks/pre-commit; echo evil >> .git/config; echo evil >> .bashrc; "
        "touch .vscode/settings.json; mv .git .git-old; mv .git/hooks .git/h2; rm .bashrc; "
        "touch .git/objects/ok .git/index; echo done",
    )
    assert out.strip() == "done"
    assert not (ws_path / ".git" / "hooks" / "pre-commit").exists()
    assert (ws_path / ".git" / "config").read_text() == "[core]\n"
    assert (ws_path / ".bashrc").read_text() == "# rc\n"
    assert not (ws_path / ".vscode" / "settings.json").exists()
    assert not (ws_path / ".git-old").exists() and (ws_path / ".git" / "hooks").is_dir()
    assert "Device or resource busy" in err  # the rename of a mount point
    # .git/objects and .git/index stay writable (git commit works inside)
    assert (ws_path / ".git" / "objects" / "ok").exists()
    assert (ws_path / ".git" / "index").exists()


def test_protected_symlink_is_not_followed(system: System, ws_path: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside-dir"
    outside.mkdir()
    (ws_path / ".vscode").symlink_to(outside)
    _code, _, _ = sh(system, "touch .vscode/x; echo $?")
    assert not (outside / "x").exists()  # the link leads nowhere inside the sandbox


def test_command_outside_the_view_is_not_found(system: System, tmp_path: Path) -> None:
    tool = tmp_path / "tool.sh"
    tool.write_text("#!/bin/sh\necho hi\n")
    tool.chmod(0o755)
    with pytest.raises(SpawnError):
        system.run([str(tool)])


@pytest.mark.parametrize("where", ["home", "root"])
def test_workspace_covering_home_is_refused(
    sandbox: Sandbox, tmp_path: Path, where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "h"
    (root / "me").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(root / "me") if where == "home" else "/")
    ws_root = root if where == "home" else Path("/")
    with Workspace(ws_root) as ws:
        with pytest.raises(SandboxUnavailableError) as ei:
            System(ws, sandbox=sandbox)
        assert ei.value.reason is SandboxReason.WORKSPACE_COVERS_HOME
        allowed = Sandbox.resolve(
            SandboxSettings(mode="require", profile="default", allow_home_workspace=True)
        )
        System(ws, sandbox=allowed).close()


def test_require_names_the_missing_layer(tmp_path: Path) -> None:
    """A profile requiring a layer the backend cannot give is refused under require."""
    with pytest.raises(SandboxUnavailableError) as ei:
        Sandbox.resolve(SandboxSettings(mode="require", profile="default", backend="landlock"))
    assert ei.value.reason is SandboxReason.LAYER_UNAVAILABLE
    assert ei.value.layer == "bubblewrap"
    assert "flux doctor" in str(ei.value)


def test_mode_off_confines_nothing(ws_path: Path) -> None:
    off = Sandbox.resolve(SandboxSettings(mode="off"))
    assert off.backend == "none"
    with Workspace(ws_path) as ws, System(ws, sandbox=off) as s:
        r = s.run(["/bin/sh", "-c", "grep -c . /etc/passwd"])
    assert r.exit_code == 0


def test_arun_is_confined(system: System) -> None:
    r = asyncio.run(system.arun(["/bin/sh", "-c", "grep Seccomp: /proc/self/status"]))
    assert "Seccomp:\t2" in r.stdout_text


def test_spawn_is_confined(system: System) -> None:
    child = system.spawn(["/bin/sh", "-c", "grep NoNewPrivs: /proc/self/status"])
    assert child.join(30)
    out = child.read_output()
    assert b"NoNewPrivs:\t1" in out.stdout


def _sleepers(marker: str) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        if p.info["cmdline"] and marker in p.info["cmdline"]:
            found.append(p)
    return found


def test_daemons_do_not_survive_the_run(system: System) -> None:
    """The pid namespace contains the tree (no cgroup is used for it)."""
    marker = f"{os.getpid() % 100000 + 400000}"
    r = system.run(
        ["/bin/sh", "-c", f"setsid /bin/sleep {marker} & (setsid /bin/sleep {marker} &); echo up"]
    )
    assert r.stdout_text == "up\n"
    assert r.tree_contained is True
    assert _sleepers(marker) == []


def test_daemons_of_a_killed_spawn_do_not_survive(system: System) -> None:
    marker = f"{os.getpid() % 100000 + 500000}"
    child = system.spawn(
        ["/bin/sh", "-c", f"setsid /bin/sleep {marker} & exec /bin/sleep {marker}"]
    )
    try:
        for _ in range(200):
            if len(_sleepers(marker)) == 2:
                break
            import time

            time.sleep(0.01)
        assert len(_sleepers(marker)) == 2  # positive control: both ran
    finally:
        child.kill()
        assert child.join(30)
    assert _sleepers(marker) == []
