"""Play a session over HTTP with the Django test client (POST /api/sessions, POST /api/actions on
the in-process worker with the offline scripted provider), for the builtin plugins' turn tests."""
from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from tests.turns.prompt_support import model_calls_of
from tests.turns.test_actions_helpers import stream_read


@dataclass
class Played:
    """A played session: id, owner token, creation body and each action's frames in order."""

    id: str
    token: str
    created: dict[str, Any]
    streams: list[list[dict[str, Any]]] = field(default_factory=list)

    def frames(self, event_type: str, stream: int | None = None) -> list[dict[str, Any]]:
        chosen = self.streams if stream is None else [self.streams[stream]]
        return [f for s in chosen for f in s if f["type"] == event_type]

    def model_calls(self, stream: int | None = None) -> list[dict[str, Any]]:
        """The llm.calling payloads, prompts included, of the turns of one stream (or all), oldest
        first: from the trace rows, where the prompt is kept (the stream's frames name it by digest)."""
        chosen = self.streams if stream is None else [self.streams[stream]]
        turn_ids = {f.get("turnId") for s in chosen for f in s if f.get("turnId")}
        return model_calls_of(self.id, turn_ids=turn_ids)


def _auth(played: Played) -> dict[str, str]:
    return {"HTTP_AUTHORIZATION": f"Bearer {played.token}"}


def get_json(client, played: Played, path: str) -> Any:
    response = client.get(path, **_auth(played))
    assert response.status_code == 200, response.content
    return response.json()


def act(client, played: Played, type: str, payload: dict[str, Any]) -> list[dict[str, Any]]:
    body = {"requestId": f"req-{uuid.uuid4().hex[:12]}", "type": type, "sessionId": played.id, "payload": payload}
    response = client.post("/api/actions", data=json.dumps(body), content_type="application/json", **_auth(played))
    assert response.status_code == 200, response.content
    frames = stream_read(response)
    completed = [f for f in frames if f["type"] == "execution.completed"]
    assert len(completed) == 1 and completed[0]["payload"]["committed"] is True, [(f["type"], f["payload"]) for f in frames][-5:]
    played.streams.append(frames)
    return frames


def play(client, world_id: str, *, says: list[str], name: str, locale: str | None = None) -> Played:
    """Create a session in ``world_id``, start it, answer the character form with ``name``
    (selects at their default), then play one ``say`` turn per text."""
    body: dict[str, Any] = {"worldId": world_id}
    if locale:
        body["locale"] = locale
    response = client.post("/api/sessions", data=json.dumps(body), content_type="application/json")
    assert response.status_code == 201, response.content
    created = response.json()
    played = Played(id=created["id"], token=created["ownerToken"], created=created)
    frames = act(client, played, "start_session", {})
    requested = [f for f in frames if f["type"] == "interaction.requested"]
    assert requested, [f["type"] for f in frames]
    actions = []
    for frame in requested:
        interaction = frame["payload"]["interaction"]
        values: dict[str, Any] = {}
        for spec in interaction["fields"]:
            if spec["name"] == "characterName":
                values["characterName"] = name
            elif spec["type"] == "select":
                options = [o["value"] if isinstance(o, dict) else o for o in spec["options"]]
                values[spec["name"]] = spec.get("defaultValue") if spec.get("defaultValue") in options else options[0]
            else:
                values[spec["name"]] = "Quiet and watchful."
        actions.append({"kind": "act", "fields": values,
                        "interaction": {"turnId": frame["turnId"], "interactionId": interaction["interactionId"], "type": "form"}})
    act(client, played, "submit_actions", {"actions": actions})
    for text in says:
        act(client, played, "submit_actions", {"actions": [{"kind": "say", "text": text}]})
    return played


def runtime_status(frames: list[dict[str, Any]], runtime_id: str) -> list[dict[str, Any]]:
    """The runtime.completed payloads of one runtime, in order."""
    return [f["payload"] for f in frames if f["type"] == "runtime.completed" and f["payload"]["runtimeId"] == runtime_id]


def model_calls(frames: list[dict[str, Any]], runtime_id: str) -> list[dict[str, Any]]:
    return [f["payload"] for f in frames if f["type"] == "llm.calling" and f["payload"]["runtimeId"] == runtime_id]
