"""What a port server serves and the limits it holds each connection to."""

from __future__ import annotations

import typing
from dataclasses import dataclass, field

from flux_system.port import HttpPort, Identity, local_identity

if typing.TYPE_CHECKING:
    from flux_system.process import System
    from flux_system.workspace import Workspace

__all__ = ["ServerConfig", "ServerLimits"]


@typing.final
@dataclass(frozen=True, slots=True)
class ServerLimits:
    """Per-connection limits (all enforced by the server; announced in ``welcome``).

    Attributes:
        max_frame: bytes of JSON per frame; a larger length header closes the
            connection before anything is allocated.
        max_chunk: raw bytes per ``chunk`` frame (base64 makes it 4/3 larger).
        max_in_flight: requests running at once; past it the server stops reading
            the connection (back-pressure, not refusal) until one finishes.
        max_buffered_output: bytes of one child's output buffered for a slow reader
            before the child is paused (its pipe fills).
        max_children: spawned children alive at once; past it ``spawn`` is refused.
        max_upload: bytes one write, append or run stdin may carry, and all of those
            in flight on one connection together (they are held in memory until their
            request ends); a request past it is refused.
        heartbeat_s: the client pings at this interval; a connection silent for three
            intervals is closed and its children killed.
        handshake_s: seconds allowed for the TLS handshake (if any), and as many again
            for the client's ``hello``.
        max_handshaking: connections accepted whose ``hello`` has not yet been
            accepted, server-wide (not per connection): past it a new connection is
            closed at once with ``goodbye`` (``limit``), so unauthenticated peers hold
            at most this many threads and hello buffers.
        inline_fs: serve ``stat``, ``exists``, ``is_dir``, ``list_dir`` and reads of
            files up to 64 KiB on the event loop thread, saving two thread switches per
            call; a file system that hangs (a dead network mount inside the workspace)
            then stalls every connection of this server. ``False``: every file op runs
            on a worker thread.
    """

    max_frame: int = 8 * 1024 * 1024
    max_chunk: int = 4 * 1024 * 1024
    max_in_flight: int = 32
    max_buffered_output: int = 1024 * 1024
    max_children: int = 64
    max_upload: int = 1024 * 1024 * 1024
    heartbeat_s: float = 10.0
    handshake_s: float = 10.0
    max_handshaking: int = 64
    inline_fs: bool = True

    def __post_init__(self) -> None:
        if self.max_frame < 1024 or self.max_chunk < 1:
            raise ValueError("max_frame must be >= 1024 and max_chunk >= 1")
        if (self.max_chunk * 4) // 3 + 256 > self.max_frame:
            raise ValueError("max_chunk, base64-encoded, must fit in max_frame")
        for name in (
            "max_in_flight",
            "max_buffered_output",
            "max_children",
            "max_upload",
            "max_handshaking",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        if not (0 < self.heartbeat_s <= 1e6 and 0 < self.handshake_s <= 1e6):
            raise ValueError("heartbeat_s and handshake_s must be > 0 and <= 1e6")


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """What one server serves: its own workspace, processes, egress and identity.

    The server enforces its own confinement: *system*'s sandbox and *http*'s egress
    grants are the serving side's, and nothing a client sends widens them.
    ``token``, when set, must be presented in ``hello`` (compared in constant time).
    """

    workspace: Workspace
    system: System | None = None
    http: HttpPort | None = None
    token: bytes | None = None
    limits: ServerLimits = field(default_factory=ServerLimits)
    identity: Identity = field(default_factory=local_identity)

    def operations(self) -> list[str]:
        """The ops this configuration serves (announced in ``welcome``)."""
        from flux_system.remote._ops import FILE_OPS

        ops = set(FILE_OPS) | {"metrics", "identity"}
        if self.system is not None:
            ops |= {"run", "spawn", "kill"}
        if self.http is not None:
            ops.add("http_request")
        return sorted(ops)
