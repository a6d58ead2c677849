"""strict (Landlock inside bubblewrap), network proxy and the audit, through System."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from flux_system import SandboxReason, SandboxUnavailableError, System, Workspace
from flux_system.sandbox import Sandbox, SandboxSettings
from tests.flux_system.sandbox._support import SYSTEM_PYTHON, require_bwrap, require_landlock


def _py(system: System, code: str) -> tuple[int, str, str]:
    r = system.run([SYSTEM_PYTHON, "-I", "-S", "-c", code], timeout=60)
    return r.exit_code, r.stdout_text, r.stderr_text


@pytest.fixture(scope="module")
def strict() -> Sandbox:
    require_bwrap()
    require_landlock(4)
    return Sandbox.resolve(SandboxSettings(mode="require", profile="strict"))


def test_strict_reports_landlock_inside_bubblewrap(strict: Sandbox) -> None:
    rep = strict.report()
    assert rep.active_layers == ("bubblewrap", "landlock", "seccomp")
    assert rep.guarantee("landlock").enforced
    assert "inside bubblewrap" in rep.guarantee("landlock").reason


def test_strict_landlock_denies_what_bwrap_alone_shows(strict: Sandbox, tmp_path: Path) -> None:
    """/run/flux (the launcher's own directory) is bound but not in Landlock's rules."""
    with Workspace(tmp_path) as ws, System(ws, sandbox=strict) as system:
        code = (
            "import os, socket\n"
            "try:\n os.listdir('/run/flux'); print('listed')\n"
            "except OSError as e: print('listdir', e.errno)\n"
            "s = socket.socket()\n"
            "try:\n s.bind(('127.0.0.1', 8080)); print('bound')\n"
            "except OSError as e: print('bind', e.errno)\n"
            "open('ok.txt', 'w').write('x'); print('wrote')\n"
        )
        _rc, out, err = _py(system, code)
    assert out.split("\n")[:3] == ["listdir 13", "bind 13", "wrote"], err
    assert (tmp_path / "ok.txt").read_text() == "x"


def test_default_does_not_apply_landlock(tmp_path: Path) -> None:
    """Negative control for the test above: the same probe under default."""
    require_bwrap()
    sandbox = Sandbox.resolve(SandboxSettings(mode="require", profile="default"))
    with Workspace(tmp_path) as ws, System(ws, sandbox=sandbox) as system:
        code = "import socket\ns = socket.socket()\ns.bind(('127.0.0.1', 8080)); print('bound')\n"
        _, out, _ = _py(system, code)
    assert out.strip() == "bound"  # in its own empty netns: harmless, but not Landlocked


def test_strict_launcher_execs_the_command(strict: Sandbox, tmp_path: Path) -> None:
    with Workspace(tmp_path) as ws, System(ws, sandbox=strict) as system:
        r = system.run(["/bin/sh", "-c", "tr '\\0' ' ' < /proc/$$/cmdline"])
    assert r.stdout_text.startswith("/bin/sh -c")  # the launcher is gone (exec)


@pytest.fixture(scope="module")
def proxied() -> Sandbox:
    require_bwrap()
    return Sandbox.resolve(
        SandboxSettings(
            mode="require",
            profile="net-proxy",
            allow_hosts=("127.0.0.1",),
            allow_private=("127.0.0.0/8",),
        )
    )


def test_proxy_mode_refusals_are_denial_records(proxied: Sandbox, tmp_path: Path) -> None:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    port = srv.getsockname()[1]
    try:
        with Workspace(tmp_path) as ws, System(ws, sandbox=proxied) as system:
            code = (
                "import os, socket, urllib.request\n"
                "print(os.environ['HTTP_PROXY'])\n"
                f"for url in ('http://127.0.0.1:{port}/', 'http://flux-denied.example/'):\n"
                " try:\n  urllib.request.urlopen(url, timeout=20)\n"
                " except Exception as e: print(getattr(e, 'code', e))\n"
                "s = socket.socket()\n"
                f"try:\n s.connect(('127.0.0.1', {port})); print('direct connected')\n"
                "except OSError as e: print('direct', e.errno)\n"
            )
            r = system.run([SYSTEM_PYTHON, "-I", "-S", "-c", code], timeout=60)
    finally:
        srv.close()
    lines = r.stdout_text.split("\n")
    assert lines[:4] == ["http://127.0.0.1:3128", "403", "403", "direct 111"], r.stderr_text
    assert r.denials is not None
    got = [(d.layer, d.what, d.detail) for d in r.denials.records]
    assert got == [
        ("proxy", f"GET 127.0.0.1:{port}", "port"),
        ("proxy", "GET flux-denied.example:80", "not_allowed"),
    ]


def test_audit_restores_and_reports(tmp_path: Path) -> None:
    require_bwrap()
    sandbox = Sandbox.resolve(SandboxSettings(mode="require", audit=True))
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "objects").mkdir()
    with Workspace(tmp_path) as ws, System(ws, sandbox=sandbox) as system:
        r = system.run(
            [
                "/bin/sh",
                "-c",
                "mkdir -p .git/hooks && echo evil > .git/hooks/pre-commit; "
                "echo x > .envrc; touch .git/objects/ok",
            ]
        )
    assert r.exit_code == 0
    assert not (tmp_path / ".git" / "hooks").exists()
    assert not (tmp_path / ".envrc").exists()
    assert (tmp_path / ".git" / "objects" / "ok").exists()
    assert r.denials is not None
    got = sorted((d.layer, os.path.basename(d.what), d.detail) for d in r.denials.records)
    assert got == [
        ("protected_paths", ".envrc", "created, restored"),
        ("protected_paths", "hooks", "created, restored"),
    ]


def test_no_audit_unless_asked(tmp_path: Path) -> None:
    require_bwrap()
    sandbox = Sandbox.resolve(SandboxSettings(mode="require"))
    with Workspace(tmp_path) as ws, System(ws, sandbox=sandbox) as system:
        r = system.run(["/bin/sh", "-c", "echo x > .envrc"])
    assert r.denials is not None and r.denials.records == ()
    assert (tmp_path / ".envrc").exists()  # a plain System does not pay for the audit


def test_proxy_on_the_landlock_backend_is_refused_under_require() -> None:
    require_landlock()
    with pytest.raises(SandboxUnavailableError) as ei:
        Sandbox.resolve(SandboxSettings(mode="require", profile="net-proxy", backend="landlock"))
    assert ei.value.reason is SandboxReason.LAYER_UNAVAILABLE
    on = Sandbox.resolve(SandboxSettings(mode="on", profile="net-proxy", backend="landlock"))
    assert on.network == "none"  # fail closed: no network rather than the host's
    assert "proxy" in on.report().missing
