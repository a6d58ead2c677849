"""flux_runtime — the envelope and the thin agent loop; composes every flux package."""

from __future__ import annotations

__all__: list[str] = []
