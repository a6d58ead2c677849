"""``flux run`` as a user runs it: a real process, the shipped demo, a real store."""

from __future__ import annotations

import http.server
import json
import shutil
import threading
import typing
from pathlib import Path

from tests.flux_runtime._flux import ROOT, flux
from tests.flux_system.remote._harness import served

DEMO = ROOT / "examples" / "changelog.jsonl"
PROMPT = "update CHANGELOG.md after checking the current version"


def _ws(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    shutil.copytree(ROOT / "examples" / "changelog-workspace", ws)
    return ws


def _run(tmp_path: Path, *args: str, input: bytes | None = None) -> tuple[int, str, str]:
    proc = flux("run", *args, input=input, XDG_STATE_HOME=str(tmp_path / "state"))
    return proc.returncode, proc.stdout.decode(), proc.stderr.decode()


def test_demo_updates_the_changelog_with_a_verified_log(tmp_path: Path) -> None:
    ws, ev = _ws(tmp_path), tmp_path / "ev.jsonl"
    code, out, err = _run(
        tmp_path,
        "--model",
        f"scripted:{DEMO}",
        "--workspace",
        str(ws),
        "--evidence",
        str(ev),
        "--show-loop",
        PROMPT,
        input=b"y\n",
    )
    assert code == 0, err
    assert "0.4.0" in out
    assert (ws / "CHANGELOG.md").read_text().startswith("# Changelog\n\n## 0.4.0\n")
    assert "[loop] call 1 stage=intent" in err and "records verified" in err
    check = flux("evidence", "verify", str(ev))
    assert check.returncode == 0, check.stderr
    kinds = [json.loads(line)["kind"] for line in ev.read_text().splitlines()]
    assert kinds[-1] == "turn.done" and "receipt" in kinds


def test_declined_prompt_changes_nothing(tmp_path: Path) -> None:
    ws = _ws(tmp_path)
    for approve, stdin in (("prompt", b"n\n"), ("prompt", b""), ("deny", None)):
        code, _, err = _run(
            tmp_path,
            "--model",
            f"scripted:{DEMO}",
            "--workspace",
            str(ws),
            "--approve",
            approve,
            PROMPT,
            input=stdin,
        )
        assert code == 0, err
        assert "approval_denied" in err
        assert "0.4.0" not in (ws / "CHANGELOG.md").read_text()


def test_same_demo_against_a_served_substrate(tmp_path: Path) -> None:
    ws = _ws(tmp_path)
    with served(ws) as srv:
        code, _, err = _run(
            tmp_path,
            "--model",
            f"scripted:{DEMO}",
            "--substrate",
            srv.target,
            PROMPT,
            input=b"yes\n",
        )
    assert code == 0, err
    assert "## 0.4.0" in (ws / "CHANGELOG.md").read_text()


def test_question_then_resume(tmp_path: Path) -> None:
    ws = _ws(tmp_path)
    script = tmp_path / "q.jsonl"
    script.write_text(
        '{"type": "intent", "intent": "inspect"}\n'
        '{"type": "question", "question": "which file?"}\n'
        '{"type": "calls", "calls": [{"op": "read", "input": {"path": "VERSION"}}]}\n'
        '{"type": "done"}\n{"type": "answer", "text": "it is 0.4.0"}\n'
    )
    code, out, err = _run(tmp_path, "--model", f"scripted:{script}", "--workspace", str(ws), "go")
    assert code == 3 and "which file?" in out
    session = err.split("--resume ")[1].split()[0]
    code, out, err = _run(
        tmp_path,
        "--model",
        f"scripted:{script}",
        "--workspace",
        str(ws),
        "--resume",
        session,
        "VERSION",
    )
    assert code == 0, err
    assert "it is 0.4.0" in out


def test_usage_errors(tmp_path: Path) -> None:
    ws = _ws(tmp_path)
    base = ("--workspace", str(ws), PROMPT)
    assert _run(tmp_path, "--model", "nope", *base)[0] == 2
    assert _run(tmp_path, "--model", f"scripted:{tmp_path}/missing", *base)[0] == 2
    for n in ("0", "1001"):
        code, _, err = _run(tmp_path, "--model", f"scripted:{DEMO}", "--max-iterations", n, *base)
        assert code == 2 and "max_iterations" in err
    inside = str(ws / "sessions.db")
    code, _, err = _run(tmp_path, "--model", f"scripted:{DEMO}", "--state", inside, *base)
    assert code == 2 and "inside a writable root" in err
    assert not (ws / "sessions.db").exists()
    for port in ("0", "65536"):
        code, _, err = _run(tmp_path, "--model", f"scripted:{DEMO}", "--allow-port", port, *base)
        assert code == 2 and f"--allow-port must be 1-65535, not {port}" in err


def test_untagged_reply_fails_the_turn(tmp_path: Path) -> None:
    ws = _ws(tmp_path)
    script = tmp_path / "bad.jsonl"
    script.write_text('"sure, I will do it"\n')
    code, _, err = _run(tmp_path, "--model", f"scripted:{script}", "--workspace", str(ws), "go")
    assert code == 1 and "received str" in err and "records verified" in err


def _proc_script(tmp_path: Path) -> Path:
    script = tmp_path / "proc.jsonl"
    run = {"op": "proc.run", "input": {"argv": ["sh", "-c", "echo ran > ran.txt"]}}
    script.write_text(
        '{"type": "intent", "intent": "change"}\n'
        + json.dumps({"type": "calls", "calls": [run]})
        + '\n{"type": "done"}\n{"type": "answer", "text": "ok"}\n'
    )
    return script


def test_processes_never_run_unconfined_without_sandbox_off(tmp_path: Path) -> None:
    import importlib.util

    ws = _ws(tmp_path)
    script = _proc_script(tmp_path)
    args = ("--model", f"scripted:{script}", "--workspace", str(ws), "go")
    code, _, err = _run(tmp_path, "--sandbox", "off", *args, input=b"y\n")
    assert code == 0 and (ws / "ran.txt").exists(), err  # positive control
    (ws / "ran.txt").unlink()
    if importlib.util.find_spec("flux_system.sandbox") is None:
        for mode in ("require", "on"):
            code, _, err = _run(tmp_path, "--sandbox", mode, *args, input=b"y\n")
            assert "no sandbox available" in err and "proc.run: FAILED" in err
            assert not (ws / "ran.txt").exists()


class _Page(http.server.BaseHTTPRequestHandler):
    hits: typing.ClassVar[list[str]] = []

    def do_GET(self) -> None:
        _Page.hits.append(self.path)
        body = b"<html><head><title>T</title></head><body><main><p>fetched-marker</p></main>"
        self.send_response(200)
        self.send_header("content-type", "text/html; charset=utf-8")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        return None


def _fetch_script(tmp_path: Path, url: str) -> Path:
    replies = [
        {"type": "intent", "intent": "change", "summary": "fetch the page"},
        {"type": "calls", "calls": [{"op": "web.fetch", "input": {"url": url}}]},
        {"type": "done"},
        {"type": "answer", "text": "fetched"},
    ]
    path = tmp_path / "fetch.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in replies))
    return path


def test_web_fetch_on_a_native_workspace_crosses_the_guard(tmp_path: Path) -> None:
    """The agent's HTTP is served natively: a granted loopback page is fetched after
    approval; without the grant the guard refuses it and the server sees nothing."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/page"
        ws = _ws(tmp_path)
        script = _fetch_script(tmp_path, url)
        for granted in (False, True):
            _Page.hits.clear()
            ev = tmp_path / f"ev-{granted}.jsonl"
            port = str(server.server_address[1])
            grant = ["--allow-private", "127.0.0.0/8"] if granted else []
            grant += ["--allow-port", port]  # the port alone lets nothing private through
            code, _, err = _run(
                tmp_path,
                "--model",
                f"scripted:{script}",
                "--workspace",
                str(ws),
                "--evidence",
                str(ev),
                *grant,
                "fetch the page",
                input=b"y\n",
            )
            assert code == 0, err
            log = ev.read_text()
            if granted:
                assert _Page.hits == ["/page"], err
                assert "fetched-marker" in log
            else:
                assert _Page.hits == [], err
                assert "fetched-marker" not in log
                assert "127.0.0.1" in log  # the refusal names the address it refused
    finally:
        server.shutdown()
        server.server_close()


def test_store_and_log_stay_outside_every_tree_the_agent_may_write(tmp_path: Path) -> None:
    # The profile's writable extra paths are as writable to the agent's processes as
    # the workspace: the store and the log used to be checked against the workspace only.
    ws, extra = _ws(tmp_path), tmp_path / "shared-rw"
    extra.mkdir()
    profile = tmp_path / "rw.toml"
    default = ROOT / "flux_system" / "sandbox" / "profiles" / "default.toml"
    profile.write_text(
        default.read_text().replace("read_write = []", f"read_write = [{str(extra)!r}]")
    )
    (tmp_path / "link").symlink_to(extra)
    base = ("--model", f"scripted:{DEMO}", "--workspace", str(ws), "--profile", str(profile))
    ev = ("--evidence", str(tmp_path / "ev.jsonl"))
    ok_state = ("--state", str(tmp_path / "st" / "s.db"))
    for where in (
        ("--state", str(extra / "s.db"), *ev),
        ("--state", str(tmp_path / "link" / "s.db"), *ev),
        (*ok_state, "--evidence", str(extra / "ev.jsonl")),
        (*ok_state, "--evidence", str(tmp_path / "link" / "sub" / "ev.jsonl")),
        (*ok_state, "--evidence", str(ws / "ev.jsonl")),
    ):
        code, _, err = _run(tmp_path, *base, *where, "--approve", "deny", PROMPT)
        assert code == 2 and "inside a writable root" in err, (where, err)
        assert str(extra) in err or str(ws) in err
    assert list(extra.iterdir()) == []
    # Positive control: the same run with both outside starts the turn.
    code, _, err = _run(tmp_path, *base, *ok_state, *ev, "--approve", "deny", PROMPT)
    assert "inside a writable root" not in err and "records verified" in err, err
