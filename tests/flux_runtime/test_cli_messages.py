"""What ``flux`` says: errors name the command and path, ``--version``, usage errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.flux_runtime._flux import HANG_GUARD_S, ROOT, flux


def test_not_found_names_the_command(tmp_path: Path) -> None:
    run = flux("exec", "--workspace", str(tmp_path), "--", "flux-no-such-command-xyz")
    assert run.returncode == 127
    assert run.stderr == b"flux exec: flux-no-such-command-xyz: command not found (not_found)\n"


def test_control_characters_in_a_name_are_escaped(tmp_path: Path) -> None:
    run = flux("exec", "--workspace", str(tmp_path), "--", "bad\nname\x1b[2J")
    assert run.returncode == 127
    assert run.stderr.count(b"\n") == 1  # one line: no forged second line
    assert b"\x1b" not in run.stderr
    assert b"'bad\\nname\\x1b[2J'" in run.stderr


def test_not_executable_names_the_command(tmp_path: Path) -> None:
    (tmp_path / "plain").write_text("not a program\n")
    run = flux("exec", "--workspace", str(tmp_path), "--", "./plain")
    assert run.returncode == 126
    assert run.stderr.startswith(b"flux exec: ./plain: cannot execute")


def test_missing_workspace_names_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "no such dir"
    run = flux("exec", "--workspace", str(missing), "--", "true")
    assert run.returncode == 125
    assert f"workspace '{missing}'".encode() in run.stderr


def test_cwd_escape_names_the_cwd(tmp_path: Path) -> None:
    run = flux("exec", "--workspace", str(tmp_path), "--cwd", "../..", "--", "true")
    assert run.returncode == 125
    assert run.stderr.startswith(b"flux exec: --cwd ../..:")


def test_version() -> None:
    run = flux("--version")
    assert run.returncode == 0
    assert run.stdout.startswith(b"flux ")
    assert run.stdout.count(b"\n") == 1


def test_unknown_option_prints_the_subcommand_usage_and_exec_exits_125(tmp_path: Path) -> None:
    run = flux("exec", "--json", "--", "true", cwd=tmp_path)
    assert run.returncode == 125
    assert run.stderr.startswith(b"usage: flux exec ")
    assert b"unrecognized arguments: --json" in run.stderr
    other = flux("policy", "check", "--bogus", "p.toml", cwd=tmp_path)
    assert other.returncode == 2  # other subcommands keep argparse's 2
    assert other.stderr.startswith(b"usage: flux policy check ")


def test_exec_usage_errors_exit_125(tmp_path: Path) -> None:
    ws = ("exec", "--workspace", str(tmp_path))
    assert flux(*ws).returncode == 125  # no command
    assert flux(*ws, "--timeout", "soon", "--", "true").returncode == 125
    assert flux(*ws, "--timeout", "-1", "--", "true").returncode == 125
    assert flux(*ws, "--output-cap", "-5", "--", "true").returncode == 125
    assert flux(*ws, "--env", "NOEQUALS", "--", "true").returncode == 125


def test_env_and_env_pass(tmp_path: Path) -> None:
    script = 'printf "%s|%s|%s" "$A" "$FLUX_TEST_PASSED" "${FLUX_TEST_NOT_PASSED-unset}"'
    run = flux(
        "exec", "--workspace", str(tmp_path), "--env", "A=x=y", "--env-pass", "FLUX_TEST_PASSED",
        "--", "sh", "-c", script,
        FLUX_TEST_PASSED="from flux", FLUX_TEST_NOT_PASSED="secret",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stdout == b"x=y|from flux|unset"


def test_env_pass_refuses_loader_hooks(tmp_path: Path) -> None:
    for name in ("LD_PRELOAD", "ld_preload", "PYTHONSTARTUP"):
        run = flux("exec", "--workspace", str(tmp_path), "--env-pass", name, "--", "true")
        assert run.returncode == 125
        assert f"--env-pass {name}: a loader or interpreter hook".encode() in run.stderr


def test_env_value_is_never_shown(tmp_path: Path) -> None:
    run = flux("exec", "--workspace", str(tmp_path), "--env", "TOKENVALUE-s3cr3t", "--", "true")
    assert run.returncode == 125
    assert b"s3cr3t" not in run.stderr


_PROBE = """
import contextlib, sys
from flux_runtime.cli import main
with contextlib.redirect_stdout(sys.stderr), contextlib.suppress(SystemExit):
    main(sys.argv[1:])
heavy = ("pydantic", "asyncio", "flux_policy", "flux_runtime.cli._policy")
print("flux_system.process._spawn" in sys.modules, sorted(m for m in heavy if m in sys.modules))
"""


def _imported_by(*args: str) -> bytes:
    run = subprocess.run(
        [sys.executable, "-c", _PROBE, *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        cwd=ROOT,
        timeout=HANG_GUARD_S,
        check=True,
    )
    return run.stdout


def test_exec_path_imports_no_pydantic_asyncio_or_policy(tmp_path: Path) -> None:
    # The exec path ran (it spawned), and none of the heavy modules came with it.
    assert _imported_by("exec", "--workspace", str(tmp_path), "--", "true") == b"True []\n"
    # Negative control: the probe does see them when a command needs them.
    assert b"'flux_runtime.cli._policy', 'pydantic'" in _imported_by("--help")
