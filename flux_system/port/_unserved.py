"""A substrate part that serves nothing: every operation raises ``UnservedError``.

Bringing a substrate up starts here: a family it does not implement stays
:class:`Unserved`, so a caller gets a typed refusal naming the operation — never a
fabricated ``False``, ``[]`` or ``0``.
"""

from __future__ import annotations

import typing
from collections.abc import Mapping, Sequence

from flux_system._exceptions import UnservedError
from flux_system.port._http import HttpResult
from flux_system.port._identity import Identity
from flux_system.port._metrics import Metrics
from flux_system.port._processes import ChildPort
from flux_system.process import RunResult
from flux_system.workspace import FileInfo

__all__ = ["Unserved"]


@typing.final
class Unserved:
    """Every port operation, each raising :class:`~flux_system.UnservedError`.

    Satisfies :class:`FilesPort`, :class:`ProcessPort`, :class:`HttpPort`,
    :class:`MetricsPort` and :class:`IdentityPort` structurally.

    Args:
        where: names the substrate in the error (its ``target``).
    """

    __slots__ = ("_where",)

    def __init__(self, where: str = "substrate") -> None:
        self._where = where

    def _no(self, op: str) -> typing.NoReturn:
        raise UnservedError(f"{op} is not served by {self._where}", op=op, target=self._where)

    def read_bytes(self, path: str, *, limit: int | None = None) -> bytes:
        self._no("read_bytes")

    def read_text(self, path: str, *, limit: int | None = None) -> str:
        self._no("read_text")

    def write_bytes(self, path: str, data: bytes, *, create_parents: bool = True) -> None:
        self._no("write_bytes")

    def append_bytes(self, path: str, data: bytes) -> None:
        self._no("append_bytes")

    def mkdir(self, path: str, *, parents: bool = True, exist_ok: bool = True) -> None:
        self._no("mkdir")

    def remove(self, path: str, *, recursive: bool = False) -> None:
        self._no("remove")

    def rename(self, src: str, dst: str) -> None:
        self._no("rename")

    def list_dir(self, path: str = ".") -> list[str]:
        self._no("list_dir")

    def walk(self, path: str = ".", *, max_entries: int = 0) -> list[str]:
        self._no("walk")

    def stat(self, path: str) -> FileInfo:
        self._no("stat")

    def exists(self, path: str) -> bool:
        self._no("exists")

    def is_dir(self, path: str) -> bool:
        self._no("is_dir")

    def run(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        stdin: bytes | None = None,
        timeout: float | None = 60.0,
        cwd: str = ".",
    ) -> RunResult:
        self._no("run")

    def spawn(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        stdin: bytes | None = None,
        timeout: float | None = None,
        cwd: str = ".",
    ) -> ChildPort:
        self._no("spawn")

    def http_request(
        self,
        method: str,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        body: bytes | None = None,
        timeout: float = 30.0,
    ) -> HttpResult:
        self._no("http_request")

    def metrics(self) -> Metrics:
        self._no("metrics")

    def identity(self) -> Identity:
        self._no("identity")
