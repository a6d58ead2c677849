"""Redaction of a result's two faces and of its record, whatever strings they share.

The executor redacts each string object of a result once (the ``read`` view is the
same object as the content's text) and keys that memo by identity: equal strings that
are distinct objects are each redacted, and a ``str`` subclass's own ``__hash__`` and
``__eq__`` are never consulted. Recordability checks read a string's own ASCII flag,
never a subclass's override of ``isascii``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from flux_evidence import EvidenceLog
from flux_policy import IndexedEvaluator, load_policy_string
from flux_runtime import Call, Catalog, Context, EnvelopeReason, Executor, Operation, Result, Risk
from flux_secret import Redactor
from flux_system import Workspace
from flux_system.port import Substrate
from tests.flux_runtime._runtime import PERMISSIVE

SECRET = "tok-5e6f7a8b9c0d-facevalue"


class _Opaque(str):
    """A str whose hash and equality must not be asked (they raise)."""

    __slots__ = ()

    def __hash__(self) -> int:
        raise AssertionError("hashed")

    def __eq__(self, other: object) -> bool:
        raise AssertionError("compared")

    def __ne__(self, other: object) -> bool:
        raise AssertionError("compared")


class _ClaimsAscii(str):
    __slots__ = ()

    def isascii(self) -> bool:
        return True


def _executor(tmp_path: Path, result: Result) -> tuple[Executor, EvidenceLog, Workspace]:
    op = Operation(
        "face",
        "returns a fixed result",
        {"type": "object", "properties": {"path": {"type": "string"}}},
        frozenset({"read"}),
        Risk.LOW,
        True,
        lambda s, i: result,
        lambda i: ["workspace/x"],
    )
    root = tmp_path / "ws"
    root.mkdir()
    ws = Workspace(root)
    log = EvidenceLog.open(tmp_path / "ev.jsonl", fsync="never")
    redactor = Redactor()
    redactor.register(SECRET, name="t")
    policy = load_policy_string(PERMISSIVE)
    ex = Executor(
        Substrate.native(ws),
        Catalog([op]),
        evaluator=IndexedEvaluator(policy),
        policy_digest=policy.digest,
        redactor=redactor,
        evidence=log,
    )
    return ex, log, ws


def _dispatch(tmp_path: Path, result: Result, inp: dict[str, Any] | None = None) -> tuple[Any, str]:
    ex, log, ws = _executor(tmp_path, result)
    try:
        out = ex.dispatch(Call("face", inp or {}), Context("s", "agent"))
        return out, json.dumps([r.data for r in log])
    finally:
        log.close()
        ws.close()


def test_equal_texts_that_are_distinct_objects_are_each_redacted(tmp_path: Path) -> None:
    text = f"before {SECRET} after"
    twin = text[:3] + text[3:]  # equal, and (built anew) another object
    assert twin == text and twin is not text
    out, log = _dispatch(tmp_path, Result({"a": text, "b": [twin, text]}, twin))
    assert out.ok, out
    seen = out.view + json.dumps(out.content)
    assert "[redacted]" in out.view  # positive control: the view held the secret
    assert SECRET not in seen and SECRET not in log
    assert out.content["a"] == out.content["b"][0] == out.content["b"][1] == out.view


def test_a_str_subclass_in_a_result_is_redacted_without_its_hash_or_equality(
    tmp_path: Path,
) -> None:
    opaque = _Opaque(f"x {SECRET} y")
    out, log = _dispatch(tmp_path, Result({"text": opaque}, opaque))
    assert out.ok, out
    assert out.view == "x [redacted] y" and out.content["text"] == "x [redacted] y"
    assert SECRET not in log


@pytest.mark.parametrize("value", ["a\udc80", "\udcff" * 3])
def test_a_str_subclass_that_claims_ascii_is_still_checked_for_surrogates(
    tmp_path: Path, value: str
) -> None:
    out, log = _dispatch(tmp_path, Result(None, "never run"), {"path": _ClaimsAscii(value)})
    assert not out.ok and out.reason is EnvelopeReason.INVALID_INPUT
    assert "lone surrogate" in (out.error or "")
    assert '"ok": false' in log


@pytest.mark.parametrize(
    ("name", "recorded"),
    [
        ("face", "face"),
        ("x" * 250, "x" * 200),
        ("é" * 250, "é" * 200),
        ("bad\udc80op", "bad?op"),
    ],
)
def test_the_operation_name_is_recorded_bounded_and_as_text(
    tmp_path: Path, name: str, recorded: str
) -> None:
    ex, log, ws = _executor(tmp_path, Result(None, ""))
    try:
        ex.dispatch(Call(name, {}), Context("s", "agent"))
        (rec,) = [r.data for r in log if r.kind == "operation"]
    finally:
        log.close()
        ws.close()
    assert rec["op"] == recorded
