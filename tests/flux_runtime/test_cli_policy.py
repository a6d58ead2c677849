"""``flux policy check|eval``: exit codes and the --json shape, run in-process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flux_policy import load_policy
from flux_runtime.cli import main

POLICY = """
version = 1
[groups]
"role:dev" = ["user:alice"]

[[grant]]
id = "read-src"
subjects = ["role:dev"]
actions = ["fs.read"]
resources = ["workspace/src/**"]
min_trust = "low"

[[grant]]
id = "write-src"
subjects = ["role:dev"]
actions = ["fs.write"]
resources = ["workspace/src/**"]
requires_approval = true

[[grant]]
id = "ci-run"
subjects = ["svc:ci"]
actions = ["run"]
resources = ["jobs/**"]
when = [{ attr = "attempt", equals = 2 }, { attr = "tag", equals = "v1" }]

[[grant]]
id = "windowed"
subjects = ["**"]
actions = ["deploy"]
resources = ["prod/**"]
not_after = "2026-07-01T00:00:00Z"

[[deny]]
id = "no-env"
subjects = ["**"]
actions = ["fs.*"]
resources = ["workspace/**/.env"]
"""


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    path = tmp_path / "policy.toml"
    path.write_text(POLICY, encoding="utf-8")
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(["policy", *argv])
    except SystemExit as exc:  # argparse usage errors
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def ev(path: Path, *extra: str) -> list[str]:
    return ["eval", str(path), *extra]


def test_check_ok(policy_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "check", str(policy_file), "--json")
    assert code == 0
    summary = json.loads(out)
    assert summary["policy_digest"] == load_policy(policy_file).digest
    assert (summary["grants"], summary["denies"], summary["approval_grants"]) == (4, 1, 1)
    code, out, _ = run(capsys, "check", str(policy_file))
    assert code == 0 and "digest sha256:" in out


def test_check_load_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(
        'version = 1\n[[grant]]\nid = "g"\nsubjects = ["role:x"]\n'
        'actions = ["a"]\nresources = ["b"]\n',
        encoding="utf-8",
    )
    code, out, err = run(capsys, "check", str(bad))
    assert code == 2 and out == "" and "unknown_group" in err and "'g'" in err
    code, _, err = run(capsys, "check", str(tmp_path / "missing.toml"))
    assert code == 2 and "reason=io" in err


@pytest.mark.parametrize(
    "case",
    [
        (
            [
                "--subject",
                "user:alice",
                "--action",
                "fs.read",
                "--resource",
                "workspace/src/a",
                "--trust",
                "low",
            ],
            0,
            "allow",
            ["read-src"],
        ),
        (
            ["--subject", "user:alice", "--action", "fs.read", "--resource", "workspace/src/a"],
            1,
            "deny",
            [],
        ),
        (
            ["--subject", "user:alice", "--action", "fs.write", "--resource", "workspace/src/a"],
            3,
            "approval_required",
            ["write-src"],
        ),
        (
            [
                "--subject",
                "user:alice",
                "--action",
                "fs.read",
                "--resource",
                "workspace/src/.env",
                "--trust",
                "high",
            ],
            1,
            "deny",
            ["no-env"],
        ),
        (
            [
                "--subject",
                "user:alice",
                "--action",
                "fs.read",
                "--resource",
                "workspace/../x",
                "--trust",
                "high",
            ],
            1,
            "deny",
            [],
        ),
    ],
)
def test_eval_exit_codes_and_json(
    policy_file: Path,
    capsys: pytest.CaptureFixture[str],
    case: tuple[list[str], int, str, list[str]],
) -> None:
    args, code, effect, rules = case
    got, out, _ = run(capsys, *ev(policy_file, *args, "--json"))
    assert got == code
    decision = json.loads(out)
    assert decision["effect"] == effect
    assert decision["determining_rules"] == rules
    assert decision["policy_digest"] == load_policy(policy_file).digest
    assert out.count("\n") == 1  # one JSON object on one line
    # without --json the exit code is the same
    assert run(capsys, *ev(policy_file, *args))[0] == code


def test_context_values_are_json_when_they_parse(
    policy_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["--subject", "svc:ci", "--action", "run", "--resource", "jobs/a", "--json"]
    # attempt=2 parses as the integer 2; tag=v1 is not JSON so stays the string "v1"
    assert (
        run(capsys, *ev(policy_file, *base, "--context", "attempt=2", "--context", "tag=v1"))[0]
        == 0
    )
    code, out, _ = run(
        capsys, *ev(policy_file, *base, "--context", 'attempt="2"', "--context", "tag=v1")
    )
    assert code == 1
    assert json.loads(out)["errors"][0]["reason"] == "type_mismatch"
    # NaN is not taken as a float constant
    code, out, _ = run(
        capsys, *ev(policy_file, *base, "--context", "attempt=NaN", "--context", "tag=v1")
    )
    assert code == 1 and json.loads(out)["errors"][0]["reason"] == "type_mismatch"


def test_now_is_explicit(policy_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--subject", "u", "--action", "deploy", "--resource", "prod/app"]
    assert run(capsys, *ev(policy_file, *base, "--now", "2026-06-30T23:59:59Z"))[0] == 0
    assert run(capsys, *ev(policy_file, *base, "--now", "2026-07-01T00:00:00Z"))[0] == 1


def test_explain_lists_every_rule(policy_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = [
        "--subject",
        "user:alice",
        "--action",
        "fs.read",
        "--resource",
        "workspace/src/.env",
        "--trust",
        "low",
        "--json",
        "--explain",
    ]
    code, out, _ = run(capsys, *ev(policy_file, *args))
    trace = {t["rule"]: t["applied"] for t in json.loads(out)["trace"]}
    assert code == 1
    assert trace == {
        "read-src": True,
        "no-env": True,
        "write-src": False,
        "ci-run": False,
        "windowed": False,
    }
    code, out, _ = run(capsys, *ev(policy_file, *args[:-2], "--explain"))
    assert code == 1 and "deny no-env: applied" in out


@pytest.mark.parametrize(
    "extra",
    [
        ["--context", "novalue"],
        ["--context", "=x"],
        ["--now", "yesterday"],
        ["--now", "2026-01-01T00:00:00"],  # no offset
    ],
)
def test_usage_errors_exit_2(
    policy_file: Path, capsys: pytest.CaptureFixture[str], extra: list[str]
) -> None:
    args = ["--subject", "u", "--action", "a", "--resource", "r", *extra]
    code, out, err = run(capsys, *ev(policy_file, *args))
    assert code == 2 and out == "" and err


def test_missing_required_option_exits_2(
    policy_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(capsys, "eval", str(policy_file), "--subject", "u")[0] == 2
    assert run(capsys)[0] == 2


def test_several_files_combine(
    policy_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    extra = tmp_path / "extra.toml"
    extra.write_text(
        'version = 1\n[[deny]]\nid = "freeze"\nsubjects = ["**"]\n'
        'actions = ["**"]\nresources = ["workspace/**"]\n',
        encoding="utf-8",
    )
    args = [
        "--subject",
        "user:alice",
        "--action",
        "fs.read",
        "--resource",
        "workspace/src/a",
        "--trust",
        "low",
        "--json",
    ]
    code, out, _ = run(capsys, "eval", str(policy_file), str(extra), *args)
    assert code == 1 and json.loads(out)["determining_rules"] == ["freeze"]
