"""The one loader for test vectors under ``tests/vectors/<package>/<topic>.json``.

A vector file is a JSON object ``{"provenance": {...}, "cases": [...]}``; each case
carries an ``id`` and a ``source`` naming where it comes from.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

VECTORS = Path(__file__).parent / "vectors"


def load_vectors(package: str, topic: str) -> list[dict[str, Any]]:
    """Return the cases of ``tests/vectors/<package>/<topic>.json`` (ids checked unique)."""
    data = json.loads((VECTORS / package / f"{topic}.json").read_text(encoding="utf-8"))
    cases: list[dict[str, Any]] = data["cases"]
    ids = [c["id"] for c in cases]
    dupes = {i for i in ids if ids.count(i) > 1}
    if dupes:
        raise ValueError(f"duplicate vector ids in {package}/{topic}: {sorted(dupes)}")
    return cases


def load_vector_file(package: str, topic: str) -> dict[str, Any]:
    """Return the whole vector file (provenance included)."""
    result: dict[str, Any] = json.loads(
        (VECTORS / package / f"{topic}.json").read_text(encoding="utf-8")
    )
    return result
