"""POST /api/ai/revise-world over SSE with the offline scripted model (issue 21; spec 004 哪些世界可以
修改, 结果写到哪里): a generated package is replaced whole with the merged result (the other
characters kept), a server-store world's row is updated, a browser world is only returned; hand
edits and non-generated worlds are 409s before the stream."""
from __future__ import annotations

import json

import pytest

from sessions import world_packages as wp
from sessions.models import World
from tests.jobs.test_worldgen import BRIEF_ALL, CONCEPT_EN, _generate, _private_home, llm_path  # noqa: F401
from tests.turns.test_actions_helpers import sse_frames, stream_bytes

pytestmark = pytest.mark.django_db(transaction=True)
INSTRUCTION = "Add a rival who wants the same treasure as the player"


def _revise(client, body):
    response = client.post("/api/ai/revise-world", data=json.dumps(body), content_type="application/json")
    if response.status_code != 200:
        return response, []
    return response, sse_frames(stream_bytes(response))


def _generated(client, save_target="server-file", concept=CONCEPT_EN):
    _response, frames = _generate(client, {"concept": concept, "locale": "en-US", "saveTarget": save_target, "brief": BRIEF_ALL})
    assert frames[-1]["type"] == "done", frames[-1]
    return frames[-1]["world"]


def test_revise_a_generated_package_keeps_what_it_does_not_change(client, llm_path, settings):
    world = _generated(client)
    root = wp.user_worlds_dir(settings.COVEL_HOME) / world["id"]
    response, frames = _revise(client, {"worldId": world["id"], "instruction": INSTRUCTION})
    assert response.status_code == 200
    assert [p["id"] for p in frames[-2 if frames[-1]["type"] == "done" else -1].get("parts", [{"id": "revision"}])] == ["revision"]
    done = frames[-1]
    assert done["type"] == "done", done
    package = wp.world_package_load(root, source=wp.SOURCE_USER, expected_id=world["id"])
    assert package.ok and package.id == world["id"]
    ids = [c["id"] for c in package.characters]
    assert ids[:3] == ["player-traveler", "npc-keeper", "npc-merchant"] and len(ids) == 4
    assert INSTRUCTION in package.characters[-1]["description"] and INSTRUCTION in package.summary
    assert {e["id"] for e in package.lorebook} >= {"the-gate", "rule-curfew"}
    assert not list(root.parent.glob(".covel-*"))
    # a second revision works on the revised package (its marker lists the new files)
    again, frames = _revise(client, {"worldId": world["id"], "instruction": "Add a second rival"})
    assert frames[-1]["type"] == "done", frames[-1]
    # a hand-added file blocks the revision, the package stays as it is
    (root / "data" / "notes.yaml").write_text("x: 1\n", encoding="utf-8")
    (root / "WORLD.md").write_text("# Edited by hand\n", encoding="utf-8")
    blocked, _ = _revise(client, {"worldId": world["id"], "instruction": INSTRUCTION})
    assert blocked.status_code == 409 and blocked.json()["code"] == "world_package_modified"
    assert blocked.json()["details"] == {"added": ["data/notes.yaml"], "changed": ["WORLD.md"]}


def test_revise_store_and_browser_worlds(client, llm_path):
    stored = _generated(client, "server-store")
    _response, frames = _revise(client, {"worldId": stored["id"], "instruction": INSTRUCTION})
    assert frames[-1]["type"] == "done", frames[-1]
    row = World.objects.get(pk=stored["id"])
    assert len(row.metadata["embeddedCharacters"]) == 4 and row.metadata["source"] == "store"
    browser = _generated(client, "return-only", concept="A lantern market that only opens in fog")
    _response, frames = _revise(client, {"worldId": browser["id"], "instruction": INSTRUCTION, "world": browser})
    done = frames[-1]
    assert done["type"] == "done", done
    assert len(done["world"]["metadata"]["embeddedCharacters"]) == 4
    assert not World.objects.filter(pk=browser["id"]).exists()


def test_revise_errors_before_the_stream(client, llm_path):
    assert _revise(client, {"instruction": "x"})[0].status_code == 400
    assert _revise(client, {"worldId": "a", "instruction": "x" * 2001})[0].status_code == 400
    assert _revise(client, {"worldId": "none-such", "instruction": "x"})[0].json()["code"] == "world_not_found"
    client.post("/api/worlds", {"id": "handmade", "name": "Handmade"}, content_type="application/json")
    refused = _revise(client, {"worldId": "handmade", "instruction": "x"})[0]
    assert refused.status_code == 409 and refused.json()["code"] == "world_not_revisable"
    builtin = next(w["id"] for w in client.get("/api/worlds").json()["items"] if w["metadata"]["source"] == "file")
    assert _revise(client, {"worldId": builtin, "instruction": "x"})[0].json()["code"] == "world_not_revisable"
