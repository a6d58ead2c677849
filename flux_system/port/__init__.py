"""flux_system.port — the capability Protocols a substrate implements (DESIGN §2.6).

Five families: files (:class:`FilesPort`), processes (:class:`ProcessPort`,
:class:`ChildPort`), guarded HTTP (:class:`HttpPort`), metrics
(:class:`MetricsPort`) and identity (:class:`IdentityPort`). :class:`flux_system.Workspace`
and :class:`flux_system.System` satisfy the first two structurally; the remote client
implements all five. A :class:`Substrate` holds one object per family, each
:class:`Unserved` unless given: an operation a substrate does not serve raises
:class:`~flux_system.UnservedError`, never a fabricated value.
"""

from __future__ import annotations

from flux_system.port._files import FilesPort
from flux_system.port._http import HttpPort, HttpResult
from flux_system.port._identity import Identity, IdentityPort, local_identity
from flux_system.port._metrics import Metric, Metrics, MetricsPort, measure_host
from flux_system.port._processes import ChildPort, ProcessPort
from flux_system.port._substrate import GuardedHttp, HostMetrics, LocalIdentity, Substrate
from flux_system.port._unserved import Unserved

__all__ = [
    "ChildPort",
    "FilesPort",
    "GuardedHttp",
    "HostMetrics",
    "HttpPort",
    "HttpResult",
    "Identity",
    "IdentityPort",
    "LocalIdentity",
    "Metric",
    "Metrics",
    "MetricsPort",
    "ProcessPort",
    "Substrate",
    "Unserved",
    "local_identity",
    "measure_host",
]
