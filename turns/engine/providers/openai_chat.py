"""The `openai` provider: any OpenAI-compatible ``POST {baseUrl}/chat/completions`` endpoint,
streamed (protocol ``openai-chat-v1``), over httpx.

- Streaming: ``stream: true`` with ``stream_options.include_usage``; ``choices[0].delta.content``
  pieces become TextDelta items; ``delta.tool_calls`` are assembled by index.
- Idle timeout: no byte for ``idle_timeout_ms`` (default 60 s) ends the call with
  ModelError("idle_timeout"); the call is never retried (spec: no retry on idle).
- Provider errors (HTTP status >= 400, connection failures, malformed frames) raise
  ModelError("provider_error" | "bad_response") and fail the runtime.
"""

from __future__ import annotations

import json
from typing import Any, Iterator

import httpx

from turns.engine.providers.base import ModelError, ModelRequest, ModelResponse, StreamItem, TextDelta, ToolCallRequest, Usage

NAME = "openai"
DEFAULT_IDLE_TIMEOUT_MS = 60_000
CONNECT_TIMEOUT_SECONDS = 10.0
#: Most characters of an upstream error body kept in the error message.
ERROR_TEXT_MAX_CHARS = 500


def _wire_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for m in messages:
        item: dict[str, Any] = {"role": m["role"], "content": m.get("content") or ""}
        if m.get("tool_calls"):
            item["tool_calls"] = [{"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                                  for c in m["tool_calls"]]
            if not item["content"]:
                item["content"] = None
        if m["role"] == "tool":
            item["tool_call_id"] = m.get("tool_call_id")
        out.append(item)
    return out


def _tool_choice(choice: Any) -> Any:
    if isinstance(choice, dict) and choice.get("name"):
        return {"type": "function", "function": {"name": choice["name"]}}
    return choice if choice in ("auto", "required", "none") else "auto"


class OpenAIChatClient:
    """ModelClient for OpenAI-compatible chat completions. Thread-safe (a client per call)."""

    name = NAME

    def __init__(self, *, base_url: str, idle_timeout_ms: int | None = None, transport: httpx.BaseTransport | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.idle_timeout_ms = idle_timeout_ms or DEFAULT_IDLE_TIMEOUT_MS
        self.transport = transport

    def stream(self, request: ModelRequest) -> Iterator[StreamItem]:
        body: dict[str, Any] = {"model": request.model, "messages": _wire_messages(request.messages), "stream": True,
                                "stream_options": {"include_usage": True}}
        if request.tools:
            body["tools"] = [{"type": "function", "function": t} for t in request.tools]
            body["tool_choice"] = _tool_choice(request.tool_choice)
        if request.max_output_tokens:
            body["max_tokens"] = request.max_output_tokens
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if request.api_key:
            headers["Authorization"] = f"Bearer {request.api_key}"
        idle = self.idle_timeout_ms / 1000
        timeout = httpx.Timeout(connect=CONNECT_TIMEOUT_SECONDS, read=idle, write=idle, pool=CONNECT_TIMEOUT_SECONDS)
        text: list[str] = []
        calls: dict[int, dict[str, Any]] = {}
        finish = "stop"
        usage = Usage()
        model = request.model
        try:
            with httpx.Client(timeout=timeout, transport=self.transport) as client:
                with client.stream("POST", f"{self.base_url}/chat/completions", json=body, headers=headers) as response:
                    if response.status_code >= 400:
                        detail = response.read().decode("utf-8", "replace")[:ERROR_TEXT_MAX_CHARS]
                        raise ModelError("provider_error", f"provider returned HTTP {response.status_code}: {detail}",
                                         status=response.status_code)
                    for line in response.iter_lines():
                        if not line.startswith("data:"):
                            continue
                        data = line[5:].strip()
                        if data == "[DONE]":
                            break
                        try:
                            frame = json.loads(data)
                        except ValueError:
                            raise ModelError("bad_response", "provider sent a frame that is not JSON") from None
                        if isinstance(frame.get("error"), dict):
                            raise ModelError("provider_error", str(frame["error"].get("message") or frame["error"]))
                        model = frame.get("model") or model
                        if isinstance(frame.get("usage"), dict):
                            usage = Usage(int(frame["usage"].get("prompt_tokens") or 0), int(frame["usage"].get("completion_tokens") or 0))
                        for choice in frame.get("choices") or []:
                            delta = choice.get("delta") or {}
                            if delta.get("content"):
                                text.append(delta["content"])
                                yield TextDelta(delta["content"])
                            for call in delta.get("tool_calls") or []:
                                slot = calls.setdefault(int(call.get("index", 0)), {"id": "", "name": "", "arguments": ""})
                                slot["id"] = call.get("id") or slot["id"]
                                function = call.get("function") or {}
                                slot["name"] += function.get("name") or ""
                                slot["arguments"] += function.get("arguments") or ""
                            if choice.get("finish_reason"):
                                finish = choice["finish_reason"]
        except httpx.ReadTimeout:
            raise ModelError("idle_timeout", f"the provider sent nothing for {self.idle_timeout_ms} ms") from None
        except httpx.TimeoutException as exc:
            raise ModelError("provider_error", f"provider timeout: {type(exc).__name__}") from None
        except httpx.HTTPError as exc:
            raise ModelError("provider_error", f"provider request failed: {type(exc).__name__}: {exc}") from None
        except (httpx.InvalidURL, UnicodeEncodeError) as exc:
            # A base URL the client cannot address, or an API key that is not ASCII (HTTP headers
            # carry ASCII only): a configuration problem reported as this runtime's failure.
            raise ModelError("provider_error", f"provider request could not be sent: {type(exc).__name__}") from None
        tool_calls = [ToolCallRequest(id=c["id"] or f"call-{i}", name=c["name"], arguments=c["arguments"])
                      for i, c in sorted(calls.items())]
        yield ModelResponse(text="".join(text), tool_calls=tool_calls, finish_reason=finish, usage=usage, model=model)
