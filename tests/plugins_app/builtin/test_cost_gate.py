"""cost-gate: the session's token counter (PostRuntime usage) trims the turn to the story and
function runtimes past the soft cap and skips every runtime, with the reason on the stream, past
the hard cap — caps from X-Plugin-User-Settings, the environment, or the defaults."""
from __future__ import annotations

import base64
import json
import uuid
from pathlib import Path

import pytest

from plugins_app.toolkit import module_load_by_path
from tests.plugins_app.builtin.catalogue_support import play_with
from tests.turns.test_actions_helpers import stream_read

BUILTIN = Path(__file__).resolve().parents[3] / "plugins_app" / "builtin"
PLUGINS = ["pregame", "world-init", "char-creator", "narrator", "cost-gate"]


def settings_header(soft: int, hard: int) -> dict[str, str]:
    raw = json.dumps({"cost-gate": {"softTokens": soft, "hardTokens": hard}})
    return {"HTTP_X_PLUGIN_USER_SETTINGS": base64.b64encode(raw.encode()).decode()}


def turn(client, played, text: str, headers: dict[str, str]) -> list[dict]:
    body = {"requestId": f"req-{uuid.uuid4().hex[:12]}", "type": "submit_actions", "sessionId": played.id,
            "payload": {"actions": [{"kind": "say", "text": text}]}}
    response = client.post("/api/actions", data=json.dumps(body), content_type="application/json",
                           HTTP_AUTHORIZATION=f"Bearer {played.token}", **headers)
    assert response.status_code == 200, response.content
    return stream_read(response)


def ran(frames: list[dict]) -> dict[str, str]:
    return {f["payload"]["runtimeId"]: f["payload"]["status"] for f in frames if f["type"] == "runtime.completed"}


def test_caps_fall_back_from_settings_to_environment_to_defaults(monkeypatch):
    entry = module_load_by_path(BUILTIN / "cost-gate", "cost-gate", "server/entry.py")
    monkeypatch.delenv("COST_GATE_SOFT_TOKENS", raising=False)
    monkeypatch.delenv("COST_GATE_HARD_TOKENS", raising=False)
    assert entry.caps({}) == (400_000, 600_000)
    monkeypatch.setenv("COST_GATE_SOFT_TOKENS", "5000")
    assert entry.caps({"hardTokens": 9000}) == (5000, 9000)
    assert entry.caps({"softTokens": 2000, "hardTokens": "lots"}) == (2000, 600_000)


@pytest.mark.django_db(transaction=True)
def test_soft_cap_trims_and_hard_cap_stops(client):
    played = play_with(client, "hollow-reach-light", PLUGINS, says=[], name="Ada Quill")  # setup + opening: spent > 1000
    # under the caps: the whole turn runs
    frames = turn(client, played, "I climb the tower stair.", settings_header(9_000_000, 10_000_000))
    assert {"narrator", "char-creator/character-tracker", "world-init/dimension-tracker"} <= set(ran(frames))
    # past the soft cap: story and function runtimes only
    frames = turn(client, played, "I ask Wenna Pascoe about the lamp.", settings_header(1000, 10_000_000))
    statuses = ran(frames)
    assert statuses["narrator"] == "success" and "char-creator/character-tracker" not in statuses
    assert "world-init/dimension-tracker" not in statuses
    assert [f for f in frames if f["type"] == "narrative.completed"]
    # past the hard cap: nothing runs, and the reason reaches the client
    frames = turn(client, played, "I wait.", settings_header(1000, 2000))
    aborted = [f["payload"] for f in frames if f["type"] == "hook.aborted"]
    assert aborted and all(a["pluginId"] == "cost-gate" and a["reason"].startswith("cost-gate: hard cap reached") for a in aborted)
    assert set(ran(frames).values()) <= {"skipped"} and "narrator" in ran(frames)
    assert not [f for f in frames if f["type"] == "narrative.completed" and f["payload"].get("text")]
    [done] = [f for f in frames if f["type"] == "execution.completed"]
    assert done["payload"].get("error") is None, done
