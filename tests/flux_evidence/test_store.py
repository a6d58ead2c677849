"""LineStore, the in-memory side of a log: records kept as lines, decoded on demand."""

from __future__ import annotations

from flux_evidence import MemoryEvidenceLog
from flux_evidence._store import LineStore, decode_line


def test_a_record_counts_only_once_its_end_offset_is_in() -> None:
    """An add cut short after the bytes went in (MemoryError before the end offset)
    leaves nothing half-visible: every read is bounded by the end offsets."""
    log = MemoryEvidenceLog(log_id="s")
    record = log.append("k", {"a": 1}, session="x")
    store: LineStore = log._store
    whole = store.data()
    # what a cut-short add leaves behind: line, hash and labels in, no end offset
    store._buf += b'{"partial":'
    store._hashes += b"\x01" * 32
    store._kinds.append("k")
    store._sessions.append("x")
    assert len(store) == 2
    assert store.data() == whole
    assert len(store.leaves()) == 2
    assert store.select("k", "x", 0) == [1]
    assert [decode_line(line) for line in store.lines(range(len(store)))][1] == record
    assert log.to_bytes() == whole
