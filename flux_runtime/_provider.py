"""Model providers: the Protocol and the scripted provider (a JSONL file of replies).

A provider answers a :class:`ModelRequest` with the model's raw reply text; the loop
parses and checks it. :class:`ScriptedProvider` returns line ``request.index`` of its
script (so a resumed session continues where it stopped); running out is a
``PROVIDER_FAILED`` error, never an invented reply.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Any

from flux_runtime._errors import EnvelopeError, EnvelopeReason
from flux_runtime._files import read_text

__all__ = ["ModelRequest", "Provider", "ScriptedProvider"]


@dataclass(frozen=True, slots=True)
class ModelRequest:
    stage: str
    index: int  # the number of model calls made before this one, in this session
    messages: tuple[dict[str, Any], ...]
    operations: tuple[dict[str, Any], ...]
    expects: tuple[str, ...]  # the tags this stage accepts


class Provider(typing.Protocol):
    def complete(self, request: ModelRequest) -> str: ...


class ScriptedProvider:
    """Replies from a list of lines (blank lines and ``#`` comments skipped)."""

    def __init__(self, lines: list[str], name: str = "scripted") -> None:
        self._lines = [ln for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]
        self.name = name

    @classmethod
    def from_file(cls, path: str) -> ScriptedProvider:
        try:
            text = read_text(path)
        except (OSError, ValueError) as exc:
            raise EnvelopeError(
                f"cannot read the script: {exc}",
                op="provider",
                reason=EnvelopeReason.PROVIDER_FAILED,
                target=path,
            ) from None
        return cls(text.splitlines(), name=f"scripted:{path}")

    def complete(self, request: ModelRequest) -> str:
        if request.index >= len(self._lines):
            raise EnvelopeError(
                f"the script has no reply #{request.index + 1}",
                op="provider",
                reason=EnvelopeReason.PROVIDER_FAILED,
                target=self.name,
            )
        return self._lines[request.index]
