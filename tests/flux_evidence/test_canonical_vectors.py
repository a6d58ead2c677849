"""The evidence canonical form against fixed vectors, and every refusal with its text.

Vectors: ``tests/vectors/flux_evidence/canonical.json`` (value as any JSON text, the
exact canonical text). Refusals need Python values JSON cannot spell, so they are here.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from flux_evidence import EvidenceError, EvidenceReason
from flux_evidence._canonical import (
    MAX_DATA_DEPTH,
    canonical_json,
    encode_data,
    encode_str,
    loads_strict,
    too_deep,
)
from tests._vectors import load_vectors

CASES: list[dict[str, Any]] = load_vectors("flux_evidence", "canonical")


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_canonical_vector(case: dict[str, Any]) -> None:
    value = json.loads(case["json"])
    expected = case["canonical"].encode("utf-8")
    assert canonical_json(value) == expected
    assert encode_str(value) == case["canonical"]
    raw, copy = encode_data(value)
    assert (raw, copy) == (expected, value)
    assert copy is not value or not isinstance(value, dict | list)  # an independent copy
    assert loads_strict(case["canonical"]) == value
    assert b"\n" not in raw


def _nested(depth: int, kind: str = "list") -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value] if kind == "list" else {"k": value}
    return value


@pytest.mark.parametrize("kind", ["list", "dict"])
def test_depth_limit_on_both_sides(kind: str) -> None:
    _, copy = encode_data(_nested(MAX_DATA_DEPTH, kind))
    assert copy == _nested(MAX_DATA_DEPTH, kind)
    with pytest.raises(EvidenceError) as info:
        encode_data(_nested(MAX_DATA_DEPTH + 1, kind))
    assert info.value.reason is EvidenceReason.UNENCODABLE
    assert info.value.op == "encode"
    assert str(info.value) == f"value nests deeper than {MAX_DATA_DEPTH} arrays/objects"


def test_too_deep_counts_containers_not_brackets() -> None:
    many = ["[" * 200, {"k": "{" * 200}]  # more brackets than the bound, in strings
    text = encode_str(many)
    assert too_deep(text, json.loads(text)) is False
    assert encode_data(many)[1] == many
    wide = [[[0]] for _ in range(200)]  # many containers, each shallow
    assert too_deep(encode_str(wide), wide) is False
    # A deep branch after shallow ones, and a deep dict value after a scalar.
    mixed = [0, [1], _nested(MAX_DATA_DEPTH)]
    assert too_deep(encode_str(mixed), mixed) is True
    assert too_deep(encode_str(_nested(MAX_DATA_DEPTH)), _nested(MAX_DATA_DEPTH)) is False
    d = {"a": 1, "b": _nested(MAX_DATA_DEPTH, "dict")}
    assert too_deep(encode_str(d), d) is True
    s = "[" * (MAX_DATA_DEPTH + 1)
    assert too_deep(encode_str(s), s) is False  # a string: nothing to walk


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ((1, 2), "(tuple, non-str key, ...)"),
        ({1: "x"}, "(tuple, non-str key, ...)"),
        ({True: 1}, "(tuple, non-str key, ...)"),
        ([float("nan")], "(ValueError)"),
        (float("inf"), "(ValueError)"),
        ("\ud800", "(UnicodeEncodeError)"),
        (object(), "(TypeError)"),
        ({"k": {1, 2}}, "(TypeError)"),
    ],
    ids=["tuple", "int-key", "bool-key", "nan", "inf", "surrogate", "object", "set"],
)
def test_encode_data_refuses(value: object, why: str) -> None:
    with pytest.raises(EvidenceError) as info:
        encode_data(value)
    err = info.value
    assert (err.op, err.reason) == ("encode", EvidenceReason.UNENCODABLE)
    assert str(err) == f"value is not encodable as canonical JSON {why}"


def test_encode_data_refuses_a_cycle() -> None:
    cycle: list[object] = []
    cycle.append(cycle)
    with pytest.raises(EvidenceError, match=r"\(RecursionError\)$"):
        encode_data(cycle)


def test_canonical_json_rewrites_what_encode_data_refuses() -> None:
    assert canonical_json((1, 2)) == b"[1,2]"
    assert canonical_json({1: "x"}) == b'{"1":"x"}'
    with pytest.raises(EvidenceError) as info:
        canonical_json(float("nan"))
    assert (info.value.op, info.value.reason) == ("encode", EvidenceReason.UNENCODABLE)
    assert str(info.value) == "value is not encodable as canonical JSON (ValueError)"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "not JSON"),
        (" 1", "not JSON"),  # no whitespace skipped
        ("1 ", "trailing data after JSON value"),
        ("[1][2]", "trailing data after JSON value"),
        ("NaN", "non-finite number NaN is not canonical JSON"),
        ("[Infinity]", "non-finite number Infinity is not canonical JSON"),
        ("-Infinity", "non-finite number -Infinity is not canonical JSON"),
    ],
)
def test_loads_strict_refuses(text: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        loads_strict(text)
    assert str(info.value) == message


@pytest.mark.parametrize("kind", ["list", "dict"])
def test_depth_limit_when_the_brackets_outnumber_the_bound(kind: str) -> None:
    # More brackets than MAX_DATA_DEPTH (some in a string), so the walk decides.
    at_limit = [_nested(MAX_DATA_DEPTH - 1, kind), "[[[{{{"]
    assert encode_data(at_limit)[1] == at_limit
    over = [_nested(MAX_DATA_DEPTH, kind), "[[[{{{"]
    with pytest.raises(EvidenceError, match="nests deeper"):
        encode_data(over)


def test_an_unencodable_object_names_its_type_in_the_cause() -> None:
    with pytest.raises(EvidenceError) as info:
        encode_data({"k": {1, 2}})
    assert str(info.value.__cause__) == "set is not JSON"
