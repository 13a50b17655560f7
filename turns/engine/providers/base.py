"""The ModelClient protocol: one streaming chat call with tool calls.

A call is ``client.stream(request)``: an iterator of ``TextDelta`` items (each a piece of the
assistant's prose, in order) that ends with exactly one ``ModelResponse`` (the whole reply:
text, tool calls, finish reason, usage). Providers raise ``ModelError`` for every failure
(HTTP error, idle timeout, malformed stream); the agent loop turns it into a runtime failure.

Messages use the standard chat shape (dicts):
    {"role": "system"|"user"|"assistant"|"tool", "content": str,
     "tool_calls"?: [{"id", "name", "arguments": <JSON text>}], "tool_call_id"?: str}
Tools: [{"name", "description", "parameters": <JSON Schema object>}].
tool_choice: "auto" | "required" | "none" | {"name": <tool>}.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator, Protocol, Union, runtime_checkable

from covel.outbound import ProviderKey


class ModelError(Exception):
    """A provider failure. code: "provider_error" | "idle_timeout" | "bad_response" | "no_key"
    | "not_configured" | "unreachable" (no answer from the endpoint) | "target_not_allowed" /
    "model_relay_unavailable" (covel.outbound refused the endpoint's address before connecting, or
    the request's model relay has no browser connected) | "model_relay_failed" /
    "model_relay_too_large" (the player's browser failed or overfilled a relayed call);
    status: upstream HTTP status when there was one. ``message`` never holds a key."""

    def __init__(self, code: str, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status


@dataclass(frozen=True)
class ToolCallRequest:
    """One tool call in a model reply; arguments is the raw JSON text the model wrote."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class TextDelta:
    """A streamed piece of assistant prose."""

    text: str


@dataclass
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0

    def to_json(self) -> dict[str, int]:
        return {"input": self.input_tokens, "output": self.output_tokens}


@dataclass
class ModelResponse:
    """The complete reply. finish_reason: "stop" | "tool_calls" | "length" | provider text."""

    text: str = ""
    tool_calls: list[ToolCallRequest] = field(default_factory=list)
    finish_reason: str = "stop"
    usage: Usage = field(default_factory=Usage)
    model: str = ""


StreamItem = Union[TextDelta, ModelResponse]


@dataclass
class ModelRequest:
    """One model call.

    slot / model: the resolved slot name and model id. context: engine facts the offline
    `scripted` provider answers from (runtime id, plugin id, locale, world, characters, player
    message, is_story, step, upstream outputs...); real providers ignore it.
    api_key: the key the router chose for this slot under the key rule of covel.outbound
    (``ProviderKey``: value plus where it came from; never stored, never in ``repr``). A plain
    string is accepted for direct client use and is checked again when sent.
    max_output_tokens: optional cap.
    """

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = field(default_factory=list)
    tool_choice: Any = "auto"
    slot: str = "story"
    model: str = ""
    api_key: ProviderKey | str | None = field(default=None, repr=False)
    context: dict[str, Any] = field(default_factory=dict)
    max_output_tokens: int | None = None


@runtime_checkable
class ModelClient(Protocol):
    """A model provider. ``stream`` may be called from worker threads; implementations keep no
    per-call state on the instance. ``cancel`` (optional attribute on the request context) is
    not used: the agent loop stops consuming the iterator instead."""

    name: str

    def stream(self, request: ModelRequest) -> Iterator[StreamItem]:
        """Yield TextDelta items, then one ModelResponse. Raises ModelError."""
        ...


def response_collect(items: Iterator[StreamItem]) -> ModelResponse:
    """Drain a stream and return its final ModelResponse (raises ModelError when none came)."""
    final: ModelResponse | None = None
    for item in items:
        if isinstance(item, ModelResponse):
            final = item
    if final is None:
        raise ModelError("bad_response", "the model stream ended without a response")
    return final
