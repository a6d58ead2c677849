"""The operation catalog: what each operation is, as data, plus one handler.

An :class:`Operation` has a name, a description, an input JSON Schema, effects from the
closed set :data:`EFFECTS`, a :class:`Risk`, idempotency and ``expose`` (model-visible
or flow-only), and a handler over the port Protocols of a
:class:`~flux_system.port.Substrate` — so one catalog runs against a native or a
remote substrate. Staging is decided by this metadata alone (:attr:`Operation.gather_safe`).

Guarantee: :func:`parse_effects` accepts only the closed set; a capability name such
as ``workspace.write`` is refused, as is anything else. A schema with a keyword the
validator does not know is refused when the operation is built.
"""

from __future__ import annotations

import enum
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from flux_runtime._errors import EnvelopeError, EnvelopeReason
from flux_runtime._schema import Validator, check_schema, compile_schema

if typing.TYPE_CHECKING:
    from flux_system.port import Substrate

__all__ = ["EFFECTS", "Catalog", "Operation", "Result", "Risk", "parse_effects"]

EFFECTS = frozenset(
    {"read", "write", "network", "model", "process", "browser", "filesystem", "local_system"}
)


class Risk(enum.Enum):
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"
    DESTRUCTIVE = "destructive"


@dataclass(frozen=True, slots=True)
class Result:
    """An operation's two faces: ``content`` (JSON-ready, for the flow) and ``view``
    (text, for the model). Both are redacted before anyone sees them."""

    content: Any
    view: str


Handler = Callable[["Substrate", Mapping[str, Any]], Result]
Resources = Callable[[Mapping[str, Any]], Sequence[str]]
Paths = Callable[[Mapping[str, Any]], Sequence[str]]


def parse_effects(items: Iterable[str]) -> frozenset[str]:
    """The effects named in *items*; raise on any name outside :data:`EFFECTS`.

    Raises:
        EnvelopeError: BAD_CATALOG naming the refused effect (``workspace.write`` is a
            capability, not an effect).
    """
    out = set()
    for item in items:
        if not isinstance(item, str) or item not in EFFECTS:
            raise EnvelopeError(
                f"{item!r} is not an effect (one of {sorted(EFFECTS)})",
                op="catalog",
                reason=EnvelopeReason.BAD_CATALOG,
                target=str(item),
            )
        out.add(item)
    return frozenset(out)


@dataclass(frozen=True, slots=True)
class Operation:
    """One operation of the catalog (see the module docstring)."""

    name: str
    description: str
    schema: Mapping[str, Any]
    effects: frozenset[str]
    risk: Risk
    idempotent: bool
    handler: Handler = field(compare=False)
    resources: Resources = field(compare=False)
    expose: bool = True
    secrets: bool = False  # string inputs may carry ``secret:`` references
    side_effect_free: bool | None = None  # default: the effects are reads only
    # The workspace paths the input names: the policy also decides on where each
    # resolves (flux_runtime._targets); ``follow``: "target" or "name" (remove).
    paths: Paths | None = field(default=None, compare=False)
    follow: str = "target"
    # The schema compiled once, when the operation is built (after it was checked).
    validate: Validator = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "effects", parse_effects(self.effects))
        try:
            check_schema(self.schema)
        except ValueError as exc:
            raise EnvelopeError(
                str(exc), op="catalog", reason=EnvelopeReason.BAD_CATALOG, target=self.name
            ) from None
        object.__setattr__(self, "validate", compile_schema(self.schema))
        if self.side_effect_free is None:
            object.__setattr__(self, "side_effect_free", self.effects <= {"read"})

    @property
    def gather_safe(self) -> bool:
        """Run at once while exploring: low risk and side-effect free (by metadata)."""
        return self.risk is Risk.LOW and bool(self.side_effect_free)

    def describe(self) -> dict[str, Any]:
        """What a model is shown of this operation."""
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": dict(self.schema),
            "effects": sorted(self.effects),
            "risk": self.risk.value,
        }


class Catalog:
    """Operations by name. Unknown names are refused, never guessed."""

    __slots__ = ("_ops",)

    def __init__(self, operations: Iterable[Operation]) -> None:
        ops: dict[str, Operation] = {}
        for op in operations:
            if op.name in ops:
                raise EnvelopeError(
                    "duplicate operation",
                    op="catalog",
                    reason=EnvelopeReason.BAD_CATALOG,
                    target=op.name,
                )
            ops[op.name] = op
        self._ops = ops

    def get(self, name: str) -> Operation:
        op = self._ops.get(name) if isinstance(name, str) else None
        if op is None:
            raise EnvelopeError(
                "unknown operation",
                op="dispatch",
                reason=EnvelopeReason.UNKNOWN_OPERATION,
                target=str(name)[:80],
            )
        return op

    def names(self) -> list[str]:
        return sorted(self._ops)

    def exposed(self) -> list[Operation]:
        return [self._ops[n] for n in sorted(self._ops) if self._ops[n].expose]

    def __contains__(self, name: object) -> bool:
        return name in self._ops
