"""The thin loop end to end, with the scripted provider and real components."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from flux_runtime import (
    Bounds,
    EnvelopeError,
    EnvelopeReason,
    ModelRequest,
    ScriptedApprover,
    ScriptedProvider,
    Turn,
)
from flux_system.remote import connect
from tests.flux_runtime._runtime import DONE, PERMISSIVE, Rig, answer, calls, intent, rig
from tests.flux_system.remote._harness import served

EDIT = (
    "edit",
    {"path": "CHANGELOG.md", "old": "# Changelog\n", "new": "# Changelog\n\n## 0.4.0\n"},
)
SCRIPT: list[object] = [
    intent(),
    calls(("read", {"path": "VERSION"}), ("read", {"path": "CHANGELOG.md"})),
    calls(EDIT),
    DONE,
    answer("added 0.4.0"),
]


class Recording:
    """A scripted provider that keeps every request it was sent (what the model saw)."""

    def __init__(self, replies: list[object]) -> None:
        self.inner = ScriptedProvider([json.dumps(r) for r in replies])
        self.requests: list[ModelRequest] = []

    def complete(self, request: ModelRequest) -> str:
        self.requests.append(request)
        return self.inner.complete(request)


def _seed(root: Path) -> None:
    (root / "VERSION").write_text("0.4.0\n")
    (root / "CHANGELOG.md").write_text("# Changelog\n\n## 0.3.0\n")


def _check_turn(r: Rig) -> None:
    _seed(r.root)
    result = r.turn(SCRIPT, ScriptedApprover([True])).start("update the changelog")
    assert result.status == "done", result.error
    assert result.answer == "added 0.4.0"
    assert (r.root / "CHANGELOG.md").read_text().startswith("# Changelog\n\n## 0.4.0\n")
    assert r.kinds() == [
        "turn.start",
        "model.call",
        "intent",
        "model.call",
        "operation",
        "operation",
        "model.call",
        "capture",
        "model.call",
        "batch",
        "approval",
        "receipt",
        "operation",
        "model.call",
        "turn.done",
    ]
    ops = r.ops()
    assert [o["op"] for o in ops] == ["read", "read", "edit"]
    assert ops[2]["batch"] is not None and ops[2]["approval"]["by"] == "receipt"
    assert all(o["policy_digest"] == r.executor.policy_digest for o in ops)
    assert r.verified() == len(r.records())


def test_turn_end_to_end(tmp_path: Path) -> None:
    with rig(tmp_path) as r:
        _check_turn(r)


def test_turn_end_to_end_on_a_remote_substrate(tmp_path: Path) -> None:
    root = tmp_path / "remote-ws"
    root.mkdir()
    with served(root) as srv, connect(srv.target) as sub, rig(tmp_path, substrate=sub) as r:
        r.root = root  # the files live on the far side
        _check_turn(r)


def test_denied_batch_runs_nothing_and_is_recorded(tmp_path: Path) -> None:
    with rig(tmp_path) as r:
        _seed(r.root)
        for approver in (ScriptedApprover([None]), ScriptedApprover([])):
            result = r.turn(SCRIPT, approver).start("update")
            assert result.status == "done"
            assert result.outcomes[0]["reason"] == "approval_denied"
        assert "0.4.0" not in (r.root / "CHANGELOG.md").read_text()
        grants = [x.data["granted"] for x in r.records() if x.kind == "approval"]
        assert grants == [False, False]
        assert "receipt" not in r.kinds()


def test_model_cannot_label_a_write_as_a_read(tmp_path: Path) -> None:
    with rig(tmp_path) as r:
        _seed(r.root)
        sneaky = {
            "type": "calls",
            "calls": [
                {
                    "op": "write",
                    "gather_safe": True,
                    "risk": "low",
                    "input": {"path": "x", "content": "1"},
                }
            ],
        }
        result = r.turn([intent(), sneaky, DONE, answer()]).start("go")
        assert not (r.root / "x").exists()  # captured, then denied by the headless approver
        assert "capture" in r.kinds() and result.outcomes[0]["reason"] == "approval_denied"


def test_inspect_intent_hides_writes(tmp_path: Path) -> None:
    with rig(tmp_path) as r:
        rec = Recording(
            [intent("inspect"), calls(("write", {"path": "x", "content": "1"})), DONE, answer()]
        )
        result = Turn(r.executor, rec, r.store, ScriptedApprover([True])).start("look")
        assert result.status == "done" and not (r.root / "x").exists()
        offered = {o["name"] for o in rec.requests[1].operations}
        assert "write" not in offered and "read" in offered
        assert r.ops()[0]["reason"] == "not_offered"


def test_secret_printed_by_a_tool_never_reaches_model_output_or_evidence(
    tmp_path: Path,
) -> None:
    value = "hunter2-LONG-secret-value"
    with rig(tmp_path, policy=PERMISSIVE, environ={"DB_PASSWORD": value}) as r:
        run = (
            "proc.run",
            {
                "argv": ["sh", "-c", 'echo "pw=$P len=${#P}"'],
                "env": {"P": "secret:env/DB_PASSWORD"},
            },
        )
        rec = Recording([intent(), calls(run), DONE, answer("printed it")])
        result = Turn(r.executor, rec, r.store, ScriptedApprover([True])).start("print it")
        assert result.status == "done", result.error
        seen = json.dumps([list(q.messages) for q in rec.requests])
        assert f"len={len(value)}" in seen  # positive control: the tool ran with the value
        assert value not in seen
        assert value not in json.dumps(list(result.outcomes))
        assert value.encode() not in r.log_path.read_bytes()
        assert "[redacted]" in seen


@pytest.mark.parametrize(
    ("reply", "received"),
    [
        ('"just text"', "str"),
        ("42", "int"),
        ("not json", "str"),
        ('{"intent": "change"}', "object without type"),
        ('{"type": "calls", "calls": []}', "tag 'calls'"),
    ],
)
def test_untagged_stage_answer_stops_the_turn(tmp_path: Path, reply: str, received: str) -> None:
    with rig(tmp_path) as r:
        result = r.turn([reply]).start("go")
        assert result.status == "failed" and result.error is not None
        assert result.error.reason is EnvelopeReason.BAD_STAGE_OUTPUT
        assert "'intent'" in str(result.error) and received in str(result.error)
        (rejected,) = [x.data for x in r.records() if x.kind == "stage.rejected"]
        assert rejected["stage"] == "intent" and len(rejected["excerpt"]) <= 240


def test_model_call_bound(tmp_path: Path) -> None:
    with rig(tmp_path) as r:
        (r.root / "a").write_text("a")
        loop = [intent()] + [calls(("read", {"path": "a"}))] * 5
        result = r.turn(loop, bounds=Bounds(max_model_calls=3)).start("go")
        assert result.error is not None
        assert result.error.reason is EnvelopeReason.MODEL_CALLS_EXCEEDED
        assert [x.data["stage"] for x in r.records() if x.kind == "turn.failed"] == ["explore"]


def test_iteration_bound(tmp_path: Path) -> None:
    with rig(tmp_path) as r:
        (r.root / "a").write_text("a")
        loop = [intent()] + [calls(("read", {"path": "a"}))] * 5
        result = r.turn(loop, bounds=Bounds(max_iterations=2)).start("go")
        assert result.error is not None
        assert result.error.reason is EnvelopeReason.ITERATIONS_EXCEEDED


@pytest.mark.parametrize("n", [0, 1001, -1])
def test_iteration_bound_range_checked_before_start(n: int) -> None:
    with pytest.raises(EnvelopeError) as info:
        Bounds(max_iterations=n)
    assert info.value.reason is EnvelopeReason.BAD_BOUND


def test_question_suspends_and_resume_continues(tmp_path: Path) -> None:
    with rig(tmp_path) as r:
        _seed(r.root)
        script = [intent(), {"type": "question", "question": "which version?"}, *SCRIPT[1:]]
        first = r.turn(script).start("update")
        assert first.status == "suspended" and first.question == "which version?"
        # a new process: a new Turn over the same store continues the same state
        again = r.turn(script, ScriptedApprover([True])).resume(first.session, "0.4.0")
        assert again.status == "done", again.error
        assert "## 0.4.0" in (r.root / "CHANGELOG.md").read_text()
        kinds = r.kinds()
        assert kinds.index("turn.suspended") < kinds.index("turn.resumed")
        done = r.turn(script).resume(first.session, "again")
        assert done.status == "failed" and done.error is not None
        assert done.error.reason is EnvelopeReason.SESSION


def _suspended_after_execute(r: Rig) -> tuple[str, list[object]]:
    app = ("append", {"path": "log.txt", "content": "once\n"})
    script: list[object] = [
        intent(),
        calls(app),
        DONE,
        {"type": "question", "question": "ok?"},
        answer(),
    ]
    result = r.turn(script, ScriptedApprover([True])).start("append")
    assert result.status == "suspended"
    assert (r.root / "log.txt").read_text() == "once\n"
    return result.session, script


def _tamper(r: Rig, session: str, **changes: Any) -> None:
    state = r.store.load(session)
    state.update(changes)
    r.store.save(session, state, "suspended")


def test_resume_cannot_replay_a_consumed_receipt(tmp_path: Path) -> None:
    with rig(tmp_path) as r:
        session, script = _suspended_after_execute(r)
        _tamper(r, session, resume_stage="execute")
        result = r.turn(script, ScriptedApprover([True])).resume(session, "yes")
        assert result.error is not None and "already used" in str(result.error)
        assert (r.root / "log.txt").read_text() == "once\n"  # never replayed
        receipts = [x.data for x in r.records() if x.kind == "receipt"]
        assert [x["ok"] for x in receipts] == [True, False]


def test_resume_mid_execution_is_refused(tmp_path: Path) -> None:
    with rig(tmp_path) as r:
        session, script = _suspended_after_execute(r)
        _tamper(r, session, resume_stage="executing")
        result = r.turn(script).resume(session, "yes")
        assert result.error is not None
        assert result.error.reason is EnvelopeReason.RECEIPT_INVALID
        assert (r.root / "log.txt").read_text() == "once\n"


def test_receipt_from_another_session_fails_closed(tmp_path: Path) -> None:
    with rig(tmp_path) as r:
        session_a, script = _suspended_after_execute(r)
        a = r.store.load(session_a)
        b = r.turn([intent(), {"type": "question", "question": "?"}]).start("other")
        _tamper(r, b.session, batch=a["batch"], receipt=a["receipt"], resume_stage="execute")
        result = r.turn(script).resume(b.session, "go")
        assert result.error is not None and "another session" in str(result.error)
        assert (r.root / "log.txt").read_text() == "once\n"


def test_failed_action_skips_the_rest(tmp_path: Path) -> None:
    with rig(tmp_path) as r:
        batch = calls(
            ("edit", {"path": "nope.txt", "old": "a", "new": "b"}),
            ("write", {"path": "after.txt", "content": "x"}),
        )
        result = r.turn([intent(), batch, DONE, answer()], ScriptedApprover([True])).start("go")
        assert [o["ok"] for o in result.outcomes] == [False]
        assert not (r.root / "after.txt").exists()
        (stopped,) = [x.data for x in r.records() if x.kind == "batch.stopped"]
        assert stopped["skipped"] == 1


def test_inadmissible_calls_are_refused_not_captured(tmp_path: Path) -> None:
    with rig(tmp_path) as r:
        bad = calls(
            ("write", {"path": ".env", "content": "x"}),  # policy denies
            ("write", {"path": "a"}),  # invalid input
            ("no_such_op", {}),
        )
        approver = ScriptedApprover([True])
        result = r.turn([intent(), bad, DONE, answer()], approver).start("go")
        assert result.status == "done"
        assert approver.seen == []  # nothing reached the approver
        reasons = [o["reason"] for o in r.ops()]
        assert reasons == ["policy_denied", "invalid_input", "unknown_operation"]
        assert "capture" not in r.kinds() and not (r.root / ".env").exists()


def test_model_call_bound_counts_across_resumes(tmp_path: Path) -> None:
    with rig(tmp_path) as r:
        script = [intent(), {"type": "question", "question": "?"}, DONE, answer()]
        bounds = Bounds(max_model_calls=2)
        first = r.turn(script, bounds=bounds).start("go")
        assert first.status == "suspended"
        again = r.turn(script, bounds=bounds).resume(first.session, "a")
        assert again.error is not None
        assert again.error.reason is EnvelopeReason.MODEL_CALLS_EXCEEDED
