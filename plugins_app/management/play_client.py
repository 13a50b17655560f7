"""A small HTTP client that plays a session the way a player does (spec 004 §快速开始, §玩家交互,
§开场接力), used by ``manage.py play``.

- ``PlayClient(base_url)``: JSON requests and ``action(type, payload)`` — POST /api/actions read
  to the end of its data-only SSE stream (SseEnvelope frames), calling ``on_frame`` per frame.
- ``form_answer(interaction, name, zh)``: a valid answer to a character form.
- ``Transcript``: the markdown transcript (``--transcript``).

Only httpx and the public HTTP API: it runs against any Covel server.
"""
from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

import httpx

#: Seconds to wait for the next byte of an action stream (a turn with a real model can be slow).
READ_TIMEOUT_SECONDS = 300.0


class PlayError(Exception):
    """A request the server refused (status, body) or a stream that ended without completing."""


@dataclass
class ActionStream:
    """One POST /api/actions: every envelope in order."""

    frames: list[dict[str, Any]] = field(default_factory=list)

    def of_type(self, event_type: str) -> list[dict[str, Any]]:
        return [f for f in self.frames if f.get("type") == event_type]

    @property
    def completed(self) -> dict[str, Any]:
        done = self.of_type("execution.completed")
        return done[-1]["payload"] if done else {}

    def narration(self) -> list[str]:
        """The story prose of each turn of the stream, in order (``narrative.completed``)."""
        return [f["payload"].get("text") or "" for f in self.of_type("narrative.completed")]


class PlayClient:
    """JSON + SSE against one server. ``token``: the session owner token once known."""

    def __init__(self, base_url: str, *, timeout: float = READ_TIMEOUT_SECONDS) -> None:
        self.http = httpx.Client(base_url=base_url.rstrip("/"), timeout=httpx.Timeout(30.0, read=timeout))
        self.token: str | None = None

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def json(self, method: str, path: str, body: Any = None) -> Any:
        response = self.http.request(method, path, json=body, headers=self._headers())
        if response.status_code >= 300:
            raise PlayError(f"{method} {path} → {response.status_code}: {response.text[:500]}")
        return response.json()

    def action(self, session_id: str, type: str, payload: dict[str, Any],
               on_frame: Callable[[dict[str, Any]], None] | None = None) -> ActionStream:
        """POST /api/actions and read its stream to the end. Raises PlayError on a non-200 answer,
        an ``error.occurred`` frame or a stream without ``execution.completed``."""
        body = {"requestId": f"play-{uuid.uuid4().hex[:16]}", "type": type, "sessionId": session_id, "payload": payload}
        stream = ActionStream()
        with self.http.stream("POST", "/api/actions", json=body, headers=self._headers()) as response:
            if response.status_code != 200:
                response.read()
                raise PlayError(f"POST /api/actions ({type}) → {response.status_code}: {response.text[:500]}")
            data: list[str] = []
            for line in response.iter_lines():
                if line.startswith("data:"):
                    data.append(line[5:].lstrip())
                elif line == "" and data:
                    frame = json.loads("\n".join(data))
                    data = []
                    stream.frames.append(frame)
                    if on_frame is not None:
                        on_frame(frame)
        errors = stream.of_type("error.occurred")
        if errors:
            raise PlayError(f"{type}: {errors[0]['payload'].get('code')}: {errors[0]['payload'].get('message')}")
        if not stream.of_type("execution.completed"):
            raise PlayError(f"{type}: the stream ended without execution.completed")
        return stream


def _option_value(option: Any) -> Any:
    return option.get("value") if isinstance(option, dict) else option


def form_answer(interaction: dict[str, Any], *, name: str, zh: bool) -> dict[str, Any]:
    """Field values for a form interaction: ``name`` for characterName (or any *name* text field),
    the default or first option of a select, a short line for other text fields, the default or
    minimum of a number, the default (else true) of a checkbox."""
    values: dict[str, Any] = {}
    for spec in interaction.get("fields") or []:
        field_name, kind = spec.get("name"), spec.get("type")
        options = [_option_value(o) for o in spec.get("options") or []]
        if kind == "select":
            values[field_name] = spec.get("defaultValue") if spec.get("defaultValue") in options else options[0]
        elif kind == "checkbox":
            values[field_name] = bool(spec.get("defaultValue", True))
        elif kind == "number":
            default = spec.get("defaultValue")
            values[field_name] = default if isinstance(default, (int, float)) else spec.get("min", 1)
        elif "name" in str(field_name).lower():
            values[field_name] = name
        else:
            values[field_name] = "沉稳，话不多，答应的事一定做到。" if zh else "Quiet and watchful; keeps small promises."
    return values


def form_text(interaction: dict[str, Any]) -> str:
    """The form as plain lines: title, then one line per field (label, type, options)."""
    lines = [f"[{interaction.get('title') or interaction.get('interactionId')}]"]
    for spec in interaction.get("fields") or []:
        options = [str(_option_value(o)) for o in spec.get("options") or []]
        extra = f" ({' / '.join(options)})" if options else ""
        required = " *" if spec.get("required") else ""
        lines.append(f"  - {spec.get('label') or spec.get('name')}{required}: {spec.get('type')}{extra}")
    return "\n".join(lines)


class Transcript:
    """Markdown transcript of a played session (``--transcript PATH``)."""

    def __init__(self) -> None:
        self.parts: list[str] = []

    def add(self, text: str) -> None:
        self.parts.append(text.rstrip() + "\n")

    def text(self) -> str:
        return "\n".join(self.parts)
