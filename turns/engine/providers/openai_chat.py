"""The `openai` provider: any OpenAI-compatible ``POST {baseUrl}/chat/completions`` endpoint,
streamed (protocol ``openai-chat-v1``), over httpx.

- Streaming: ``stream: true`` with ``stream_options.include_usage``; ``choices[0].delta.content``
  pieces become TextDelta items; ``delta.tool_calls`` are assembled by index.
- Idle timeout: no byte for ``idle_timeout_ms`` (default 60 s) ends the call with
  ModelError("idle_timeout"); the call is never retried (spec: no retry on idle).
- Provider errors (HTTP status >= 400, connection failures, malformed frames) raise
  ModelError("provider_error" | "bad_response" | "unreachable") and fail the runtime.
- Every call goes through covel.outbound.send: the key rides along only where the key rule allows
  it, an endpoint a request supplied (``is_request_supplied``) passes the SSRF guard first
  (ModelError "target_not_allowed" / "model_relay_unavailable"), and redirects are not followed.
  For such an endpoint every failure that is not a model's own answer reads the same
  ("could not reach the model endpoint") and no upstream body is quoted, so the server cannot be
  used to tell ports apart or to read other services; error texts never hold the key.
- Local model relay (spec 004 §本地模型中继): with ``relay`` (covel.model_relay.RelayTransport), a
  request-supplied endpoint on loopback/LAN in a shared tier is fetched by the player's browser;
  its answer is parsed as any other. Relay failures keep their code and ``Local model relay: …``
  message (ModelError "model_relay_unavailable" | "model_relay_failed" | "model_relay_too_large"),
  and a stalled relay is an "idle_timeout" like a silent provider.
"""

from __future__ import annotations

import json
from typing import Any, Iterator

import httpx

from covel import outbound
from turns.engine.providers.base import ModelError, ModelRequest, ModelResponse, StreamItem, TextDelta, ToolCallRequest, Usage

NAME = "openai"
DEFAULT_IDLE_TIMEOUT_MS = 60_000
CONNECT_TIMEOUT_SECONDS = 10.0
#: Most characters of an upstream error body kept in the error message (operator endpoints only).
ERROR_TEXT_MAX_CHARS = 500
#: Most bytes of an error answer read at all.
ERROR_BODY_MAX_BYTES = 64 * 1024


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
    """ModelClient for OpenAI-compatible chat completions. Thread-safe (a connection per call).

    base_url: the endpoint (``.../v1``). is_request_supplied: the endpoint came from a client
    (X-Slot-Config), see the module docstring. transport: test seam replacing the network.
    relay: the request's model-relay transport (covel.model_relay), for a request-supplied
    loopback/LAN endpoint in a shared tier.
    """

    name = NAME

    def __init__(self, *, base_url: str, idle_timeout_ms: int | None = None, transport: httpx.BaseTransport | None = None,
                 is_request_supplied: bool = False, relay: httpx.BaseTransport | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.idle_timeout_ms = idle_timeout_ms or DEFAULT_IDLE_TIMEOUT_MS
        self.transport = transport
        self.is_request_supplied = is_request_supplied
        self.relay = relay

    def _key(self, request: ModelRequest) -> outbound.ProviderKey | None:
        if isinstance(request.api_key, outbound.ProviderKey) or not request.api_key:
            return request.api_key or None
        # A plain string of unknown origin: covel.outbound checks it against the server keys.
        return outbound.ProviderKey(NAME, request.api_key, source="unknown")

    def _unreachable(self, detail: str) -> ModelError:
        message = outbound.MESSAGE_UNREACHABLE if self.is_request_supplied else f"{outbound.MESSAGE_UNREACHABLE}: {detail}"
        return ModelError("unreachable", message)

    def _http_error(self, response: httpx.Response, key: outbound.ProviderKey | None) -> ModelError:
        """A status >= 400. A request-supplied endpoint's answer counts only when it is a model
        API's JSON error (``{"error": ...}``), and its body is never quoted."""
        status = response.status_code
        try:
            raw = outbound.read_limited(response, ERROR_BODY_MAX_BYTES).decode("utf-8", "replace")
        except (httpx.HTTPError, outbound.OutboundError):
            raw = ""
        if not self.is_request_supplied:
            detail = outbound.redact(raw, key)[:ERROR_TEXT_MAX_CHARS]
            return ModelError("provider_error", f"provider returned HTTP {status}: {detail}", status=status)
        try:
            parsed = json.loads(raw)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict) and isinstance(parsed.get("error"), (dict, str)):
            return ModelError("provider_error", f"the model endpoint answered HTTP {status}", status=status)
        return self._unreachable("")

    def stream(self, request: ModelRequest) -> Iterator[StreamItem]:
        body: dict[str, Any] = {"model": request.model, "messages": _wire_messages(request.messages), "stream": True,
                                "stream_options": {"include_usage": True}}
        if request.tools:
            body["tools"] = [{"type": "function", "function": t} for t in request.tools]
            body["tool_choice"] = _tool_choice(request.tool_choice)
        if request.max_output_tokens:
            body["max_tokens"] = request.max_output_tokens
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        key = self._key(request)
        idle = self.idle_timeout_ms / 1000
        timeout = httpx.Timeout(connect=CONNECT_TIMEOUT_SECONDS, read=idle, write=idle, pool=CONNECT_TIMEOUT_SECONDS)
        text: list[str] = []
        calls: dict[int, dict[str, Any]] = {}
        finish = "stop"
        usage = Usage()
        model = request.model
        frames = 0
        try:
            with outbound.send("POST", f"{self.base_url}/chat/completions", is_request_supplied=self.is_request_supplied,
                               key=key, json=body, headers=headers, timeout=timeout, transport=self.transport,
                               relay=self.relay) as response:
                if response.status_code >= 400:
                    raise self._http_error(response, key)
                if response.status_code >= 300:
                    raise self._unreachable(f"it answered a redirect (HTTP {response.status_code}); model calls do not follow redirects")
                content_type = response.headers.get("content-type", "")
                if self.is_request_supplied and not content_type.lower().startswith("text/event-stream"):
                    raise self._unreachable("")
                for line in response.iter_lines():
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    frames += 1
                    if data == "[DONE]":
                        break
                    try:
                        frame = json.loads(data)
                    except ValueError:
                        frame = None
                    if not isinstance(frame, dict):
                        raise ModelError("bad_response", "provider sent a frame that is not a JSON object")
                    if isinstance(frame.get("error"), dict):
                        message = str(frame["error"].get("message") or "the provider reported an error")
                        raise ModelError("provider_error", "the model endpoint reported an error" if self.is_request_supplied
                                         else outbound.redact(message, key)[:ERROR_TEXT_MAX_CHARS])
                    model = frame.get("model") if isinstance(frame.get("model"), str) else model
                    if isinstance(frame.get("usage"), dict):
                        usage = Usage(_int(frame["usage"].get("prompt_tokens")), _int(frame["usage"].get("completion_tokens")))
                    for choice in frame.get("choices") or []:
                        if not isinstance(choice, dict):
                            continue
                        delta = choice.get("delta") or {}
                        if isinstance(delta.get("content"), str) and delta["content"]:
                            text.append(delta["content"])
                            yield TextDelta(delta["content"])
                        for call in delta.get("tool_calls") or []:
                            if not isinstance(call, dict):
                                continue
                            position = _call_position(call, calls)
                            slot = calls.setdefault(position, {"id": "", "name": "", "arguments": ""})
                            slot["id"] = call.get("id") or slot["id"]
                            function = call.get("function") or {}
                            slot["name"] += function.get("name") or ""
                            slot["arguments"] += function.get("arguments") or ""
                        if choice.get("finish_reason"):
                            finish = choice["finish_reason"]
        except outbound.RelayError as exc:
            raise ModelError("idle_timeout" if exc.code == outbound.CODE_RELAY_TIMEOUT else exc.code, exc.message) from None
        except outbound.OutboundError as exc:
            if exc.code == outbound.CODE_TIMEOUT:
                raise ModelError("idle_timeout", f"the provider sent nothing for {self.idle_timeout_ms} ms") from None
            if exc.code in outbound.REFUSAL_CODES:
                raise ModelError(exc.code, exc.message) from None
            if exc.code == outbound.CODE_UNSENDABLE:
                # A base URL the client cannot address, or an API key that is not ASCII (HTTP
                # headers carry ASCII only): a configuration problem reported as this runtime's failure.
                raise ModelError("provider_error", f"provider request could not be sent: {exc.message}") from None
            raise ModelError("unreachable", exc.message) from None
        except httpx.ReadTimeout:
            raise ModelError("idle_timeout", f"the provider sent nothing for {self.idle_timeout_ms} ms") from None
        except httpx.HTTPError as exc:
            # The answer broke off after its head: the type says enough, and the text of some
            # httpx errors quotes the URL.
            raise ModelError("provider_error", f"the model stream broke off ({type(exc).__name__})") from None
        except (AttributeError, TypeError):
            raise ModelError("bad_response", "provider sent a frame of an unexpected shape") from None
        if frames == 0:
            # An HTTP 2xx that is not an event stream of chat frames: not a model endpoint.
            raise ModelError("bad_response", outbound.MESSAGE_UNREACHABLE if self.is_request_supplied
                             else "the provider's answer held no stream frames")
        tool_calls = [ToolCallRequest(id=c["id"] or f"call-{i}", name=c["name"], arguments=c["arguments"])
                      for i, c in sorted(calls.items())]
        yield ModelResponse(text="".join(text), tool_calls=tool_calls, finish_reason=finish, usage=usage, model=model)


def _call_position(call: dict[str, Any], calls: dict[int, dict[str, str]]) -> int:
    """Which tool call a streamed delta continues. OpenAI numbers them (``index``); some hosts
    (llama.cpp builds, gateways) send the index only on a call's first delta or never: then a delta
    with a new ``id`` starts the next call and one without continues the latest."""
    index = call.get("index")
    if isinstance(index, int) and not isinstance(index, bool):
        return index
    if not calls:
        return 0
    latest = max(calls)
    new_id = call.get("id")
    if isinstance(new_id, str) and new_id and calls[latest]["id"] and new_id != calls[latest]["id"]:
        return latest + 1
    return latest


def _int(value: Any) -> int:
    """A count from a frame; anything that is not an integer counts as 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
