"""A substrate: the five capability families together, native or remote."""

from __future__ import annotations

import typing
from collections.abc import Mapping
from dataclasses import dataclass, field

from flux_system.port._files import FilesPort
from flux_system.port._http import HttpPort, HttpResult
from flux_system.port._identity import Identity, IdentityPort, local_identity
from flux_system.port._metrics import Metrics, MetricsPort, measure_host
from flux_system.port._processes import ProcessPort
from flux_system.port._unserved import Unserved

if typing.TYPE_CHECKING:
    from flux_system.net import GuardedClient

__all__ = ["GuardedHttp", "HostMetrics", "LocalIdentity", "Substrate"]


@dataclass(frozen=True, slots=True)
class Substrate:
    """What a caller (the runtime, the conformance kit) holds: one object per family.

    Every family defaults to :class:`Unserved`: a substrate serves only what it was
    given, and an unserved operation raises :class:`~flux_system.UnservedError`.
    ``close`` releases what the substrate owns (a remote connection, say).
    """

    files: FilesPort = field(default_factory=lambda: Unserved("this substrate"))
    processes: ProcessPort = field(default_factory=lambda: Unserved("this substrate"))
    http: HttpPort = field(default_factory=lambda: Unserved("this substrate"))
    metrics: MetricsPort = field(default_factory=lambda: Unserved("this substrate"))
    identity: IdentityPort = field(default_factory=lambda: Unserved("this substrate"))
    closer: typing.Callable[[], None] | None = None

    @classmethod
    def native(
        cls,
        workspace: FilesPort,
        *,
        processes: ProcessPort | None = None,
        http: HttpPort | None = None,
        disk_path: str = "/",
        sandbox: tuple[str, ...] = (),
    ) -> Substrate:
        """This process's own substrate: *workspace*, optional *processes* and *http*,
        host metrics and a local identity. What is not given stays unserved."""
        none = Unserved("this substrate")
        return cls(
            files=workspace,
            processes=processes if processes is not None else none,
            http=http if http is not None else none,
            metrics=HostMetrics(disk_path),
            identity=LocalIdentity(sandbox),
        )

    def close(self) -> None:
        if self.closer is not None:
            self.closer()

    def __enter__(self) -> Substrate:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@typing.final
class GuardedHttp:
    """:class:`HttpPort` over a guarded client (:func:`flux_system.net.guarded_client`).

    Guarantee: every request crosses that client's guard with that client's grants.
    """

    __slots__ = ("_client",)

    def __init__(self, client: GuardedClient) -> None:
        self._client = client

    def http_request(
        self,
        method: str,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        body: bytes | None = None,
        timeout: float = 30.0,
    ) -> HttpResult:
        response = self._client.request(
            method, url, headers=dict(headers or {}), content=body, timeout=timeout
        )
        return HttpResult(
            status=response.status_code,
            headers=tuple((k.lower(), v) for k, v in response.headers.multi_items()),
            body=response.content,
            truncated=response.truncated,
            url=str(response.url),
            waited=response.waited,
            retries=response.retries,
        )


@typing.final
class HostMetrics:
    """:class:`MetricsPort` measuring this host (disk figures for *disk_path*)."""

    __slots__ = ("_disk",)

    def __init__(self, disk_path: str = "/") -> None:
        self._disk = disk_path

    def metrics(self) -> Metrics:
        return measure_host(self._disk)


@typing.final
class LocalIdentity:
    """:class:`IdentityPort` of this process, with the sandbox layers it runs under."""

    __slots__ = ("_sandbox",)

    def __init__(self, sandbox: tuple[str, ...] = ()) -> None:
        self._sandbox = sandbox

    def identity(self) -> Identity:
        return local_identity(self._sandbox)
