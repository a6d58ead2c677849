"""The Landlock-only backend, for real: a restricted spawner thread, what it stops."""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path

import pytest

from flux_system import System, Workspace
from flux_system.sandbox import Sandbox, SandboxSettings
from flux_system.sandbox._layers import LANDLOCK_DENIALS
from tests.flux_system.sandbox._support import SYSTEM_PYTHON, require_landlock, sh


@pytest.fixture(scope="module")
def sandbox() -> Sandbox:
    require_landlock()
    return Sandbox.resolve(SandboxSettings(mode="on", backend="landlock"))


def test_report_says_what_landlock_alone_cannot_give(sandbox: Sandbox) -> None:
    rep = sandbox.report()
    assert rep.backend == "landlock"
    assert rep.active_layers == ("landlock", "seccomp")
    assert rep.missing == ("bubblewrap",)
    enforced = {g.name: g.enforced for g in rep.guarantees}
    assert enforced == {
        "filesystem_view": True,
        "file_metadata": True,  # root here: seccomp refuses chmod and utimes too
        "private_tmp": False,
        "pid_namespace": False,
        "process_tree": True,  # root here: each tree has its own pids cgroup
        "net_namespace": False,
        "ipc_uts_namespaces": False,
        "user_namespaces_closed": True,
        "seccomp": True,
        "landlock": True,
        "protected_paths": False,
        "denial_reporting": True,
    }
    assert rep.guarantee("denial_reporting").reason == LANDLOCK_DENIALS


def test_require_refuses_landlock_for_a_profile_that_needs_bubblewrap() -> None:
    require_landlock()
    from flux_system import SandboxReason, SandboxUnavailableError

    with pytest.raises(SandboxUnavailableError) as ei:
        Sandbox.resolve(SandboxSettings(mode="require", backend="landlock"))
    assert ei.value.layer == "bubblewrap"
    assert ei.value.reason is SandboxReason.LAYER_UNAVAILABLE


def test_only_the_spawner_thread_is_restricted(system: System) -> None:
    system.run(["/bin/true"])
    tid = int(system._confine._spawner.tid)  # type: ignore[union-attr]
    status = Path(f"/proc/self/task/{tid}/status").read_text()
    assert "Seccomp:\t2" in status and "NoNewPrivs:\t1" in status
    assert "CapEff:\t0000000000000000" in status
    mine = Path(f"/proc/self/task/{threading.get_native_id()}/status").read_text()
    assert "Seccomp:\t0" in mine


def test_child_has_no_caps_and_no_new_privs(system: System) -> None:
    _, out, _ = sh(system, "grep -E '^(NoNewPrivs|CapEff|CapBnd|Seccomp):' /proc/self/status")
    assert "NoNewPrivs:\t1" in out and "Seccomp:\t2" in out
    assert "CapEff:\t0000000000000000" in out and "CapBnd:\t0000000000000000" in out


def test_reads_and_writes_outside_are_denied(system: System, tmp_path: Path, ws_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret")
    target = tmp_path / "planted.txt"
    _code, out, err = sh(
        system,
        f"cat {secret}; cat /etc/passwd; echo x > {target}; echo y > /tmp/flux-ll-probe; "
        "cat /proc/1/environ; echo inside > mine.txt; echo tmp > $TMPDIR/t && cat $TMPDIR/t",
    )
    assert "host secret" not in out and "root:" not in out
    assert not target.exists() and not os.path.exists("/tmp/flux-ll-probe")
    assert err.count("Permission denied") >= 5
    assert (ws_path / "mine.txt").read_text() == "inside\n"
    assert out.strip() == "tmp"


def test_proc_of_host_processes_is_denied(system: System) -> None:
    """Landlock scopes ptrace-class access: /proc/<host pid>/environ of this process."""
    _code, out, err = sh(system, f"cat /proc/{os.getpid()}/environ; echo rc=$?")
    assert "rc=1" in out and "Permission denied" in err
    assert "PATH=" not in out


def test_tcp_connect_to_a_host_listener_is_denied(system: System) -> None:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    srv.settimeout(0.5)
    port = srv.getsockname()[1]
    try:
        code = (
            "import socket\n"
            f"try:\n socket.socket().connect(('127.0.0.1', {port})); print('connected')\n"
            "except OSError as e: print('denied', e.errno)\n"
        )
        r = system.run([SYSTEM_PYTHON, "-I", "-S", "-c", code], timeout=30)
        # socket(AF_INET) itself is refused by seccomp (no netns here); Landlock's TCP
        # rules (ABI >= 4) deny bind/connect behind it.
        assert r.stdout_text.strip() == "denied 97", r.stdout_text
        assert r.denials is not None
        assert [(d.what, d.detail) for d in r.denials.records] == [("socket", "family=2")]
        with pytest.raises(TimeoutError):
            srv.accept()  # nothing reached the listener
    finally:
        srv.close()


def test_abstract_unix_socket_to_a_host_listener_is_denied(
    sandbox: Sandbox, system: System
) -> None:
    name = f"\0flux-ll-{os.getpid()}"
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(name)
    srv.listen(1)
    try:
        code = (
            "import socket\ns=socket.socket(socket.AF_UNIX)\n"
            f"try:\n s.connect({name!r}); print('connected')\n"
            "except OSError as e: print('denied', e.errno)\n"
        )
        r = system.run([SYSTEM_PYTHON, "-I", "-S", "-c", code], timeout=30)
        assert r.stdout_text.startswith("denied"), r.stdout_text
    finally:
        srv.close()


def test_signal_to_a_host_process_is_denied(system: System) -> None:
    r = system.run(["/bin/sh", "-c", f"kill -0 {os.getpid()}; echo rc=$?"])
    assert "rc=1" in r.stdout_text


def test_two_systems_keep_their_own_denials(sandbox: Sandbox, tmp_path: Path) -> None:
    """Regression: libseccomp's single per-process notification fd was shared."""
    code = "import socket\ntry:\n socket.socket(17, 3)\nexcept OSError: pass\n"
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with (
        Workspace(tmp_path / "a") as wa,
        Workspace(tmp_path / "b") as wb,
        System(wa, sandbox=sandbox) as sa,
        System(wb, sandbox=sandbox) as sb,
    ):
        ra = sa.run([SYSTEM_PYTHON, "-I", "-S", "-c", code])
        rb = sb.run([SYSTEM_PYTHON, "-I", "-S", "-c", code + code])
    assert ra.denials is not None and len(ra.denials.records) == 1
    assert rb.denials is not None and len(rb.denials.records) == 2


def test_private_tmp_dir_is_removed_on_close(sandbox: Sandbox, ws_path: Path) -> None:
    with Workspace(ws_path) as ws, System(ws, sandbox=sandbox) as s:
        tmpdir = s.run(["/bin/sh", "-c", "echo $TMPDIR"]).stdout_text.strip()
        assert os.path.isdir(tmpdir)
    assert not os.path.exists(tmpdir)


def test_spawned_child_reports_its_denials(system: System) -> None:
    code = "import socket\ntry:\n socket.socket(17, 3)\nexcept OSError: pass\n"
    child = system.spawn([SYSTEM_PYTHON, "-I", "-S", "-c", code])
    assert child.join(30)
    denials = child.denials
    assert denials is not None and denials.observable is True
    assert [(d.what, d.detail) for d in denials.records] == [("socket", "family=17")]


def test_metadata_changes_outside_are_refused_for_root(
    system: System, sandbox: Sandbox, tmp_path: Path
) -> None:
    """Landlock has no right for file metadata; for a root caller every root-owned host
    file is its own (chmod u+s), so seccomp refuses chown, xattrs, chmod and utimes."""
    outside = tmp_path / "outside.txt"
    outside.write_text("x")
    outside.chmod(0o644)
    code = (
        "import os\n"
        f"p = {str(outside)!r}\n"
        "for name, f in (('chown', lambda: os.chown(p, os.getuid(), os.getgid())),\n"
        "                ('setxattr', lambda: os.setxattr(p, 'user.flux', b'1')),\n"
        "                ('chmod', lambda: os.chmod(p, 0o4755)),\n"
        "                ('utime', lambda: os.utime(p, (0, 0)))):\n"
        "    try:\n        f(); print(name, 'ok')\n"
        "    except OSError as e: print(name, e.errno)\n"
    )
    r = system.run([SYSTEM_PYTHON, "-I", "-S", "-c", code], timeout=30)
    assert r.stdout_text.split("\n")[:4] == ["chown 1", "setxattr 1", "chmod 1", "utime 1"]
    assert os.listxattr(outside) == []
    st = outside.stat()
    assert st.st_mode & 0o7777 == 0o644 and st.st_mtime > 0
    g = sandbox.report().guarantee("file_metadata")
    assert g.enforced is True and "root caller" in g.reason
