"""flux_system.testing — the conformance kit every substrate runs to prove itself.

:func:`check_substrate` drives a substrate only through the port Protocols, so it runs
unchanged against the native ``Workspace``/``System``, a remote client, a test double or
a third party's implementation (``ports/PROTOCOL.md`` for the wire).
"""

from __future__ import annotations

from flux_system.testing._kit import CheckResult, ConformanceError, check_substrate

__all__ = ["CheckResult", "ConformanceError", "check_substrate"]
