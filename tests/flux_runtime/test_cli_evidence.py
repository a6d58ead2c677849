"""``flux evidence verify|show`` on real log files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flux_evidence import EvidenceLog
from flux_runtime.cli import main


def _make_log(path: Path, n: int = 10) -> str:
    with EvidenceLog.open(path, fsync="never") as log:
        for i in range(n):
            log.append("tool" if i % 2 else "note", {"i": i}, session=f"s{i % 3}")
        return str(log.head())


def test_verify_valid_log_prints_head(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "ev.jsonl"
    head = _make_log(path)
    assert main(["evidence", "verify", str(path)]) == 0
    out = capsys.readouterr().out
    assert head in out
    assert main(["evidence", "verify", str(path), "--expect-head", head]) == 0


def test_verify_tampered_log_names_seq_and_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "ev.jsonl"
    _make_log(path)
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:4] + lines[5:]))
    assert main(["evidence", "verify", str(path)]) == 1
    assert "seq 4: deleted" in capsys.readouterr().err


def test_verify_truncated_against_head(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "ev.jsonl"
    head = _make_log(path)
    data = path.read_bytes()
    path.write_bytes(data[: data.rindex(b"\n", 0, len(data) - 1) + 1])
    assert main(["evidence", "verify", str(path)]) == 0  # a shorter chain is still a chain
    assert main(["evidence", "verify", str(path), "--expect-head", head]) == 1
    assert "truncated" in capsys.readouterr().err


def test_verify_usage_errors(tmp_path: Path) -> None:
    path = tmp_path / "ev.jsonl"
    _make_log(path)
    assert main(["evidence", "verify", str(path), "--expect-head", "nonsense"]) == 2
    assert main(["evidence", "verify", str(tmp_path / "missing.jsonl")]) == 2
    assert main(["evidence", "verify", str(tmp_path)]) == 2
    assert main(["evidence"]) == 2


def test_verify_does_not_modify_the_file(tmp_path: Path) -> None:
    path = tmp_path / "ev.jsonl"
    _make_log(path)
    torn = path.read_bytes() + b'{"actor":nu'
    path.write_bytes(torn)
    assert main(["evidence", "verify", str(path)]) == 0
    assert main(["evidence", "show", str(path)]) == 0
    assert path.read_bytes() == torn


def test_show_filters_by_kind(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "ev.jsonl"
    _make_log(path)
    capsys.readouterr()
    assert main(["evidence", "show", str(path), "--kind", "tool"]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["data"]["i"] for r in records] == [1, 3, 5, 7, 9]
    assert {r["kind"] for r in records} == {"tool"}
    assert main(["evidence", "show", str(path), "--session", "s0"]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["data"]["i"] for r in records] == [0, 3, 6, 9]


def test_show_refuses_tampered_log(tmp_path: Path) -> None:
    path = tmp_path / "ev.jsonl"
    _make_log(path)
    path.write_bytes(path.read_bytes().replace(b'"i":3', b'"i":4'))
    assert main(["evidence", "show", str(path)]) == 1


def test_show_escapes_terminal_controls_in_logged_values(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Logged data is attacker-influenced: `show` must not hand a terminal C1 controls
    (U+009B is CSI), bidi overrides or line separators raw; it escapes them and the
    output stays the same JSON."""
    path = tmp_path / "ev.jsonl"
    hostile = "ok\u009b2J\u202egnp.exe\u2028next\u200bé"
    with EvidenceLog.open(path, fsync="never") as log:
        log.append("tool", {"out": hostile}, session="s\u202e")
    capsys.readouterr()
    assert main(["evidence", "show", str(path), "--kind", "tool"]) == 0
    out = capsys.readouterr().out
    for raw in ("\u009b", "\u202e", "\u2028", "\u200b"):
        assert raw not in out
    assert "é" in out  # printable non-ASCII stays readable
    (record,) = [json.loads(line) for line in out.splitlines()]
    assert record["data"] == {"out": hostile} and record["session"] == "s\u202e"
