"""``flux exec --report FILE``: the documented JSON summary, whatever the outcome."""

from __future__ import annotations

import json
import math
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from tests.flux_runtime._flux import HANG_GUARD_S, flux, popen


def _report(tmp_path: Path, *args: str, input: bytes | None = None) -> tuple[int, dict[str, Any]]:
    path = tmp_path / "out" / "report.json"
    path.parent.mkdir(exist_ok=True)
    run = flux("exec", "--workspace", str(tmp_path), "--report", str(path), *args, input=input)
    return run.returncode, json.loads(path.read_text())


def test_report_of_an_exit(tmp_path: Path) -> None:
    code, r = _report(
        tmp_path, "--", "sh", "-c", "cat >/dev/null; printf abc; printf de >&2; exit 3", input=b"12"
    )
    assert code == 3
    assert r["schema"] == "flux.exec.report/1"
    assert r["command"] == "sh"
    assert r["ended"] == "exited"
    assert (r["exit_code"], r["signal"], r["flux_exit"], r["timed_out"]) == (3, None, 3, False)
    assert r["stdout"] == {"bytes": 3, "delivered": 3, "truncated": False}
    assert r["stderr"] == {"bytes": 2, "delivered": 2, "truncated": False}
    assert r["stdin"] == {"mode": "stream", "bytes": 2}
    # Its type and sense only: speed is measured in bench/, never asserted here.
    assert isinstance(r["duration_s"], float) and math.isfinite(r["duration_s"])
    assert r["error"] is None
    sandbox = r["sandbox"]
    assert sandbox["backend"] == "bwrap" and sandbox["profile"] == "default"
    assert sandbox["active_layers"] == ["bubblewrap", "seccomp"]
    assert sandbox["missing"] == []
    assert sandbox["denials"]["observable"] is False  # bwrap 0.8: no listener


def test_report_of_a_signal_a_timeout_and_a_cap(tmp_path: Path) -> None:
    # bwrap passes a signal death on as exit 128+N: the signal itself is seen unsandboxed
    code, r = _report(tmp_path, "--sandbox", "off", "--", "sh", "-c", "kill -TERM $$")
    assert (code, r["ended"], r["exit_code"], r["signal"]) == (143, "signaled", None, 15)
    assert r["sandbox"] is None
    code, r = _report(tmp_path, "--", "sh", "-c", "kill -TERM $$")
    assert (code, r["ended"], r["exit_code"], r["signal"]) == (143, "exited", 143, None)
    code, r = _report(tmp_path, "--timeout", "0.3", "--", "sleep", "30")
    assert (code, r["ended"], r["timed_out"], r["signal"]) == (124, "timed_out", True, 9)
    code, r = _report(tmp_path, "--output-cap", "4", "--", "head", "-c", "100000", "/dev/zero")
    assert code == 0
    assert r["stdout"] == {"bytes": 100000, "delivered": 4, "truncated": True}


def test_report_of_a_refusal_names_the_reason(tmp_path: Path) -> None:
    code, r = _report(tmp_path, "--", "flux-no-such-command-xyz")
    assert code == 127
    assert r["ended"] == "refused"
    assert r["exit_code"] is None
    assert r["flux_exit"] == 127
    assert r["error"]["reason"] == "not_found"
    assert "flux-no-such-command-xyz" in r["error"]["message"]


def test_report_in_a_missing_directory_is_refused_before_running(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    run = flux(
        "exec", "--workspace", str(tmp_path), "--report", str(tmp_path / "nope" / "r.json"),
        "--", "touch", "ran",
    )  # fmt: skip
    assert run.returncode == 125
    assert str(tmp_path / "nope").encode() in run.stderr
    assert not marker.exists()


def test_report_when_flux_itself_is_signalled(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    args = ("exec", "--workspace", str(tmp_path), "--report", str(report), "--")
    script = "touch started; exec sleep 600"
    with popen(*args, "sh", "-c", script, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE) as p:
        deadline = time.monotonic() + HANG_GUARD_S
        while not (tmp_path / "started").exists():
            assert time.monotonic() < deadline, "hang guard"
            time.sleep(0.01)
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=HANG_GUARD_S) == 143
    r = json.loads(report.read_text())
    assert (r["ended"], r["flux_exit"], r["exit_code"]) == ("interrupted", 143, None)


def test_report_parent_swapped_for_a_symlink_by_the_run_is_refused(tmp_path: Path) -> None:
    # The report lies in the workspace the sandboxed run may write: the run moves its
    # directory away and puts a symlink to a directory outside the workspace there.
    ws, elsewhere = tmp_path / "ws", tmp_path / "elsewhere"
    (ws / "out").mkdir(parents=True)
    elsewhere.mkdir()
    swap = "mv out out-old && ln -s ../elsewhere out"
    run = flux(
        "exec", "--workspace", str(ws), "--report", str(ws / "out" / "r.json"),
        "--", "sh", "-c", swap,
    )  # fmt: skip
    assert (ws / "out").is_symlink() and (ws / "out-old").is_dir()  # the swap did run
    assert not (elsewhere / "r.json").exists(), "the host wrote through the run's symlink"
    assert list(elsewhere.iterdir()) == []
    assert run.returncode == 125
    assert f"--report {ws / 'out' / 'r.json'}: not written".encode() in run.stderr
    assert b"was replaced during the run" in run.stderr
    assert not (ws / "out-old" / "r.json").exists()


def test_report_parent_recreated_by_the_run_is_written(tmp_path: Path) -> None:
    # A build that empties its output directory (rm -rf out && mkdir out): the new
    # directory stands at the path asked for, no symlink in between, so it is used.
    ws = tmp_path / "ws"
    (ws / "out").mkdir(parents=True)
    run = flux(
        "exec", "--workspace", str(ws), "--report", str(ws / "out" / "r.json"),
        "--", "sh", "-c", "rm -rf out && mkdir out && exit 4",
    )  # fmt: skip
    assert run.returncode == 4, run.stderr
    assert json.loads((ws / "out" / "r.json").read_text())["exit_code"] == 4


def test_report_through_a_symlink_inside_the_workspace_is_refused_before_running(
    tmp_path: Path,
) -> None:
    # An earlier sandboxed run could have planted ws/out -> a directory outside: the
    # host must not follow it (the real path outside the workspace is accepted).
    ws, elsewhere = tmp_path / "ws", tmp_path / "elsewhere"
    ws.mkdir()
    elsewhere.mkdir()
    (ws / "out").symlink_to(elsewhere)
    run = flux(
        "exec", "--workspace", str(ws), "--report", str(ws / "out" / "r.json"),
        "--", "touch", "ran",
    )  # fmt: skip
    assert run.returncode == 125
    assert f"goes through the symlink {ws / 'out'}".encode() in run.stderr
    assert not (ws / "ran").exists()
    assert list(elsewhere.iterdir()) == []
    run = flux("exec", "--workspace", str(ws), "--report", str(elsewhere / "r.json"), "--", "true")
    assert run.returncode == 0, run.stderr
    assert json.loads((elsewhere / "r.json").read_text())["exit_code"] == 0
