"""Stage outputs: tagged JSON objects, checked before the loop acts on them.

Guarantee: :func:`parse_stage` returns a ``dict`` whose ``type`` is one of the tags the
stage accepts, or raises ``BAD_STAGE_OUTPUT`` naming the stage and the type received
(``str``, ``int``, ``list``, ``object without type``, ``tag 'x'``...) — never a
default intent. :func:`excerpt` bounds (and the caller redacts) what evidence keeps.
"""

from __future__ import annotations

import json
from typing import Any

from flux_runtime._errors import EnvelopeError, EnvelopeReason

__all__ = ["STAGE_TAGS", "excerpt", "parse_stage"]

STAGE_TAGS: dict[str, tuple[str, ...]] = {
    "intent": ("intent", "question"),
    "explore": ("calls", "question", "done"),
    "present": ("answer", "question"),
}
EXCERPT = 200


def excerpt(text: str) -> str:
    return text if len(text) <= EXCERPT else text[:EXCERPT] + f"...[{len(text)} chars]"


def _received(value: object) -> str:
    if isinstance(value, dict):
        tag = value.get("type")
        return "object without type" if tag is None else f"tag {str(tag)[:40]!r}"
    return {bool: "bool", int: "int", float: "float", str: "str", list: "list"}.get(
        type(value), type(value).__name__ if value is not None else "null"
    )


def parse_stage(stage: str, reply: str) -> dict[str, Any]:
    """The tagged object of *reply* for *stage* (see the module docstring)."""
    try:
        value: object = json.loads(reply)
    except (ValueError, TypeError):
        value = reply  # not JSON at all: an untagged string
    except RecursionError:  # nested past the parser's depth: refused, never a crash
        raise EnvelopeError(
            f"stage {stage!r} received JSON nested too deeply to read",
            op=stage,
            reason=EnvelopeReason.BAD_STAGE_OUTPUT,
        ) from None
    tags = STAGE_TAGS[stage]
    if isinstance(value, dict) and value.get("type") in tags:
        return value
    raise EnvelopeError(
        f"stage {stage!r} expects a JSON object tagged {'|'.join(tags)}, "
        f"received {_received(value)}",
        op=stage,
        reason=EnvelopeReason.BAD_STAGE_OUTPUT,
    )
