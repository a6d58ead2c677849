"""Run the examples of docs/policy.md, and check every ``flux policy`` option has help.

``toml`` blocks are loaded as policies (and written to ``policy.toml``); ``python``
blocks run after them, in one namespace, with ``policy`` and ``evaluator`` bound to the
last policy; ``console`` blocks run each ``$ flux ...`` line in-process and match the
lines shown under it (``...`` stands for any text) against what it printed, in order.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from flux_policy import IndexedEvaluator, ReferenceEvaluator, Request, load_policy_string
from flux_runtime.cli import main

DOC = Path(__file__).resolve().parents[2] / "docs" / "policy.md"
BLOCK = re.compile(r"^```(toml|python|console)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
KEYS = ("min_trust", "max_trust", "requires_approval", "when", "not_before", "not_after")


def _blocks() -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in BLOCK.finditer(DOC.read_text(encoding="utf-8"))]


def _console(block: str, capsys: pytest.CaptureFixture[str]) -> None:
    commands: list[tuple[str, list[str]]] = []
    for line in block.splitlines():
        if line.startswith("$ "):
            commands.append((line[2:], []))
        else:
            commands[-1][1].append(line)
    for command, expected in commands:
        argv = shlex.split(command)
        assert argv[0] == "flux"
        main(argv[1:])
        printed = capsys.readouterr().out.splitlines()
        for want in expected:
            pattern = re.compile(".*".join(map(re.escape, want.split("..."))))
            while printed and not pattern.fullmatch(printed[0]):
                printed.pop(0)
            assert printed, f"{command!r} did not print {want!r}"
            printed.pop(0)


def test_policy_doc_examples_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    blocks = _blocks()
    kinds = [kind for kind, _ in blocks]
    assert kinds.count("toml") >= 8 and kinds.count("python") >= 7 and "console" in kinds
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "policy_doc"}
    for number, (kind, text) in enumerate(blocks, 1):
        if kind == "toml":
            policy = load_policy_string(text, source=f"{DOC.name}#block{number}")
            Path("policy.toml").write_text(text, encoding="utf-8")
            namespace.update(policy=policy, evaluator=IndexedEvaluator(policy))
        elif kind == "python":
            exec(compile(text, f"{DOC.name}#block{number}", "exec"), namespace)
        else:
            _console(text, capsys)


def test_policy_doc_covers_every_key() -> None:
    toml = "\n".join(text for kind, text in _blocks() if kind == "toml")
    for key in (*KEYS, "scopes", "trust_levels", "[groups]", "[[grant]]", "[[deny]]"):
        assert key in toml, key
    # the documented examples decide the same under the reference evaluator
    for _kind, text in (b for b in _blocks() if b[0] == "toml"):
        policy = load_policy_string(text)
        req = Request("user:alice", "fs.read", "ws/app/src/main.py", trust="low")
        assert IndexedEvaluator(policy).evaluate(req) == ReferenceEvaluator(policy).evaluate(req)


def _options_without_help(text: str) -> list[str]:
    """Option entries of an argparse help text that have no help text after them."""
    lines = text.split("exit codes", 1)[0].splitlines()
    missing = []
    for i, line in enumerate(lines):
        entry = re.match(r"^  (\S.*?)(?:\s{2,}(\S.*))?$", line)
        if entry is None or line.strip().endswith(":"):
            continue
        follows = i + 1 < len(lines) and lines[i + 1].startswith(" " * 6)
        if entry.group(2) is None and not follows:
            missing.append(entry.group(1))
    return missing


@pytest.mark.parametrize("command", ["eval", "check"])
def test_every_policy_option_has_help(capsys: pytest.CaptureFixture[str], command: str) -> None:
    with pytest.raises(SystemExit):
        main(["policy", command, "--help"])
    text = capsys.readouterr().out
    assert "FILE" in text
    assert _options_without_help(text) == []
    if command == "eval":
        for option in ("--subject", "--action", "--resource", "--trust", "--scope"):
            assert option in text
        assert "--context KEY=VALUE" in text and "--now TIMESTAMP" in text
