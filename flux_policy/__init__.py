"""flux_policy — a pure package (stdlib and pydantic only, no process or network IO)."""

from __future__ import annotations

__all__: list[str] = []
