"""Inputs near the limits of evidence and redaction, on the real Executor.

An input the evidence log cannot hold must be refused before anything runs — a typed
``INVALID_INPUT`` outcome and a refused record — never escape as ``EvidenceError`` or
``RedactionError`` after the handler ran. Probed with hypothesis: deep lists and dicts
(between the 64 the executor allows and the log's 128), long keys, huge integers,
NaN and the infinities, non-``str`` keys, objects that are not JSON; and through the
built-in catalog (the schema accepts any object for ``proc.run``'s ``env``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flux_evidence import EvidenceLog, verify
from flux_policy import IndexedEvaluator, load_policy_string
from flux_runtime import Call, Catalog, Context, EnvelopeReason, Executor, Operation, Result, Risk
from flux_runtime._recordable import unrecordable
from flux_secret import Redactor
from flux_system import Workspace
from flux_system.port import Substrate
from tests.flux_runtime._runtime import PERMISSIVE, rig

RAN: list[object] = []


def _echo(s: Substrate, inp: Mapping[str, Any]) -> Result:
    RAN.append(inp)
    return Result({"n": len(inp)}, "ran")


ECHO = Operation(
    "echo",
    "Echo (test).",
    {"type": "object"},
    frozenset({"read"}),
    Risk.LOW,
    True,
    _echo,
    lambda i: ["system/clock"],
)


def _deep(leaf: object, depth: int, as_dict: bool) -> object:
    for _ in range(depth):
        leaf = {"k": leaf} if as_dict else [leaf]
    return leaf


leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.builds(
        lambda e, sign: sign * 10**e, st.sampled_from([3900, 4000, 5000]), st.sampled_from([1, -1])
    ),
    st.just(2**13_001),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(["\ud800", "a\udcff", "x" * 10_000]),
    st.binary(max_size=8),
    st.sampled_from([{1, 2}, object(), b"raw", complex(1, 2)]),
)
keys = st.one_of(
    st.text(max_size=10),
    st.sampled_from(["k" * 100_000, "\ud800"]),
    st.integers(),
    st.booleans(),
    st.none(),
    st.floats(),
)
trees = st.recursive(
    leaves,
    lambda kids: st.one_of(
        st.lists(kids, max_size=4),
        st.tuples(kids, kids),
        st.dictionaries(keys, kids, max_size=4),
    ),
    max_leaves=20,
)
nested = st.builds(_deep, leaves, st.integers(60, 140), st.booleans())


def _check(executor: Executor, log: EvidenceLog, inp: object) -> None:
    RAN.clear()
    before = len(list(log))
    out = executor.dispatch(Call("echo", {"v": inp}), Context("s", "agent"))  # never raises
    refused = unrecordable({"v": inp}) is not None
    records = list(log)[before:]
    assert len(records) == 1 and records[0].kind == "operation"
    if refused:
        assert not out.ok and out.reason is EnvelopeReason.INVALID_INPUT, out
        assert RAN == []  # nothing ran
        assert records[0].data["reason"] == "invalid_input"
    else:
        assert out.ok and len(RAN) == 1


@pytest.fixture
def echo_executor(tmp_path: Path) -> Any:
    root = tmp_path / "ws"
    root.mkdir()
    log = EvidenceLog.open(tmp_path / "ev.jsonl", fsync="never")
    policy = load_policy_string(PERMISSIVE)
    redactor = Redactor()
    redactor.register("zz-registered-secret-42", name="s")
    executor = Executor(
        Substrate.native(Workspace(root)),
        Catalog([ECHO]),
        evaluator=IndexedEvaluator(policy),
        policy_digest=policy.digest,
        redactor=redactor,
        evidence=log,
    )
    yield executor, log
    log.close()
    verify(tmp_path / "ev.jsonl")


_SETTINGS = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@_SETTINGS
@given(inp=trees)
def test_any_tree_is_run_and_recorded_or_refused_before_it_runs(
    echo_executor: Any, inp: object
) -> None:
    executor, log = echo_executor
    _check(executor, log, inp)


@_SETTINGS
@given(inp=nested)
def test_deep_nesting_is_refused_before_it_runs(echo_executor: Any, inp: object) -> None:
    executor, log = echo_executor
    _check(executor, log, inp)


@pytest.mark.parametrize(
    "value",
    [math.nan, math.inf, -math.inf, 10**5000, {1: "x"}, {None: "x"}, {"k": {1, 2}}, b"raw"],
    ids=["nan", "inf", "-inf", "huge-int", "int-key", "none-key", "set", "bytes"],
)
def test_builtin_operations_refuse_unrecordable_input_before_running(
    tmp_path: Path, value: object
) -> None:
    # proc.run's env is {"type": "object"}: the schema lets any value through, and the
    # evidence append used to raise EvidenceError (after the process ran, when allowed).
    marker = tmp_path / "ws" / "ran"
    with rig(tmp_path, policy=PERMISSIVE) as r:
        ok = Call("proc.run", {"argv": ["/bin/sh", "-c", f"touch {marker}"], "env": {"A": "1"}})
        assert r.executor.dispatch(ok, Context("s", "agent")).ok  # positive control
        assert marker.exists()
        os.unlink(marker)
        bad = Call("proc.run", {"argv": ["/bin/sh", "-c", f"touch {marker}"], "env": {"A": value}})
        out = r.executor.dispatch(bad, Context("s", "agent"))
        assert not out.ok and out.reason is EnvelopeReason.INVALID_INPUT, out
        assert not marker.exists()
        assert r.ops()[-1]["reason"] == "invalid_input"
        assert r.verified() == len(r.records())


def _surrogate(s: Substrate, inp: Mapping[str, Any]) -> Result:
    if inp.get("fail"):
        raise OSError(2, "no such file", "bad\udcff.txt")
    return Result({"name": "bad\udcff.txt", "bad\udcfe": 1}, "bad\udcff.txt")


def test_a_result_or_error_holding_a_lone_surrogate_is_recorded(tmp_path: Path) -> None:
    # A handler's text may carry a lone surrogate (a file name that is not UTF-8, kept
    # by surrogateescape): the evidence append refused it after the handler ran.
    with EvidenceLog.open(tmp_path / "ev.jsonl", fsync="never") as log:
        executor = _one_op(tmp_path, "names", _surrogate, log)
        out = executor.dispatch(Call("names", {}), Context("s", "agent"))
        assert out.ok and out.view == "bad\\udcff.txt"
        assert out.content == {"name": "bad\\udcff.txt", "bad\\udcfe": 1}
        failed = executor.dispatch(Call("names", {"fail": True}), Context("s", "agent"))
        assert not failed.ok and "bad\\udcff.txt" in failed.view
    assert verify(tmp_path / "ev.jsonl").head.size == 3


class _Opaque:
    pass


def _opaque(s: Substrate, inp: Mapping[str, Any]) -> Result:
    RAN.append(inp)
    return Result({"thing": _Opaque()}, "ran")


def test_a_result_the_redactor_cannot_walk_is_withheld_as_a_failure(tmp_path: Path) -> None:
    # RedactionError after the handler ran was reported as secret_unresolved (no secret
    # was involved); it is an operation failure, the result withheld, and recorded.
    RAN.clear()
    with EvidenceLog.open(tmp_path / "ev.jsonl", fsync="never") as log:
        executor = _one_op(tmp_path, "opaque", _opaque, log)
        out = executor.dispatch(Call("opaque", {}), Context("s", "agent"))
    assert RAN == [{}]  # the handler ran
    assert not out.ok and out.reason is EnvelopeReason.OPERATION_FAILED, out
    assert out.content is None and "withheld" in out.view
    assert verify(tmp_path / "ev.jsonl").head.size == 2


def _one_op(tmp_path: Path, name: str, handler: Any, log: EvidenceLog) -> Executor:
    """An executor over a fresh workspace whose catalog is one test operation *name*
    (any object as input) and whose policy allows everything."""
    root = tmp_path / "ws"
    root.mkdir(exist_ok=True)
    op = Operation(
        name,
        "A test operation.",
        {"type": "object"},
        frozenset({"read"}),
        Risk.LOW,
        True,
        handler,
        lambda i: ["system/clock"],
    )
    policy = load_policy_string(PERMISSIVE)
    return Executor(
        Substrate.native(Workspace(root)),
        Catalog([op]),
        evaluator=IndexedEvaluator(policy),
        policy_digest=policy.digest,
        redactor=Redactor(),
        evidence=log,
    )
