"""Arbitrary JSON data round-trips and verifies; the line grammar accepts exactly the
canonical encoding (cross-checked against a json-module oracle)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flux_evidence import (
    EvidenceLog,
    InvalidEvidenceError,
    MemoryEvidenceLog,
    canonical_json,
    verify,
    verify_bytes,
)
from flux_evidence._scan import parse_line

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**200), max_value=2**200)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5)
    ),
    max_leaves=25,
)
LABEL = st.none() | st.text(max_size=20)


@given(
    data=st.lists(JSON, min_size=1, max_size=5),
    kind=st.text(min_size=1, max_size=20),
    session=LABEL,
    actor=LABEL,
    turn=st.none() | st.integers(min_value=-(2**70), max_value=2**70),
)
def test_arbitrary_json_roundtrips_and_verifies(
    data: list[Any], kind: str, session: str | None, actor: str | None, turn: int | None
) -> None:
    log = MemoryEvidenceLog(log_id="h")
    records = [log.append(kind, d, session=session, turn=turn, actor=actor) for d in data]
    raw = log.to_bytes()
    result = verify_bytes(raw, expect_head=log.head())
    assert result.head == log.head()
    lines = raw.splitlines()
    for record, value, line in zip(records, data, lines[1:], strict=True):
        assert record.data == value
        assert json.loads(line)["data"] == value
        assert line == canonical_json(record.to_json())  # the writer's assembly is canonical
        assert parse_line(line) is not None


def test_file_roundtrip_of_unusual_values(tmp_path: Path) -> None:
    values: list[Any] = [
        {"big": 2**1000, "neg": -(2**64), "float": 1e-300, "zero": -0.0},
        {"unicode": 'é€😀\u2028\u0000\u001f"\\', "nested": [[[{"a": [None]}]]]},
        {"hash": "x", "kind": "y", ',"hash":"': 1, "prev_hash": "z"},
        "a string",
        123,
        None,
    ]
    path = tmp_path / "ev.jsonl"
    with EvidenceLog.open(path) as log:
        for value in values:
            log.append("v", value, session="ünï", actor='a"b')
        head = log.head()
    verify(path, expect_head=head)
    with EvidenceLog.open(path, readonly=True) as log:
        assert [r.data for r in log.query(kind="v")] == values
        assert {r.session for r in log.query(kind="v")} == {"ünï"}


def _oracle(line: bytes) -> bool:
    """The slow, obvious definition: a JSON object with exactly the record keys and
    types whose canonical encoding is the line itself."""
    try:
        obj = json.loads(line.decode("utf-8"), parse_constant=_refuse)
    except (ValueError, RecursionError):
        return False
    keys = {"actor", "data", "hash", "kind", "prev_hash", "seq", "session", "ts", "turn"}
    if type(obj) is not dict or obj.keys() != keys | {"version"}:
        return False

    def hex64(v: object) -> bool:
        return type(v) is str and len(v) == 64 and all(c in "0123456789abcdef" for c in v)

    ok = (
        obj["version"] == 1
        and type(obj["version"]) is int
        and type(obj["seq"]) is int
        and obj["seq"] >= 0
        and type(obj["ts"]) is int
        and type(obj["kind"]) is str
        and (obj["session"] is None or type(obj["session"]) is str)
        and (obj["actor"] is None or type(obj["actor"]) is str)
        and (obj["turn"] is None or type(obj["turn"]) is int)
        and hex64(obj["hash"])
        and hex64(obj["prev_hash"])
    )
    if not ok:
        return False
    try:
        return canonical_json(obj) == line
    except Exception:
        return False


def _refuse(name: str) -> Any:
    raise ValueError(name)


@settings(max_examples=400)
@given(
    value=JSON,
    label=st.text(max_size=6),
    pos=st.integers(min_value=0),
    byte=st.integers(0, 255),
    insert=st.booleans(),
)
def test_line_grammar_matches_oracle(
    value: Any, label: str, pos: int, byte: int, insert: bool
) -> None:
    log = MemoryEvidenceLog(log_id="g")
    log.append(label or "k", value, session=label, actor=label)
    line = log.to_bytes().splitlines()[1]
    assert parse_line(line) is not None and _oracle(line)
    pos %= len(line) + (1 if insert else 0)
    mutated = line[:pos] + bytes([byte]) + line[pos + (0 if insert else 1) :]
    if b"\n" in mutated:
        return
    assert (parse_line(mutated) is not None) == _oracle(mutated)


def _line(data: bytes = b"1", **fields: bytes) -> bytes:
    """A record line (valid grammar by default) with some envelope fields replaced."""
    env = {"hash": b'"' + b"0" * 64 + b'"', "kind": b'"k"', "prev_hash": b'"' + b"0" * 64 + b'"'}
    env |= {"seq": b"1", "session": b"null", "ts": b"1", "turn": b"null", "version": b"1"}
    env |= fields
    tail = b",".join(b'"%b":%b' % (key.encode(), value) for key, value in env.items())
    return b'{"actor":null,"data":%b,%b}' % (data, tail)


@pytest.mark.parametrize(
    "line",
    [
        _line(b'{"a":1,"a":2}'),
        _line(b"NaN"),
        _line(kind=b'"\\u0041"'),
        _line(seq=b"01"),
        _line(hash=b'"' + b"A" * 64 + b'"'),
        _line(version=b"2"),
    ],
    ids=["duplicate-key", "nan", "needless-escape", "leading-zero", "uppercase-hex", "version"],
)
def test_non_canonical_lines_are_rejected(line: bytes) -> None:
    assert parse_line(_line()) is not None  # the template itself is a valid line
    assert parse_line(line) is None
    assert not _oracle(line)
    with pytest.raises(InvalidEvidenceError):
        verify_bytes(line + b"\n")


ENTRY = st.tuples(
    st.sampled_from(["tool_call", "note", 'é"\\\n']),
    st.none() | st.sampled_from(["s1", "s2", "ünï\u2028"]),
    JSON,
    LABEL,
    st.none() | st.integers(min_value=-(2**70), max_value=2**70),
)


@settings(max_examples=40)
@given(entries=st.lists(ENTRY, max_size=12), since=st.integers(min_value=-2, max_value=15))
def test_iteration_and_queries_return_the_records_append_returned(
    tmp_path_factory: pytest.TempPathFactory,
    entries: list[tuple[str, str | None, Any, str | None, int | None]],
    since: int,
) -> None:
    """Records are kept as their lines and decoded on demand: what iteration and
    ``query`` give back equals what ``append`` returned — in memory, in a file log, and
    after reopening the file (where the index is rebuilt by the scan)."""
    path = tmp_path_factory.mktemp("rt") / "ev.jsonl"
    memory = MemoryEvidenceLog(log_id="h")
    with EvidenceLog.open(path, fsync="never", log_id="h") as log:
        returned = [log.append(k, d, session=s, actor=a, turn=t) for k, s, d, a, t in entries]
        for k, s, d, a, t in entries:
            memory.append(k, d, session=s, actor=a, turn=t)
        open_views = [list(log)[1:], log.query(since_seq=1)]
    with EvidenceLog.open(path, readonly=True) as reopened:
        views = [*open_views, list(reopened)[1:], reopened.query(since_seq=1)]
        for view in views:
            assert view == returned
        assert [r.data for r in memory][1:] == [r.data for r in returned]
        for kind in ("tool_call", "note", 'é"\\\n', None):
            for session in ("s1", "ünï\u2028", None):
                expected = [
                    r
                    for r in returned
                    if r.seq >= since
                    and (kind is None or r.kind == kind)
                    and (session is None or r.session == session)
                ]
                got = reopened.query(kind=kind, session=session, since_seq=since)
                assert [r for r in got if r.seq > 0] == expected
