"""docs/sandbox-escapes.md shows exactly what the escape vectors claim."""

from __future__ import annotations

from . import _doc


def test_escape_table_matches_vectors() -> None:
    text = _doc.DOC.read_text(encoding="utf-8")
    assert _doc.render(text) == text, (
        "docs/sandbox-escapes.md is out of date: run "
        "python3 -m tests.flux_system.sandbox.escapes._doc"
    )
