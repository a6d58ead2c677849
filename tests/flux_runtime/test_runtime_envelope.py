"""The envelope with real components: catalog, dispatch, approvals, receipts."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from flux_runtime import (
    Action,
    ActionBatch,
    Call,
    Context,
    EnvelopeError,
    EnvelopeReason,
    MemoryLedger,
    Operation,
    ReceiptBook,
    Result,
    Risk,
    ScriptedApprover,
    SessionStore,
    parse_effects,
)
from tests.flux_runtime._runtime import PERMISSIVE, rig


def _ctx(**kw: object) -> Context:
    return Context("s1", "agent", **kw)  # type: ignore[arg-type]


def test_effects_parser_refuses_capability_names() -> None:
    assert parse_effects(["read", "write"]) == {"read", "write"}
    with pytest.raises(EnvelopeError) as info:
        parse_effects(["workspace.write"])
    assert info.value.reason is EnvelopeReason.BAD_CATALOG
    with pytest.raises(EnvelopeError):
        Operation(
            "x",
            "d",
            {"type": "object"},
            frozenset({"fs.write"}),
            Risk.LOW,
            True,
            lambda s, i: Result(None, ""),
            lambda i: [],
        )


def test_schema_keyword_unknown_is_refused_at_build() -> None:
    with pytest.raises(EnvelopeError) as info:
        Operation(
            "x",
            "d",
            {"type": "object", "pattern": "a"},
            frozenset({"read"}),
            Risk.LOW,
            True,
            lambda s, i: Result(None, ""),
            lambda i: [],
        )
    assert info.value.reason is EnvelopeReason.BAD_CATALOG


def test_read_allowed_and_recorded_with_digest(tmp_path: Path) -> None:
    with rig(tmp_path) as r:
        (r.root / "a.txt").write_text("hello\n")
        out = r.executor.dispatch(Call("read", {"path": "a.txt"}), _ctx())
        assert out.ok and out.view == "hello\n" and out.content["text"] == "hello\n"
        (rec,) = r.ops()
        assert rec["ok"] and rec["policy_digest"] == r.executor.policy_digest
        assert rec["decision"]["effect"] == "allow"


def test_the_record_keeps_an_excerpt_and_the_digest_of_what_the_model_saw(
    tmp_path: Path,
) -> None:
    with rig(tmp_path) as r:
        r.redactor.register("tok-0123456789-abcdefgh", name="t")
        (r.root / "a.txt").write_text("x" * 150 + " tok-0123456789-abcdefgh " + "y" * 5000)
        out = r.executor.dispatch(Call("read", {"path": "a.txt"}), _ctx())
        (rec,) = r.ops()
    assert out.ok and "[redacted]" in out.view and "tok-0123456789" not in out.view
    assert rec["view"] == out.view[:160] and rec["view_chars"] == len(out.view)
    assert rec["view_sha256"] == hashlib.sha256(out.view.encode()).hexdigest()
    assert "tok-0123456789" not in json.dumps(rec)


@pytest.mark.parametrize(
    ("call", "reason"),
    [
        (Call("rm_rf", {}), EnvelopeReason.UNKNOWN_OPERATION),
        (Call("read", {"path": 3}), EnvelopeReason.INVALID_INPUT),
        (Call("read", {"path": "a", "extra": 1}), EnvelopeReason.INVALID_INPUT),
        (Call("read", {"path": ".env"}), EnvelopeReason.POLICY_DENIED),
        (Call("read", {"path": "../outside"}), EnvelopeReason.POLICY_DENIED),
        (Call("read", {"path": "missing.txt"}), EnvelopeReason.OPERATION_FAILED),
    ],
)
def test_refusals_are_outcomes_and_evidence(
    tmp_path: Path, call: Call, reason: EnvelopeReason
) -> None:
    with rig(tmp_path) as r:
        (r.root / ".env").write_text("TOKEN=x\n")
        out = r.executor.dispatch(call, _ctx())
        assert not out.ok and out.reason is reason
        (rec,) = r.ops()
        assert rec["ok"] is False and rec["reason"] == reason.value
        assert rec["policy_digest"] == r.executor.policy_digest
        assert r.verified() == 2  # genesis + the record


def test_write_requires_approval_and_anything_but_true_denies(tmp_path: Path) -> None:
    with rig(tmp_path) as r:
        for answer in (None, "yes", 1, False):
            out = r.executor.dispatch(
                Call("write", {"path": "w.txt", "content": "x"}),
                _ctx(approver=ScriptedApprover([answer])),
            )
            assert out.reason is EnvelopeReason.APPROVAL_DENIED
        assert not (r.root / "w.txt").exists()
        out = r.executor.dispatch(
            Call("write", {"path": "w.txt", "content": "x"}),
            _ctx(approver=ScriptedApprover([True])),
        )
        assert out.ok and (r.root / "w.txt").read_text() == "x"  # positive control
        approvals = [x.data["granted"] for x in r.records() if x.kind == "approval"]
        assert approvals == [False, False, False, False, True]


def test_destructive_asks_even_under_permissive_rules(tmp_path: Path) -> None:
    with rig(tmp_path, policy=PERMISSIVE) as r:
        (r.root / "keep.txt").write_text("k")
        out = r.executor.dispatch(Call("remove", {"path": "keep.txt"}), _ctx())
        assert out.reason is EnvelopeReason.APPROVAL_DENIED
        assert (r.root / "keep.txt").exists()
        # a non-destructive write under the same rules runs without asking
        assert r.executor.dispatch(Call("write", {"path": "n", "content": "1"}), _ctx()).ok
        out = r.executor.dispatch(
            Call("remove", {"path": "keep.txt"}), _ctx(approver=ScriptedApprover([True]))
        )
        assert out.ok and not (r.root / "keep.txt").exists()


def test_edit_exact_and_ambiguous(tmp_path: Path) -> None:
    with rig(tmp_path, policy=PERMISSIVE) as r:
        f = r.root / "f.txt"
        f.write_text("a b a\n")
        out = r.executor.dispatch(Call("edit", {"path": "f.txt", "old": "a", "new": "c"}), _ctx())
        assert out.reason is EnvelopeReason.OPERATION_FAILED and "ambiguous" in (out.error or "")
        assert f.read_text() == "a b a\n"
        assert r.executor.dispatch(
            Call("edit", {"path": "f.txt", "old": "b", "new": "B"}), _ctx()
        ).ok
        assert f.read_text() == "a B a\n"


def test_patch_is_all_or_nothing(tmp_path: Path) -> None:
    with rig(tmp_path, policy=PERMISSIVE) as r:
        f = r.root / "p.txt"
        f.write_text("one\ntwo\n")
        bad = {"path": "p.txt", "edits": [{"old": "one", "new": "1"}, {"old": "zzz", "new": "x"}]}
        assert not r.executor.dispatch(Call("patch", bad), _ctx()).ok
        assert f.read_text() == "one\ntwo\n"
        good = {"path": "p.txt", "edits": [{"old": "one", "new": "1"}, {"old": "two", "new": "2"}]}
        assert r.executor.dispatch(Call("patch", good), _ctx()).ok
        assert f.read_text() == "1\n2\n"


def test_secret_reference_resolved_inside_and_redacted_everywhere(tmp_path: Path) -> None:
    value = "s3cr3t-VALUE-42-abcdef"
    with rig(tmp_path, policy=PERMISSIVE, environ={"API_TOKEN": value}) as r:
        argv = ["sh", "-c", 'echo "token=$TOKEN"; echo "len=${#TOKEN}"; echo "$TOKEN" >&2; exit 3']
        out = r.executor.dispatch(
            Call("proc.run", {"argv": argv, "env": {"TOKEN": "secret:env/API_TOKEN"}}), _ctx()
        )
        assert out.ok
        # positive control: the process really got the value (its length)
        assert f"len={len(value)}" in out.view
        assert value not in out.view and value not in json.dumps(out.content)
        assert "[redacted]" in out.content["stdout"] and "[redacted]" in out.content["stderr"]
        assert value.encode() not in r.log_path.read_bytes()
        (rec,) = r.ops()
        assert rec["input"]["env"]["TOKEN"] == "secret:env/API_TOKEN"  # the reference only


def test_unresolvable_secret_refuses_before_running(tmp_path: Path) -> None:
    with rig(tmp_path, policy=PERMISSIVE) as r:
        out = r.executor.dispatch(
            Call("proc.run", {"argv": ["touch", "ran"], "env": {"T": "secret:env/NOPE"}}), _ctx()
        )
        assert out.reason is EnvelopeReason.SECRET_UNRESOLVED
        assert not (r.root / "ran").exists()


def test_not_offered_operation_is_refused(tmp_path: Path) -> None:
    with rig(tmp_path, policy=PERMISSIVE) as r:
        out = r.executor.dispatch(
            Call("write", {"path": "x", "content": "y"}), _ctx(offered=frozenset({"read"}))
        )
        assert out.reason is EnvelopeReason.NOT_OFFERED and not (r.root / "x").exists()


# -- batches and receipts ------------------------------------------------------------
def _batch(content: str = "x") -> ActionBatch:
    return ActionBatch.freeze([Action.of("write", {"path": "a", "content": content})])


def test_receipt_is_one_shot_and_bound() -> None:
    book = ReceiptBook(MemoryLedger())
    batch = _batch()
    bind = {"session": "s1", "caller": "agent", "policy_digest": "p1"}
    receipt = book.issue(batch, **bind)
    cases = [
        (_batch("changed"), bind, "changed"),
        (batch, {**bind, "session": "s2"}, "another session"),
        (batch, {**bind, "caller": "other"}, "another caller"),
        (batch, {**bind, "policy_digest": "p2"}, "policy changed"),
    ]
    for b, kw, why in cases:
        with pytest.raises(EnvelopeError) as info:
            book.consume(receipt, b, **kw)
        assert info.value.reason is EnvelopeReason.RECEIPT_INVALID and why in info.value.message
    book.consume(receipt, batch, **bind)  # the failed checks did not use it up
    with pytest.raises(EnvelopeError, match="already used"):
        book.consume(receipt, batch, **bind)


def test_forged_and_stale_receipts_fail() -> None:
    batch = _batch()
    bind = {"session": "s1", "caller": "agent", "policy_digest": "p1"}
    receipt = ReceiptBook(MemoryLedger()).issue(batch, **bind)
    with pytest.raises(EnvelopeError, match="not issued"):
        ReceiptBook(MemoryLedger()).consume(receipt, batch, **bind)  # another key
    stale = ReceiptBook(MemoryLedger(), max_age_s=-1.0)
    with pytest.raises(EnvelopeError, match="stale"):
        stale.consume(stale.issue(batch, **bind), batch, **bind)


def test_consumption_is_durable_across_store_reopen(tmp_path: Path) -> None:
    path = str(tmp_path / "s.db")
    key = b"k" * 32
    batch = _batch()
    bind = {"session": "s1", "caller": "agent", "policy_digest": "p1"}
    store = SessionStore(path)
    receipt = ReceiptBook(store, key=key).issue(batch, **bind)
    ReceiptBook(store, key=key).consume(receipt, batch, **bind)
    store.close()
    again = SessionStore(path)
    with pytest.raises(EnvelopeError, match="already used"):
        ReceiptBook(again, key=key).consume(receipt, batch, **bind)
    again.close()


def test_stored_batch_changed_under_its_digest_fails() -> None:
    data = _batch().to_json()
    data["actions"][0]["input"]["content"] = "tampered"
    with pytest.raises(EnvelopeError) as info:
        ActionBatch.from_json(data)
    assert info.value.reason is EnvelopeReason.RECEIPT_INVALID
