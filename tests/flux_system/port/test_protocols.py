"""The port Protocols: structural conformance (by mypy) and the "serves nothing" base."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from flux_system import UnservedError, Workspace
from flux_system.port import (
    FilesPort,
    HostMetrics,
    LocalIdentity,
    Metric,
    ProcessPort,
    Substrate,
    Unserved,
)

HERE = Path(__file__).resolve().parent


def _mypy(path: Path) -> tuple[str, int]:
    from mypy import api

    out, err, status = api.run(
        ["--strict", "--no-incremental", "--follow-imports=silent", str(path)]
    )
    return out + err, status


def test_native_classes_satisfy_the_protocols_by_mypy() -> None:
    out, status = _mypy(HERE / "_structural.py")
    assert status == 0, out


def test_mypy_check_negative_control(tmp_path: Path) -> None:
    # A class lacking one method must be refused, or the positive check proves nothing.
    bad = tmp_path / "bad.py"
    bad.write_text(
        textwrap.dedent(
            """
            from flux_system.port import FilesPort

            class Partial:
                def read_bytes(self, path: str, *, limit: int | None = None) -> bytes:
                    return b""

            files: FilesPort = Partial()
            """
        )
    )
    out, status = _mypy(bad)
    assert status != 0
    assert "FilesPort" in out


@pytest.mark.parametrize(
    ("op", "call"),
    [
        ("exists", lambda u: u.exists("a")),
        ("list_dir", lambda u: u.list_dir()),
        ("read_bytes", lambda u: u.read_bytes("a")),
        ("run", lambda u: u.run(["true"])),
        ("spawn", lambda u: u.spawn(["true"])),
        ("http_request", lambda u: u.http_request("GET", "https://example.com/")),
        ("metrics", lambda u: u.metrics()),
        ("identity", lambda u: u.identity()),
    ],
)
def test_unserved_raises_never_fabricates(op: str, call: object) -> None:
    with pytest.raises(UnservedError) as info:
        call(Unserved("test-substrate"))  # type: ignore[operator]
    assert info.value.op == op
    assert info.value.target == "test-substrate"


def test_substrate_starts_from_serving_nothing() -> None:
    sub = Substrate()
    with pytest.raises(UnservedError):
        sub.files.exists("x")
    with pytest.raises(UnservedError):
        sub.processes.run(["true"])


def test_runtime_checkable_protocols(tmp_path: Path) -> None:
    with Workspace(tmp_path) as ws:
        assert isinstance(ws, FilesPort)
        assert not isinstance(ws, ProcessPort)


def test_host_metrics_measured_or_unavailable() -> None:
    m = HostMetrics("/").metrics()
    for name in ("cpu_percent", "load_1m", "memory_used", "memory_total", "uptime"):
        metric = getattr(m, name)
        assert isinstance(metric, Metric)
        assert (metric.value is None) != (metric.unavailable is None)
    assert m.memory_total.value is not None and m.memory_total.value > 0


def test_metric_refuses_both_or_neither() -> None:
    with pytest.raises(ValueError):
        Metric(None, "bytes")
    with pytest.raises(ValueError):
        Metric(1.0, "bytes", unavailable="no")


def test_local_identity_is_not_remotely_reported() -> None:
    me = LocalIdentity(("bwrap",)).identity()
    assert me.remotely_reported is False
    assert me.as_remote().remotely_reported is True
    assert me.sandbox == ("bwrap",)
