"""The chat-completions provider against a real chat-completions server on loopback."""

from __future__ import annotations

import contextlib
import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from flux_runtime import EnvelopeReason, ScriptedApprover, Turn
from flux_runtime._openai import ChatCompletionsProvider
from flux_system.net import PrivateNetAllow, guarded_client
from flux_system.port import GuardedHttp
from tests.flux_runtime._flux import flux
from tests.flux_runtime._runtime import rig

KEY = "sk-test-0123456789abcdef-KEY"


def _content(obj: object) -> dict[str, Any]:
    return {"choices": [{"message": {"role": "assistant", "content": json.dumps(obj)}}]}


def _tools(*calls: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    items = [
        {
            "id": f"c{i}",
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)},
        }
        for i, (name, args) in enumerate(calls)
    ]
    return {"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": items}}]}


REPLIES = [
    _content({"type": "intent", "intent": "change"}),
    _tools(("read", {"path": "VERSION"})),
    _tools(
        (
            "edit",
            {"path": "CHANGELOG.md", "old": "# Changelog\n", "new": "# Changelog\n\n## 0.4.0\n"},
        )
    ),
    _content({"type": "done"}),
    _content({"type": "answer", "text": "added 0.4.0"}),
]


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    replies: list[dict[str, Any]]
    seen: list[tuple[dict[str, str], dict[str, Any]]]


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        self.server.seen.append(({k.lower(): v for k, v in self.headers.items()}, body))
        if self.path != "/v1/chat/completions" or not self.server.replies:
            self.send_response(404)
            self.end_headers()
            return
        data = json.dumps(self.server.replies.pop(0)).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def chat_server() -> Iterator[_Server]:
    server = _Server(("127.0.0.1", 0), _Handler)
    server.replies = list(REPLIES)
    server.seen = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _seed(root: Path) -> None:
    (root / "VERSION").write_text("0.4.0\n")
    (root / "CHANGELOG.md").write_text("# Changelog\n\n## 0.3.0\n")


def test_turn_through_the_chat_completions_provider(tmp_path: Path) -> None:
    with chat_server() as srv, rig(tmp_path) as r:
        _seed(r.root)
        port = srv.server_address[1]
        client = guarded_client(allow=PrivateNetAllow(cidrs=["127.0.0.1/32"]), ports=[port])
        r.redactor.register(KEY, name="env/KEY")
        url = f"http://127.0.0.1:{srv.server_address[1]}/v1"
        provider = ChatCompletionsProvider(
            GuardedHttp(client), base_url=url, model="m", api_key=KEY
        )
        result = Turn(r.executor, provider, r.store, ScriptedApprover([True])).start("update")
        client.close()
        assert result.status == "done", result.error
        assert "## 0.4.0" in (r.root / "CHANGELOG.md").read_text()
        headers, explore = srv.seen[1]
        assert headers["authorization"] == f"Bearer {KEY}"
        names = {t["function"]["name"] for t in explore["tools"]}
        assert {"read", "edit", "proc__run"} <= names
        assert "tools" not in srv.seen[0][1]  # intent: JSON only
        assert "0.4.0" in json.dumps(srv.seen[2][1]["messages"])  # the read reached the model
        assert KEY.encode() not in r.log_path.read_bytes()


def test_provider_traffic_is_guarded(tmp_path: Path) -> None:
    with chat_server() as srv, rig(tmp_path) as r:
        client = guarded_client(ports=[srv.server_address[1]])  # no grant for loopback
        url = f"http://127.0.0.1:{srv.server_address[1]}/v1"
        provider = ChatCompletionsProvider(GuardedHttp(client), base_url=url, model="m")
        result = Turn(r.executor, provider, r.store, ScriptedApprover([True])).start("go")
        client.close()
        assert result.error is not None
        assert result.error.reason is EnvelopeReason.PROVIDER_FAILED
        assert srv.seen == []  # positive control below: the same server answers with a grant


def test_flux_run_with_openai_model(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    _seed(ws)
    with chat_server() as srv:
        url = f"http://127.0.0.1:{srv.server_address[1]}/v1"
        proc = flux(
            "run",
            "--model",
            "openai:m",
            "--base-url",
            url,
            "--allow-private",
            "127.0.0.1/32",
            "--api-key",
            "secret:env/FLUX_TEST_KEY",
            "--workspace",
            str(ws),
            "--evidence",
            str(tmp_path / "ev.jsonl"),
            "update",
            input=b"y\n",
            XDG_STATE_HOME=str(tmp_path / "state"),
            FLUX_TEST_KEY=KEY,
        )
        assert proc.returncode == 0, proc.stderr.decode()
        assert srv.seen[0][0]["authorization"] == f"Bearer {KEY}"
    assert "## 0.4.0" in (ws / "CHANGELOG.md").read_text()
    assert KEY.encode() not in (tmp_path / "ev.jsonl").read_bytes()
    assert KEY.encode() not in proc.stderr + proc.stdout
