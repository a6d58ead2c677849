"""Value classes for the substrate's own records (decision 0136): ``@record`` makes the
frozen, slotted class ``@dataclass(frozen=True, slots=True)`` would, at a fraction of
the cost to create. Private: imports nothing of ours, used by every layer above it."""

from flux_system._values._record import field, record

__all__ = ["field", "record"]
