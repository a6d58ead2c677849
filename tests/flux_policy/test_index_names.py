"""The indexed evaluator's fast name check refuses exactly what the full check refuses.

``_request_errors`` skips the per-name checks when one joined test shows all three
names are fine; here every conjunct of that test is given a name that fails it (each
name of the request in turn: empty, one past the length limit, a group reference, a
control character), and a ``str`` subclass whose ``+`` hides a control character, so
the decision and its errors must equal the reference evaluator's.
"""

from __future__ import annotations

import pytest

from flux_policy import (
    Effect,
    EvalErrorReason,
    IndexedEvaluator,
    ReferenceEvaluator,
    Request,
    load_policy_string,
)
from flux_policy._pattern import MAX_NAME_LENGTH

EVERYTHING = """
version = 1
[[grant]]
id = "all"
subjects = ["**"]
actions = ["**"]
resources = ["**"]
"""

GOOD = {"subject": "user:a", "action": "fs.read", "resource": "workspace/x"}
BAD = {
    "empty": "",
    "too-long": "x" * (MAX_NAME_LENGTH + 1),
    "group": "group:x",
    "role": "role:x",
    "control": "a\x00b",
    "surrogate": "a\ud800",
}
AT_LIMIT = "x" * MAX_NAME_LENGTH


def _with(field: str, value: str) -> Request:
    names = {**GOOD, field: value}
    return Request(names["subject"], names["action"], names["resource"])


def _same(req: Request) -> tuple[Effect, list[dict[str, object]]]:
    policy = load_policy_string(EVERYTHING, source="everything")
    ref = ReferenceEvaluator(policy).evaluate(req)
    for idx in (
        IndexedEvaluator(policy).evaluate(req),
        IndexedEvaluator(policy, cache=4).evaluate(req),
    ):
        assert idx.effect == ref.effect
        assert [e.to_json() for e in idx.errors] == [e.to_json() for e in ref.errors]
    return ref.effect, [e.to_json() for e in ref.errors]


@pytest.mark.parametrize("field", sorted(GOOD))
@pytest.mark.parametrize("bad", sorted(BAD))
def test_each_bad_name_is_refused_by_name(field: str, bad: str) -> None:
    effect, errors = _same(_with(field, BAD[bad]))
    assert effect is Effect.DENY
    assert [(e["field"], e["reason"]) for e in errors] == [
        (field, EvalErrorReason.INVALID_NAME.value)
    ]


@pytest.mark.parametrize("field", sorted(GOOD))
def test_a_name_at_the_length_limit_is_accepted(field: str) -> None:
    effect, errors = _same(_with(field, AT_LIMIT))
    assert (effect, errors) == (Effect.ALLOW, [])  # the positive control: all is granted


class _Glue(str):
    """A str whose concatenation hides its text (``+`` on either side gives ``"x"``)."""

    def __add__(self, other: object) -> str:
        return "x"

    def __radd__(self, other: object) -> str:
        return "x"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("subject", "a\x00"),
        ("action", "read\x00"),
        ("resource", "workspace/\x00/.."),  # the control segment is gone once normalised
    ],
)
def test_a_str_subclass_cannot_hide_a_control_character(field: str, value: str) -> None:
    name = _Glue(value)
    assert "x" + name == "x" and name + "x" == "x"  # the disguise works
    effect, errors = _same(_with(field, name))
    assert effect is Effect.DENY
    assert [(e["field"], e["reason"]) for e in errors] == [
        (field, EvalErrorReason.INVALID_NAME.value)
    ]
