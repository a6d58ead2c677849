"""The log interface on both implementations (file and memory), its inputs and threads."""

from __future__ import annotations

import itertools
import math
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from flux_evidence import (
    EvidenceError,
    EvidenceLog,
    EvidenceReason,
    Head,
    MemoryEvidenceLog,
    canonical_json,
    genesis_hash,
    verify,
    verify_bytes,
)
from flux_evidence._base import LogBase


def _log_bytes(log: LogBase, path: Path | None) -> bytes:
    if isinstance(log, MemoryEvidenceLog):
        return log.to_bytes()
    assert path is not None
    return path.read_bytes()


@pytest.fixture(params=["file", "memory"])
def log_and_path(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[LogBase, Path]]:
    ticks = itertools.count(1000)
    path = tmp_path / "ev.jsonl"
    log: LogBase
    if request.param == "file":
        log = EvidenceLog.open(path, fsync="never", clock=lambda: next(ticks), log_id="L1")
    else:
        log = MemoryEvidenceLog(clock=lambda: next(ticks), log_id="L1")
    yield log, path
    log.close()


def test_append_chains_and_returns_the_stored_record(log_and_path: tuple[LogBase, Path]) -> None:
    log, path = log_and_path
    genesis = next(iter(log))
    assert (genesis.seq, genesis.kind, genesis.data) == (0, "genesis", {"log_id": "L1"})
    assert genesis.prev_hash == genesis_hash("L1")
    r1 = log.append("tool", {"name": "ls"}, session="s", turn=1, actor="agent")
    r2 = log.append("note", [1, "two", None], session="t")
    assert (r1.seq, r2.seq) == (1, 2)
    assert r1.prev_hash == genesis.hash and r2.prev_hash == r1.hash
    assert (r1.ts, r2.ts) == (1001, 1002)
    assert (r1.session, r1.turn, r1.actor) == ("s", 1, "agent")
    assert len(log) == 3
    assert log.head() == Head(3, r2.hash)
    assert list(log) == [genesis, r1, r2]
    data = _log_bytes(log, path)
    assert data.splitlines()[1] == canonical_json(r1.to_json())
    assert verify_bytes(data, expect_head=log.head()).head == log.head()


def test_query_filters(log_and_path: tuple[LogBase, Path]) -> None:
    log, _ = log_and_path
    for i in range(9):
        log.append(["a", "b", "c"][i % 3], {"i": i}, session=f"s{i % 2}")
    assert [r.data["i"] for r in log.query(kind="a")] == [0, 3, 6]
    assert [r.data["i"] for r in log.query(session="s1")] == [1, 3, 5, 7]
    assert [r.data["i"] for r in log.query(kind="b", session="s0")] == [4]
    assert [r.seq for r in log.query(since_seq=7)] == [7, 8, 9]


def test_data_is_a_copy(log_and_path: tuple[LogBase, Path]) -> None:
    log, _ = log_and_path
    data: dict[str, Any] = {"list": [1]}
    record = log.append("x", data)
    data["list"].append(2)
    assert record.data == {"list": [1]}


@pytest.mark.parametrize(
    "bad",
    [
        math.nan,
        {"x": math.inf},
        (1, 2),
        {1: "int key"},
        {True: "bool key"},
        {"s": {1, 2}},
        {"b": b"bytes"},
        "lone \ud800 surrogate",
        object(),
    ],
    ids=repr,
)
def test_unencodable_data_is_refused(log_and_path: tuple[LogBase, Path], bad: Any) -> None:
    log, path = log_and_path
    before = len(log)
    with pytest.raises(EvidenceError) as info:
        log.append("x", bad)
    assert info.value.reason is EvidenceReason.UNENCODABLE
    assert len(log) == before
    verify_bytes(_log_bytes(log, path), expect_head=log.head())


def test_circular_data_is_refused(log_and_path: tuple[LogBase, Path]) -> None:
    log, _ = log_and_path
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(EvidenceError) as info:
        log.append("x", loop)
    assert info.value.reason is EvidenceReason.UNENCODABLE


@pytest.mark.parametrize(
    "kwargs",
    [
        {"kind": ""},
        {"kind": 5},
        {"kind": "bad \udc00"},
        {"session": 3},
        {"actor": b"x"},
        {"turn": "1"},
        {"turn": True},
    ],
    ids=repr,
)
def test_bad_fields_are_refused(log_and_path: tuple[LogBase, Path], kwargs: dict[str, Any]) -> None:
    log, _ = log_and_path
    args: dict[str, Any] = {"kind": "k", **kwargs}
    kind = args.pop("kind")
    with pytest.raises(EvidenceError) as info:
        log.append(kind, {}, **args)
    assert info.value.reason is EvidenceReason.UNENCODABLE
    assert len(log) == 1


@pytest.mark.parametrize("kind", ["genesis", "recovery"])
def test_reserved_kinds(log_and_path: tuple[LogBase, Path], kind: str) -> None:
    log, _ = log_and_path
    with pytest.raises(EvidenceError) as info:
        log.append(kind, {})
    assert info.value.reason is EvidenceReason.BAD_ARGUMENT


def test_clock_must_return_int() -> None:
    with pytest.raises(EvidenceError) as info:
        MemoryEvidenceLog(clock=lambda: 1.5)  # type: ignore[arg-type,return-value]
    assert info.value.reason is EvidenceReason.UNENCODABLE
    values = iter([1, "later"])
    log = MemoryEvidenceLog(clock=lambda: next(values))  # type: ignore[arg-type,return-value]
    with pytest.raises(EvidenceError) as info:
        log.append("x", {})
    assert info.value.reason is EvidenceReason.UNENCODABLE
    assert len(log) == 1


def test_closed_log_refuses(log_and_path: tuple[LogBase, Path]) -> None:
    log, _ = log_and_path
    log.close()
    log.close()  # idempotent
    with pytest.raises(EvidenceError) as info:
        log.append("x", {})
    assert info.value.reason is EvidenceReason.CLOSED


def test_reopen_continues_the_chain(tmp_path: Path) -> None:
    path = tmp_path / "ev.jsonl"
    with EvidenceLog.open(path) as log:
        log.append("a", {"n": 1})
        head = log.head()
    with EvidenceLog.open(path, fsync="batch") as log:
        assert log.head() == head
        assert log.log_id and len(log) == 2
        log.append("b", {"n": 2})
    result = verify(path, expect_head=head)
    assert result.head.size == 3


def test_log_id_must_match_an_existing_log(tmp_path: Path) -> None:
    path = tmp_path / "ev.jsonl"
    EvidenceLog.open(path, log_id="one").close()
    with pytest.raises(EvidenceError) as info:
        EvidenceLog.open(path, log_id="two")
    assert info.value.reason is EvidenceReason.BAD_ARGUMENT
    with EvidenceLog.open(path, log_id="one") as log:
        assert log.log_id == "one"


def test_readonly_open(tmp_path: Path) -> None:
    path = tmp_path / "ev.jsonl"
    with pytest.raises(EvidenceError) as info:
        EvidenceLog.open(path, readonly=True)
    assert info.value.reason is EvidenceReason.NOT_FOUND
    assert not path.exists()
    with EvidenceLog.open(path) as writer:
        writer.append("a", {})
        # A reader does not need (or take) the writer's lock.
        with EvidenceLog.open(path, readonly=True) as reader:
            assert [r.kind for r in reader] == ["genesis", "a"]
            with pytest.raises(EvidenceError) as info:
                reader.append("b", {})
            assert info.value.reason is EvidenceReason.READ_ONLY


def test_not_a_regular_file(tmp_path: Path) -> None:
    with pytest.raises(EvidenceError) as info:
        EvidenceLog.open(tmp_path)
    assert info.value.reason is EvidenceReason.NOT_A_FILE
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for readonly in (False, True):
        with pytest.raises(EvidenceError) as info:
            EvidenceLog.open(fifo, readonly=readonly)  # must not block
        assert info.value.reason is EvidenceReason.NOT_A_FILE
    with pytest.raises(EvidenceError) as info:
        verify(fifo)
    assert info.value.reason is EvidenceReason.NOT_A_FILE


def test_unknown_fsync_mode(tmp_path: Path) -> None:
    with pytest.raises(EvidenceError) as info:
        EvidenceLog.open(tmp_path / "x", fsync="sometimes")  # type: ignore[arg-type]
    assert info.value.reason is EvidenceReason.BAD_ARGUMENT
    assert not (tmp_path / "x").exists()


def test_new_file_mode_is_private(tmp_path: Path) -> None:
    path = tmp_path / "ev.jsonl"
    EvidenceLog.open(path).close()
    assert path.stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("fsync", ["never", "always", "batch"])
def test_concurrent_appends(tmp_path: Path, fsync: str) -> None:
    path = tmp_path / "ev.jsonl"
    threads, per_thread = 8, 40
    with EvidenceLog.open(path, fsync=fsync) as log:  # type: ignore[arg-type]
        barrier = threading.Barrier(threads)

        def worker(t: int) -> None:
            barrier.wait()
            for i in range(per_thread):
                log.append("t", {"t": t, "i": i})

        pool = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
        for th in pool:
            th.start()
        for th in pool:
            th.join()
        head = log.head()
        assert [r.seq for r in log] == list(range(threads * per_thread + 1))
        if fsync == "batch":
            # Group commit: concurrent appenders shared fsyncs.
            assert 0 < log._fsyncs < threads * per_thread
    assert verify(path, expect_head=head).head == head
    seen = sorted((r["data"]["t"], r["data"]["i"]) for r in _records(path)[1:])
    assert seen == sorted(itertools.product(range(threads), range(per_thread)))


def _records(path: Path) -> list[dict[str, Any]]:
    import json

    return [json.loads(line) for line in path.read_bytes().splitlines()]


def test_close_during_batch_appends(tmp_path: Path) -> None:
    path = tmp_path / "ev.jsonl"
    log = EvidenceLog.open(path, fsync="batch")
    done: list[int] = []
    errors: list[EvidenceReason | object] = []
    start = threading.Barrier(5)

    def worker(t: int) -> None:
        start.wait()
        for i in range(200):
            try:
                done.append(log.append("t", {"t": t, "i": i}).seq)
            except EvidenceError as exc:
                errors.append(exc.reason)
                return

    pool = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for th in pool:
        th.start()
    start.wait()
    while len(log) < 50 and any(th.is_alive() for th in pool):
        time.sleep(0.001)
    log.close()
    for th in pool:
        th.join()
    # Appends after close are refused as CLOSED; every acknowledged one is in the file.
    assert set(errors) <= {EvidenceReason.CLOSED}
    on_disk = {r["seq"] for r in _records(path)}
    assert set(done) <= on_disk
    verify(path)
