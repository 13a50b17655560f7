"""The builtin game against a model that is not ours (issue 14): every slot in llm.toml points at
``tests.model_peer.ModelPeer`` — a real HTTP server that streams like real OpenAI-compatible hosts
(split, index-less tool-call deltas, usage chunks, ``[DONE]``, an ignored ``tool_choice``) and plays
only from what it receives. Both builtin worlds, setup and 10 turns each, quiet and busy: every
builtin runtime completes and no turn reports a failed runtime. Runs on SQLite and on PostgreSQL +
Redis (both halves of ``make test``)."""
from __future__ import annotations

import json
import os
import uuid
from typing import Any

import pytest

from tests.e2e.client import ActionResult
from tests.e2e.play import PlayedSession, expect_committed, session_create, session_setup
from tests.model_peer import QUIET_MARKERS, ModelPeer, Quirks
from tests.turns.test_actions_helpers import sse_frames, stream_bytes

pytestmark = pytest.mark.django_db(transaction=True)

WORLDS = ("hollow-reach-light", "yanhui-ferry")
#: Ten player lines; "wait"/"listen"/"rest" ones are quiet (the peer's story names nobody new).
LINES = (
    "I walk down to the harbour and greet whoever is there.",
    "I wait by the door and listen.",
    "I follow the path uphill toward the lights.",
    "I rest for a while and look around.",
    "I knock on the nearest door and introduce myself.",
    "I listen to the wind for a moment.",
    "I ask about the old lamp and where it came from.",
    "I cross the square to the far side.",
    "I wait for the tide to turn.",
    "I thank my host and head out again.",
)


class ClientApi:
    """The e2e ``Api`` surface (json, action, with_token) over Django's test client, so the play
    helpers of tests/e2e/play.py drive the in-process server the same way they drive daphne."""

    def __init__(self, client, token: str | None = None, headers: dict[str, str] | None = None) -> None:
        self.client, self.token, self.headers = client, token, dict(headers or {})
        self.base_url = "testserver"

    def with_token(self, token: str | None) -> "ClientApi":
        return ClientApi(self.client, token, self.headers)

    def _extra(self) -> dict[str, str]:
        extra = {f"HTTP_{k.upper().replace('-', '_')}": v for k, v in self.headers.items()}
        if self.token:
            extra["HTTP_X_SESSION_TOKEN"] = self.token
        return extra

    def json(self, method: str, path: str, body: dict[str, Any] | None = None, *, expect: int = 200) -> Any:
        call = getattr(self.client, method.lower())
        kwargs = {"data": json.dumps(body), "content_type": "application/json"} if body is not None else {}
        response = call(path, **kwargs, **self._extra())
        assert response.status_code == expect, f"{method} {path} -> {response.status_code} {response.content[:2000]!r}"
        return response.json()

    def action(self, action_type: str, session_id: str, payload: dict[str, Any], **_: Any) -> ActionResult:
        body = {"requestId": f"peer-{uuid.uuid4().hex[:16]}", "type": action_type, "sessionId": session_id, "payload": payload}
        response = self.client.post("/api/actions", data=json.dumps(body), content_type="application/json", **self._extra())
        result = ActionResult(request=body, status_code=response.status_code)
        if response.status_code != 200:
            result.error = response.json()
            return result
        result.frames = sse_frames(stream_bytes(response))
        return result


def llm_toml(tmp_path, peer: ModelPeer, *, provider: str = "my-lab", models: dict[str, str] | None = None) -> str:
    """An llm.toml in the original project's format: a free provider id, the wire picked by
    ``protocol``, every slot on the peer. ``models``: slot → model id (default ``peer-large``)."""
    lines = []
    for slot in ("story", "plugin", "default"):
        model = (models or {}).get(slot, "peer-large")
        lines += [f"[covel.{slot}]", f'provider = "{provider}"', 'protocol = "openai-chat-v1"',
                  f'model = "{model}"', f'baseUrl = "{peer.base_url}"', ""]
    path = tmp_path / "llm.toml"
    path.write_text("\n".join(lines), encoding="utf-8")
    return str(path)


@pytest.fixture
def peer(tmp_path, settings):
    with ModelPeer(quirks=Quirks(indexless=True, ignore_tool_choice=True)) as server:
        settings.COVEL_LLM_TOML = llm_toml(tmp_path, server)
        settings.COVEL_OUTBOUND_ALLOW = ("127.0.0.1",)
        try:
            yield server
        finally:
            dump = os.environ.get("COVEL_PEER_DUMP")  # a path: every request the peer saw, for debugging
            if dump:
                with open(dump, "w", encoding="utf-8") as f:
                    json.dump([{"tools": r.tool_names, "body": r.body} for r in server.requests], f, ensure_ascii=False, indent=1)


def _failed(result: ActionResult) -> list[str]:
    completed = result.of_type("execution.completed")
    return list((completed[-1]["payload"].get("failedRuntimeIds") or []) if completed else ["<no execution.completed>"])


def _runtime_outcomes(result: ActionResult) -> dict[str, str]:
    out = {}
    for frame in result.frames:
        if frame.get("type") in ("runtime.completed", "runtime.failed"):
            out[frame["payload"].get("runtimeId")] = frame["type"].split(".")[1]
    return out


@pytest.mark.parametrize("world_id", WORLDS)
def test_builtin_game_plays_ten_turns_on_a_real_http_model_with_no_failed_runtime(client, peer, world_id):
    # given a session in a builtin world whose every model slot is the peer
    api = ClientApi(client)
    played: PlayedSession = session_create(api, world_id)
    setup = session_setup(played)
    ran: dict[str, set[str]] = {}
    completed_tools: list[dict[str, Any]] = []
    for result in setup:
        assert _failed(result) == [], _describe(result, peer)
        for runtime_id, outcome in _runtime_outcomes(result).items():
            ran.setdefault(runtime_id, set()).add(outcome)

    # when ten turns are played, busy and quiet ones
    for line in LINES:
        result = expect_committed(played.api.action("submit_actions", played.id, {"actions": [{"kind": "say", "text": line}]}))
        completed_tools += result.of_type("tool.completed")
        # then no runtime failed on any turn
        assert _failed(result) == [], _describe(result, peer)
        for runtime_id, outcome in _runtime_outcomes(result).items():
            ran.setdefault(runtime_id, set()).add(outcome)

    assert peer.errors == []
    assert {rid for rid, outcomes in ran.items() if "failed" in outcomes} == set()
    for runtime_id in ("narrator", "codex", "affinity", "guide", "char-creator/character-tracker", "world-time/advance"):
        assert "completed" in ran.get(runtime_id, set()), sorted(ran)
    # and the busy turns' people reached the character list, the codex and affinity (the peer names
    # one new person per busy turn: CAST[0], CAST[1], ...)
    busy = [line for line in LINES if not any(m in line.lower() for m in QUIET_MARKERS)]
    met = peer.brain.introduced
    assert len(met) == len(busy) + 1, met  # + the opening scene
    characters = played.api.json("GET", f"/api/sessions/{played.id}/characters")
    names = {c["name"]: c for c in characters["items"]}
    assert set(met) <= set(names), sorted(names)
    assert {names[n]["type"] for n in met} == {"npc"}
    # (a person met earlier who reappears is updated by the id from the roster the tracker reads)
    moved = [n for n in met[:-1] if any(str(v).startswith("on the way to") for v in (names[n].get("fields") or {}).values())]
    assert moved, {n: names[n].get("fields") for n in met}
    codex = played.api.json("GET", f"/api/sessions/{played.id}/plugin-data/codex/entries")
    assert set(met) <= {entry["value"]["title"] for entry in _rows(codex)}, codex
    affinity = played.api.json("GET", f"/api/sessions/{played.id}/plugin-data/affinity/affinity")
    assert set(met) <= {entry["value"]["name"] for entry in _rows(affinity)}, affinity
    # and quiet turns ended codex and affinity with runtime-done (after the peer ignored the forced
    # tool choice once and the loop re-prompted)
    for runtime_id in ("codex", "affinity"):
        assert any(f["payload"].get("tool") == "runtime-done" and f["payload"].get("runtimeId") == runtime_id
                   for f in completed_tools), f"{runtime_id} never ended a quiet turn with runtime-done"
    # and the view's closing steps, left without what their opening step says (provider, model,
    # slot, stage, tool), rebuild from that step to the trace route's full event
    steps = played.api.json("GET", f"/api/sessions/{played.id}/view")["executionSteps"]
    events = {e["id"]: e for e in played.api.json("GET", f"/api/traces/{played.id}")["events"]}
    openers = {"llm.responded": "llm.calling", "runtime.completed": "runtime.started", "tool.completed": "tool.calling"}
    rebuilt = 0
    for index, step in enumerate(steps):
        if step["type"] not in openers:
            continue
        diagnostic = events[step["id"]]["diagnostic"]
        for key in ("provider", "model", "slot", "stage", "tool"):
            if diagnostic.get(key) in (None, "") or key in step:
                continue
            opener = next(s for s in reversed(steps[:index]) if s["type"] == openers[step["type"]]
                          and s["turnId"] == step["turnId"] and s["runtimeId"] == step["runtimeId"])
            assert opener[key] == diagnostic[key], (key, step, opener)
            rebuilt += 1
    assert rebuilt and any(s["type"] == "llm.responded" and "model" not in s for s in steps)  # the peer's model, named by its call


def _rows(listing: Any) -> list[dict[str, Any]]:
    if isinstance(listing, dict):
        for key in ("items", "entries", "rows", "data"):
            if isinstance(listing.get(key), list):
                return listing[key]
    return listing if isinstance(listing, list) else []
