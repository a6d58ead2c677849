"""Regressions from a review of the log's guarantees: a forked child is not a second
writer, bad ids and heads are typed errors that never pass silently, and batch mode
acknowledges a record only after an fsync that started after its write."""

from __future__ import annotations

import hashlib
import os
import re
import select
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from flux_evidence import (
    Checkpoint,
    EvidenceError,
    EvidenceLog,
    EvidenceReason,
    Head,
    InvalidEvidenceError,
    MemoryEvidenceLog,
    TamperReason,
    genesis_hash,
    verify,
    verify_bytes,
)
from flux_evidence._group import GroupCommit

CHILD_TIMEOUT_S = 10  # a child that hangs (e.g. on a lock copied while held) is killed


def _in_child(body: Callable[[], int]) -> int:
    """Run *body* in a forked child; return its exit status (0 = body returned 0)."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        code = 3
        try:
            signal.alarm(CHILD_TIMEOUT_S)
            code = body()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def _append_reason(log: EvidenceLog) -> int:
    """Child body: 0 if append is refused as FORKED, 1 if it succeeds, 2 otherwise."""
    try:
        log.append("child", {"from": "child"})
    except EvidenceError as exc:
        return 0 if exc.reason is EvidenceReason.FORKED else 2
    return 1


def test_forked_child_is_not_a_second_writer(tmp_path: Path) -> None:
    path = tmp_path / "ev.jsonl"
    with EvidenceLog.open(path, fsync="never") as log:
        log.append("parent", {"n": 1})
        assert _in_child(lambda: _append_reason(log)) == 0
        log.append("parent", {"n": 2})
        head = log.head()
    assert verify(path, expect_head=head).head.size == 3
    with EvidenceLog.open(path, readonly=True) as reader:
        assert [r.kind for r in reader] == ["genesis", "parent", "parent"]


def test_forked_child_does_not_hang_on_a_lock_held_at_fork(tmp_path: Path) -> None:
    path = tmp_path / "ev.jsonl"
    with EvidenceLog.open(path, fsync="batch") as log:
        # As if another thread were inside append() at the moment of the fork.
        with log._lock:
            status = _in_child(lambda: _append_reason(log))
        assert status == 0
        log.append("parent", {})


def test_forked_child_does_not_keep_the_parents_lock(tmp_path: Path) -> None:
    path = tmp_path / "ev.jsonl"
    log = EvidenceLog.open(path, fsync="never")
    release_r, release_w = os.pipe()
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        signal.alarm(CHILD_TIMEOUT_S)
        os.write(ready_w, b"x")
        os.read(release_r, 1)  # outlive the parent's close
        os._exit(0)
    try:
        assert select.select([ready_r], [], [], CHILD_TIMEOUT_S)[0]
        log.close()
        # The child still runs; its inherited descriptor must not keep the lock.
        with EvidenceLog.open(path, fsync="never") as again:
            again.append("after", {})
    finally:
        os.write(release_w, b"x")
        os.waitpid(pid, 0)
        for fd in (release_r, release_w, ready_r, ready_w):
            os.close(fd)


@pytest.mark.parametrize(
    "log_id", ["lone \ud800", 5, b"bytes", "x" * 5000], ids=["surrogate", "int", "bytes", "long"]
)
def test_bad_log_id_is_a_typed_error_and_leaves_no_file(tmp_path: Path, log_id: Any) -> None:
    path = tmp_path / "ev.jsonl"
    with pytest.raises(EvidenceError) as info:
        EvidenceLog.open(path, log_id=log_id)
    assert info.value.reason is EvidenceReason.BAD_ARGUMENT
    assert not path.exists()
    with pytest.raises(EvidenceError) as info:
        MemoryEvidenceLog(log_id=log_id)
    assert info.value.reason is EvidenceReason.BAD_ARGUMENT


@pytest.mark.parametrize(
    ("size", "hash_"),
    [(-1, "0" * 64), (True, "0" * 64), (1.0, "0" * 64), (2, "A" * 64), (2, "0" * 63), (2, 5)],
    ids=["negative", "bool", "float", "upper-hex", "short-hash", "int-hash"],
)
def test_malformed_head_is_refused_not_ignored(size: Any, hash_: Any) -> None:
    with pytest.raises(EvidenceError) as info:
        Head(size, hash_)
    assert info.value.reason is EvidenceReason.BAD_HEAD


def test_malformed_checkpoint_is_refused_not_ignored() -> None:
    log = MemoryEvidenceLog(log_id="cp")
    for i in range(4):
        log.append("x", {"i": i})
    data = log.to_bytes()
    good = log.checkpoint()
    verify_bytes(data, checkpoint=good)
    sizes: list[Any] = [-1, True, "5"]
    for size in sizes:
        with pytest.raises(EvidenceError) as info:
            verify_bytes(data, checkpoint=Checkpoint("cp", size, good.root))
        assert info.value.reason is EvidenceReason.BAD_ARGUMENT
    with pytest.raises(EvidenceError) as info:
        verify_bytes(data, checkpoint=Checkpoint("cp", good.size, good.root.upper()))
    assert info.value.reason is EvidenceReason.BAD_ARGUMENT


def test_batch_acknowledges_only_after_an_fsync_that_started_after_the_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A spy on the real os.write/os.fdatasync: every acknowledged record was written
    completely before some fdatasync started, which ended before append returned."""
    events: list[tuple[str, int]] = []
    spy = threading.Lock()  # orders the recorded events exactly as they happened
    real_write, real_fdatasync = os.write, os.fdatasync
    fsyncs = iter(range(1_000_000))

    def write(fd: int, data: Any) -> int:
        # A group's lines may share one write: a line counts as written once the
        # write holding it (completely) has returned.
        with spy:
            n = real_write(fd, data)
            for line in bytes(data)[:n].splitlines(keepends=True):
                if line.endswith(b"\n"):
                    seq = line.rsplit(b'"seq":', 1)[-1].split(b",", 1)[0]
                    events.append(("written", int(seq)))
        return n

    def fdatasync(fd: int) -> None:
        with spy:
            n = next(fsyncs)
            events.append(("fsync_start", n))
        real_fdatasync(fd)
        events.append(("fsync_end", n))

    path = tmp_path / "ev.jsonl"
    with EvidenceLog.open(path, fsync="batch") as log:
        monkeypatch.setattr(os, "write", write)
        monkeypatch.setattr(os, "fdatasync", fdatasync)
        barrier = threading.Barrier(6)

        def worker() -> None:
            barrier.wait()
            for i in range(40):
                seq = log.append("t", {"i": i}).seq
                events.append(("acked", seq))

        pool = [threading.Thread(target=worker) for _ in range(6)]
        for th in pool:
            th.start()
        for th in pool:
            th.join()
        monkeypatch.undo()
    written_at: dict[int, int] = {}
    started: list[tuple[int, int]] = []  # (event index, fsync id)
    ended: dict[int, int] = {}
    for index, (what, value) in enumerate(events):
        if what == "written":
            written_at[value] = index
        elif what == "fsync_start":
            started.append((index, value))
        elif what == "fsync_end":
            ended[value] = index
        else:
            assert any(
                start > written_at[value] and ended.get(n, len(events)) < index
                for start, n in started
            ), f"seq {value} acknowledged without a covering fsync"
    assert sum(1 for what, _ in events if what == "acked") == 240


# -- crafted lines whose hash is recomputed: only canonical form can reject them -------

LAST_DATA = {"n": 100, "f": 1.5, "s": "a/é😀\x7f", "l": [1, 2]}


def _crafted_log() -> tuple[list[bytes], Head]:
    log = MemoryEvidenceLog(log_id="craft", clock=lambda: 1_700_000_000_000_000_000)
    log.append("k", {"first": True})
    log.append("k", LAST_DATA, session="s", turn=7)
    return log.to_bytes().splitlines(keepends=True), log.head()


def _rehash(line: bytes) -> bytes:
    """Recompute the record hash of *line* (no newline) as the format defines it, over
    whatever bytes the line now holds: what someone able to hash would do."""
    cut = line.rfind(b',"hash":"')
    rest = line[cut + 74 :]
    prev = re.search(rb'"prev_hash":"([0-9a-fA-F]{64})"', rest)
    assert prev is not None
    body = line[:cut] + rest
    digest = hashlib.sha256(bytes.fromhex(prev.group(1).decode()) + body).hexdigest()
    return line[:cut] + b',"hash":"' + digest.encode() + b'"' + rest


def _with_last(lines: list[bytes], new_last: bytes) -> bytes:
    return b"".join([*lines[:-1], new_last + b"\n"])


CANONICAL_LAST = _crafted_log()[0][-1].rstrip(b"\n")
NON_CANONICAL = {
    "exponent-int": (b'"n":100', b'"n":1e2'),
    "float-trailing-zero": (b'"f":1.5', b'"f":1.50'),
    "float-exponent": (b'"f":1.5', b'"f":15e-1'),
    "float-upper-exponent": (b'"f":1.5', b'"f":1.5E0'),
    "minus-zero": (b'"n":100', b'"n":-0'),
    "nan": (b'"f":1.5', b'"f":NaN'),
    "infinity": (b'"f":1.5', b'"f":-Infinity'),
    "overflow-to-inf": (b'"f":1.5', b'"f":1e400'),
    "int-over-digit-limit": (b'"n":100', b'"n":1' + b"0" * 5000),
    "whitespace": (b'"n":100', b'"n": 100'),
    "duplicate-data-key": (b'"n":100', b'"n":100,"n":100'),
    "unsorted-data-keys": (b'"f":1.5,"l":[1,2]', b'"l":[1,2],"f":1.5'),
    "escaped-non-ascii": ("é".encode(), b"\\u00e9"),
    "escaped-surrogate-pair": ("😀".encode(), b"\\ud83d\\ude00"),
    "escaped-lone-surrogate": ("😀".encode(), b"\\ud800"),
    "raw-surrogate-bytes": ("😀".encode(), b"\xed\xa0\xbd\xed\xb8\x80"),
    "overlong-utf8": ("é".encode(), b"\xe0\x83\xa9"),
    "escaped-slash": (b"a/", b"a\\/"),
    "escaped-del": (b"\x7f", b"\\u007f"),
    "envelope-version-float": (b'"version":1}', b'"version":1.0}'),
    "envelope-turn-float": (b'"turn":7', b'"turn":7.0'),
    "envelope-duplicate-key": (b'"turn":7', b'"turn":7,"turn":7'),
    "envelope-escaped-kind": (b'"kind":"k"', b'"kind":"\\u006b"'),
    "envelope-leading-zero": (b'"seq":2', b'"seq":02'),
    "envelope-upper-prev": (b'"prev_hash":"', b'"prev_hash":"'),  # upper-cased below
}


@pytest.mark.parametrize("case", sorted(NON_CANONICAL))
def test_rehashed_non_canonical_line_is_bad_json(case: str) -> None:
    lines, _ = _crafted_log()
    old, new = NON_CANONICAL[case]
    assert old in CANONICAL_LAST
    last = CANONICAL_LAST.replace(old, new, 1)
    if case == "envelope-upper-prev":
        start = last.index(b'"prev_hash":"') + 13
        last = last[:start] + last[start : start + 64].upper() + last[start + 64 :]
    exc = _bad(_with_last(lines, _rehash(last)))
    assert (exc.reason, exc.seq) == (TamperReason.BAD_JSON, 2)


@pytest.mark.parametrize(
    "frame",
    [
        lambda line: b"\xef\xbb\xbf" + line,  # BOM
        lambda line: line + b"\r",  # CRLF line ending
        lambda line: line + b" ",  # trailing whitespace
        lambda line: b" " + line,  # leading whitespace
        lambda line: line.replace(b'"data":', b'"data":"' + b"x" * (16 << 20) + b'",'),  # huge
    ],
    ids=["bom", "crlf", "trailing-space", "leading-space", "over-max-line"],
)
def test_rehashed_framing_changes_are_bad_json(frame: Callable[[bytes], bytes]) -> None:
    lines, _ = _crafted_log()
    exc = _bad(_with_last(lines, _rehash(frame(CANONICAL_LAST))))
    assert (exc.reason, exc.seq) == (TamperReason.BAD_JSON, 2)


def test_rehash_controls() -> None:
    """The helper is faithful (an unchanged line rehashes to itself), and a canonical
    rewrite of the last record is caught by the expected head — not by the chain."""
    lines, head = _crafted_log()
    assert _rehash(CANONICAL_LAST) == CANONICAL_LAST
    rewritten = _with_last(lines, _rehash(CANONICAL_LAST.replace(b'"n":100', b'"n":101')))
    assert verify_bytes(rewritten).head.size == 3
    assert _bad(rewritten, head).reason is TamperReason.MODIFIED


def test_genesis_chained_to_another_log_id_is_refused() -> None:
    genesis = MemoryEvidenceLog(log_id="A").to_bytes().rstrip(b"\n")
    forged = genesis.replace(genesis_hash("A").encode(), genesis_hash("B").encode())
    exc = _bad(_rehash(forged) + b"\n", None)
    assert (exc.reason, exc.seq) == (TamperReason.BAD_CHAIN, 0)


def test_rehashed_seq_gap_is_refused() -> None:
    lines, _ = _crafted_log()
    exc = _bad(_with_last(lines, _rehash(CANONICAL_LAST.replace(b'"seq":2', b'"seq":3'))))
    assert exc.seq == 2 and exc.reason is TamperReason.DELETED


def _bad(data: bytes, head: Head | None = None) -> InvalidEvidenceError:
    with pytest.raises(InvalidEvidenceError) as info:
        verify_bytes(data, expect_head=head)
    return info.value


# -- interrupts (KeyboardInterrupt, any async exception) around the write and the fsync --


def test_interrupt_right_after_the_write_does_not_fork_the_chain(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "ev.jsonl"
    log = EvidenceLog.open(path, fsync="never")
    log.append("a", {})
    real_write = os.write

    def write_then_interrupt(fd: int, data: Any) -> int:
        real_write(fd, data)
        raise KeyboardInterrupt  # as if SIGINT landed as the syscall returned

    monkeypatch.setattr(os, "write", write_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        log.append("b", {})
    monkeypatch.undo()
    # The line may be in the file while the log's state says otherwise: refuse, never
    # write a second record with the same seq.
    with pytest.raises(EvidenceError) as info:
        log.append("c", {})
    assert info.value.reason is EvidenceReason.FAILED
    log.close()
    verify(path)
    with EvidenceLog.open(path) as again:
        assert [r.kind for r in again] == ["genesis", "a", "b"]
        again.append("c", {})


def test_interrupted_group_commit_leader_does_not_hang_the_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "ev.jsonl"
    log = EvidenceLog.open(path, fsync="batch")
    calls: list[int] = []
    real_fdatasync = os.fdatasync

    def interrupted_once(fd: int) -> None:
        calls.append(fd)
        if len(calls) == 1:
            raise KeyboardInterrupt
        real_fdatasync(fd)

    monkeypatch.setattr(os, "fdatasync", interrupted_once)
    with pytest.raises(KeyboardInterrupt):
        log.append("a", {})
    reasons: list[object] = []

    def other() -> None:
        try:
            log.append("b", {})
            reasons.append("acknowledged")
        except EvidenceError as exc:
            reasons.append(exc.reason)

    for target in (other, log.close):
        th = threading.Thread(target=target, daemon=True)
        th.start()
        th.join(timeout=CHILD_TIMEOUT_S)
        assert not th.is_alive(), f"{target} hangs after an interrupted group fsync"
    # Whether "a" reached the disk is unknown: the log refuses to acknowledge more.
    assert reasons == [EvidenceReason.FAILED]


def test_sigint_at_a_leaders_election_is_held_until_its_append_completes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real SIGINT raised in the main thread right after it was elected group leader
    (the window where a KeyboardInterrupt left the group leaderless and every other
    appender waiting for ever): it is delivered once the append has completed — the
    record is durable, the others are not left waiting."""
    path = tmp_path / "ev.jsonl"
    log = EvidenceLog.open(path, fsync="batch")
    real_join = GroupCommit.join
    elected: list[bool] = []

    def join_then_sigint(self: GroupCommit) -> Any:
        ticket = real_join(self)
        if not elected:
            elected.append(ticket[1])
            signal.raise_signal(signal.SIGINT)
        return ticket

    monkeypatch.setattr(GroupCommit, "join", join_then_sigint)
    with pytest.raises(KeyboardInterrupt):
        log.append("a", {"i": 1})
    monkeypatch.undo()
    assert elected == [True]
    assert log.head().size == 2  # genesis and "a": durable before the interrupt surfaced
    other = threading.Thread(target=lambda: log.append("b", {}), daemon=True)
    other.start()
    other.join(timeout=CHILD_TIMEOUT_S)
    assert not other.is_alive(), "an appender hangs after the interrupted leader"
    log.close()
    verify(path)
    with EvidenceLog.open(path, readonly=True) as again:
        assert [r.kind for r in again] == ["genesis", "a", "b"]


@pytest.mark.parametrize("data", ["text", None, 5], ids=["str", "none", "int"])
def test_verify_bytes_names_a_wrong_argument_type(data: Any) -> None:
    with pytest.raises(TypeError, match="data"):
        verify_bytes(data)


def test_verify_bytes_accepts_bytes_like() -> None:
    raw = MemoryEvidenceLog(log_id="b").to_bytes()
    for data in (raw, bytearray(raw), memoryview(raw)):
        assert verify_bytes(data).log_id == "b"


class _Label(str):
    """A str subclass equal (and hash-equal) to a plain label."""


@pytest.mark.parametrize("field", ["kind", "session", "actor"])
def test_label_of_a_str_subclass_is_refused_even_when_an_equal_label_is_cached(
    field: str,
) -> None:
    log = MemoryEvidenceLog()
    labels: dict[str, Any] = {"kind": "tool_call", "session": "s", "actor": "a"}
    log.append(labels["kind"], {}, session=labels["session"], actor=labels["actor"])
    labels[field] = _Label(labels[field])
    with pytest.raises(EvidenceError) as info:
        log.append(labels["kind"], {}, session=labels["session"], actor=labels["actor"])
    assert info.value.reason is EvidenceReason.UNENCODABLE
    assert len(log) == 2  # genesis + the first record; nothing partial
    assert verify_bytes(log.to_bytes()).head.size == 2  # raises if the chain is broken
