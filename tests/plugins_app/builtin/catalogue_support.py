"""Play a session with an explicit plugin selection over HTTP (Django test client, offline
scripted model): the catalogue plugins' turn tests (issue 20)."""
from __future__ import annotations

import json
from typing import Any

from plugins_app.models import PluginData
from tests.plugins_app.builtin.play_support import Played, act


def play_with(client, world_id: str, plugins: list[str] | None, *, says: list[str], name: str,
              locale: str | None = None, kind: str = "say") -> Played:
    """Create a session in ``world_id`` with ``plugins`` (None: the world's defaults), start it,
    answer the character form with ``name`` and play one turn per text."""
    body: dict[str, Any] = {"worldId": world_id}
    if plugins is not None:
        body["plugins"] = plugins
    if locale:
        body["locale"] = locale
    response = client.post("/api/sessions", data=json.dumps(body), content_type="application/json")
    assert response.status_code == 201, response.content
    created = response.json()
    played = Played(id=created["id"], token=created["ownerToken"], created=created)
    frames = act(client, played, "start_session", {})
    actions = []
    for frame in [f for f in frames if f["type"] == "interaction.requested"]:
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
    if actions:
        act(client, played, "submit_actions", {"actions": actions})
    for text in says:
        act(client, played, "submit_actions", {"actions": [{"kind": kind, "text": text}]})
    return played


def plugin_data(session_id: str, plugin_id: str, namespace: str) -> dict[str, Any]:
    return dict(PluginData.objects.filter(session_id=session_id, plugin_id=plugin_id, namespace=namespace)
                .values_list("key", "value"))


def completed(played: Played, runtime_id: str) -> list[str]:
    """The statuses of one runtime's runs, in order."""
    return [f["payload"]["status"] for f in played.frames("runtime.completed") if f["payload"]["runtimeId"] == runtime_id]


def failed_runtimes(played: Played, plugin_id: str | None = None) -> list[dict[str, Any]]:
    """The failed runs (runtime.completed payloads), only ``plugin_id``'s when given."""
    return [f["payload"] for f in played.frames("runtime.completed") if f["payload"]["status"] == "failed"
            and (plugin_id is None or f["payload"]["pluginId"] == plugin_id)]


def ui_parts(played: Played, stream: int | None = None) -> list[dict[str, Any]]:
    return [p for f in played.frames("ui.rendered", stream) for p in f["payload"]["block"]["parts"]]
