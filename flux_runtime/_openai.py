"""An OpenAI-compatible chat-completions provider over a guarded :class:`HttpPort`.

Each model call is one ``POST {base_url}/chat/completions``. The stage, its accepted
tags and the transcript go in the messages; in the ``explore`` stage the offered
operations are the request's ``tools`` (function names with ``.`` spelled ``__``), and
the reply's ``tool_calls`` become the stage's native ``{"type": "calls", ...}`` output.
Otherwise the reply's text is returned as it is, for the loop to check.

Guarantee: the traffic crosses the egress guard of the :class:`HttpPort` given (its
grants: ``--allow-host``, ``--allow-private``); the key is given already resolved from
a ``secret:`` reference (and so registered with the redactor) and is only ever put in
the ``Authorization`` header. An HTTP error, a non-JSON body or a reply without a
choice is ``PROVIDER_FAILED`` (the status and the host, never the key).
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit

from flux_runtime._errors import EnvelopeError, EnvelopeReason
from flux_runtime._provider import ModelRequest
from flux_system.port import HttpPort

__all__ = ["ChatCompletionsProvider"]

_SYSTEM = (
    "You are the planning model of an agent runtime. Answer every message with one JSON "
    'object whose "type" is one of: {tags}. Stage: {stage}. '
    'intent: {{"type":"intent","intent":"inspect"|"change"}}. '
    'explore: call the tools, or {{"type":"done"}} when you have what you need; '
    "reads run at once, changes are collected for the user's approval. "
    'present: {{"type":"answer","text":"..."}}. '
    'Any stage may ask the user: {{"type":"question","question":"..."}}.'
)


def _fail(why: str, host: str) -> EnvelopeError:
    return EnvelopeError(why, op="provider", reason=EnvelopeReason.PROVIDER_FAILED, target=host)


class ChatCompletionsProvider:
    """See the module docstring."""

    def __init__(
        self,
        http: HttpPort,
        *,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout: float = 120.0,
    ) -> None:
        self._http, self._model, self._key, self._timeout = http, model, api_key, timeout
        self._url = base_url.rstrip("/") + "/chat/completions"
        self._host = urlsplit(self._url).hostname or base_url

    def _messages(self, request: ModelRequest) -> list[dict[str, str]]:
        system = _SYSTEM.format(tags="|".join(request.expects), stage=request.stage)
        out = [{"role": "system", "content": system}]
        for m in request.messages:
            role = m.get("role")
            content = str(m.get("content", ""))
            if role == "tool":
                out.append({"role": "user", "content": f"[{m.get('op', 'runtime')}] {content}"})
            else:
                out.append(
                    {"role": "assistant" if role == "assistant" else "user", "content": content}
                )
        return out

    def body(self, request: ModelRequest) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self._model, "messages": self._messages(request)}
        if request.stage == "explore" and request.operations:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": op["name"].replace(".", "__"),
                        "description": op["description"],
                        "parameters": op["input_schema"],
                    },
                }
                for op in request.operations
            ]
        else:
            body["response_format"] = {"type": "json_object"}
        return body

    def complete(self, request: ModelRequest) -> str:
        headers = {"content-type": "application/json"}
        if self._key:
            headers["authorization"] = f"Bearer {self._key}"
        payload = json.dumps(self.body(request)).encode()
        result = self._http.http_request(
            "POST", self._url, headers=headers, body=payload, timeout=self._timeout
        )
        if result.status != 200:
            raise _fail(f"chat completions answered HTTP {result.status}", self._host)
        try:
            message = json.loads(result.body)["choices"][0]["message"]
        except (ValueError, KeyError, IndexError, TypeError):
            raise _fail("the reply is not a chat completion", self._host) from None
        calls = message.get("tool_calls") if isinstance(message, dict) else None
        if calls:
            return json.dumps({"type": "calls", "calls": [_call(c, self._host) for c in calls]})
        content = message.get("content") if isinstance(message, dict) else None
        return content if isinstance(content, str) else json.dumps(content)


def _call(item: Any, host: str) -> dict[str, Any]:
    try:
        fn = item["function"]
        args = json.loads(fn.get("arguments") or "{}")
        return {"op": str(fn["name"]).replace("__", "."), "input": args}
    except (ValueError, KeyError, TypeError, AttributeError):
        raise _fail("a tool call is malformed", host) from None
