"""Playing a session over HTTP the way a client does (spec 004 §快速开始, §玩家交互, §开场接力).

- ``session_create``: POST /api/sessions with the world's default plugin set (plugin-plan).
- ``form_fields_fill`` / ``interaction_answer``: a valid answer to a form, choice or confirmation
  from an ``interaction.requested`` payload.
- ``session_setup``: start_session, then answer every setup interaction until the session is in
  phase ``playing``; returns each action's ActionResult (the last one carries the opening
  continuation).
- ``say``: one ``say`` turn.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from tests.e2e.client import ActionResult, Api

MAX_SETUP_ROUNDS = 8


@dataclass
class PlayedSession:
    """A created session: its id, owner token and the Api bound to that token."""

    id: str
    token: str
    api: Api
    created: dict[str, Any]
    setup: list[ActionResult] = field(default_factory=list)


def session_create(api: Api, world_id: str, *, locale: str | None = None) -> PlayedSession:
    """Create a session in ``world_id`` with the plugin set the world's plan selects by default."""
    plan = api.json("GET", f"/api/worlds/{world_id}/plugin-plan")
    body: dict[str, Any] = {"worldId": world_id, "plugins": plan["defaultPluginIds"]}
    if locale:
        body["locale"] = locale
    created = api.json("POST", "/api/sessions", body, expect=201)
    return PlayedSession(id=created["id"], token=created["ownerToken"], api=api.with_token(created["ownerToken"]),
                         created=created)


def _option_value(option: Any) -> str:
    return option if isinstance(option, str) else option["value"]


def form_fields_fill(fields: list[dict[str, Any]], *, player_name: str) -> dict[str, Any]:
    """A value for every field that passes the form's own checks (type, options, range)."""
    values: dict[str, Any] = {}
    for spec in fields:
        name, kind = spec["name"], spec["type"]
        if kind == "select":
            options = [_option_value(o) for o in spec.get("options") or []]
            default = spec.get("defaultValue")
            values[name] = default if default in options else options[0]
        elif kind == "checkbox":
            values[name] = bool(spec.get("defaultValue", True))
        elif kind == "number":
            default = spec.get("defaultValue")
            values[name] = default if isinstance(default, (int, float)) else spec.get("min", 1)
        elif "name" in name.lower():
            values[name] = player_name
        else:
            values[name] = "Quiet, watchful, and stubborn about small promises."
    return values


def interaction_answer(requested: dict[str, Any], *, player_name: str) -> dict[str, Any]:
    """The submit_actions action that answers one ``interaction.requested`` payload."""
    interaction = requested["interaction"]
    kind = interaction["type"]
    if kind == "form":
        fields = form_fields_fill(interaction["fields"], player_name=player_name)
    elif kind == "choice":
        first = interaction["choices"][0]
        fields = {"selectedId": first["id"], "selectedLabel": first["label"]}
    elif kind == "confirmation":
        fields = {"confirmed": True}
    else:
        raise AssertionError(f"unknown interaction type {kind!r}: {json.dumps(requested, ensure_ascii=False)}")
    default_kind = "say" if kind == "choice" else "act"
    return {
        "kind": interaction.get("actionKind") or default_kind,
        "interaction": {"turnId": requested["turnId"], "interactionId": interaction["interactionId"], "type": kind},
        "fields": fields,
    }


def expect_committed(result: ActionResult) -> ActionResult:
    """Assert a 200 stream ending in exactly one ``execution.completed`` with committed: true."""
    assert result.status_code == 200, result.describe()
    completed = result.of_type("execution.completed")
    assert len(completed) == 1, f"expected exactly one execution.completed\n{result.describe()}"
    assert completed[0]["payload"].get("committed") is True, result.describe()
    assert not result.of_type("error.occurred"), result.describe()
    seqs = [frame["seq"] for frame in result.frames]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs), f"seq not increasing: {seqs}"
    return result


def session_setup(played: PlayedSession, *, player_name: str = "Wren Talloway") -> list[ActionResult]:
    """start_session, then answer the setup interactions until phase ``playing``.

    Returns the ActionResults in order; the last one ran the opening continuation.
    """
    api = played.api
    results = [expect_committed(api.action("start_session", played.id, {}))]
    for _ in range(MAX_SETUP_ROUNDS):
        session = api.json("GET", f"/api/sessions/{played.id}")
        if session["phase"] == "playing":
            played.setup = results
            return results
        requested = results[-1].of_type("interaction.requested")
        assert requested, (
            f"session {played.id} is still in setup ({json.dumps(session['setupRuntimes'])}) but the last "
            f"stream asked nothing\n{results[-1].describe()}"
        )
        actions = [interaction_answer(frame["payload"], player_name=player_name) for frame in requested]
        results.append(expect_committed(api.action("submit_actions", played.id, {"actions": actions})))
    raise AssertionError(f"session {played.id} still in setup after {MAX_SETUP_ROUNDS} rounds")


def say(played: PlayedSession, text: str, *, api: Api | None = None) -> ActionResult:
    """One ``say`` turn (not asserted: callers check the outcome they expect)."""
    return (api or played.api).action("submit_actions", played.id, {"actions": [{"kind": "say", "text": text}]})
