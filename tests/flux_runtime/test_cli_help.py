"""Every ``--help`` lists the exit codes its command uses; ``flux --help`` lists them all."""

from __future__ import annotations

import re

import pytest

from flux_runtime.cli import EXIT_BROKEN_PIPE, _evidence, _exec, _policy, main


def _help(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    with pytest.raises(SystemExit) as exited:
        main([*args, "--help"])
    assert exited.value.code == 0
    return capsys.readouterr().out


def _codes(module: object) -> set[int]:
    return {v for k, v in vars(module).items() if k.startswith("EXIT_") and isinstance(v, int)}


def _listed(text: str) -> set[int]:
    section = text.split("exit codes", 1)[1]
    return {int(n) for n in re.findall(r"^\s+(\d+)\s", section, re.MULTILINE)}


@pytest.mark.parametrize(
    ("args", "module"),
    [
        (("exec",), _exec),
        (("policy", "check"), _policy),
        (("policy", "eval"), _policy),
        (("evidence", "verify"), _evidence),
        (("evidence", "show"), _evidence),
    ],
)
def test_subcommand_help_lists_its_exit_codes(
    capsys: pytest.CaptureFixture[str], args: tuple[str, ...], module: object
) -> None:
    listed = _listed(_help(capsys, *args))
    assert _codes(module) | {EXIT_BROKEN_PIPE} <= listed


def test_top_level_help_lists_every_exit_code(capsys: pytest.CaptureFixture[str]) -> None:
    text = _help(capsys)
    for name in ("flux exec", "flux policy", "flux evidence"):
        assert name in text.split("exit codes", 1)[1]
    every = _codes(_exec) | _codes(_policy) | _codes(_evidence) | {EXIT_BROKEN_PIPE}
    assert every <= _listed(text)


@pytest.mark.parametrize("columns", [None, "37", "0", "wide"])
def test_help_width_is_the_one_shutil_reports(
    monkeypatch: pytest.MonkeyPatch, columns: str | None
) -> None:
    # The parser's formatters get the width without importing shutil (start-up cost):
    # it must be the width shutil.get_terminal_size would give argparse.
    import shutil

    from flux_runtime.cli import _columns

    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    assert _columns() == shutil.get_terminal_size().columns
