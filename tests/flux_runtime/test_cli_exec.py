"""``flux exec``: output and exit code pass through; typed errors map to documented codes."""

from __future__ import annotations

from pathlib import Path

import pytest

from flux_runtime.cli import main
from flux_runtime.cli._exec import (
    EXIT_FLUX_ERROR,
    EXIT_NOT_EXECUTABLE,
    EXIT_NOT_FOUND,
    EXIT_TIMEOUT,
    EXIT_USAGE,
)


def _exec(tmp_path: Path, *args: str) -> int:
    return main(["exec", "--workspace", str(tmp_path), *args])


def test_output_and_exit_code_pass_through(
    tmp_path: Path, capfdbinary: pytest.CaptureFixture[bytes]
) -> None:
    code = _exec(tmp_path, "--", "sh", "-c", "printf out; printf err >&2; exit 5")
    captured = capfdbinary.readouterr()
    assert code == 5
    assert captured.out == b"out"
    assert captured.err == b"err"


def test_signal_maps_to_128_plus_n(tmp_path: Path) -> None:
    assert _exec(tmp_path, "--", "sh", "-c", "kill -TERM $$") == 128 + 15


def test_cwd_is_workspace_relative(
    tmp_path: Path, capfdbinary: pytest.CaptureFixture[bytes]
) -> None:
    (tmp_path / "sub").mkdir()
    assert _exec(tmp_path, "--cwd", "sub", "--", "pwd", "-P") == 0
    assert capfdbinary.readouterr().out == f"{tmp_path}/sub\n".encode()


def test_cwd_escape_is_flux_error(tmp_path: Path) -> None:
    assert _exec(tmp_path, "--cwd", "../..", "--", "true") == EXIT_FLUX_ERROR


def test_not_found_and_not_executable(tmp_path: Path) -> None:
    assert _exec(tmp_path, "--", "flux-no-such-program-xyz") == EXIT_NOT_FOUND
    (tmp_path / "plain").write_text("not a program\n")
    assert _exec(tmp_path, "--", "./plain") == EXIT_NOT_EXECUTABLE


def test_timeout(tmp_path: Path, capfdbinary: pytest.CaptureFixture[bytes]) -> None:
    # 2 s: the sandbox's set-up (namespaces, mounts) comes before the first output
    assert _exec(tmp_path, "--timeout", "2", "--", "sh", "-c", "echo early; sleep 30") == (
        EXIT_TIMEOUT
    )
    assert capfdbinary.readouterr().out == b"early\n"


def test_usage_errors(tmp_path: Path) -> None:
    assert _exec(tmp_path) == EXIT_USAGE
    assert _exec(tmp_path, "--timeout", "-1", "--", "true") == EXIT_USAGE


@pytest.mark.parametrize("workspace", ["", "ws\0x"])
def test_unusable_workspace_argument_is_a_usage_error(workspace: str) -> None:
    # Workspace() takes these as a programming error (ValueError); here they are input.
    assert main(["exec", "--workspace", workspace, "--", "true"]) == EXIT_USAGE
