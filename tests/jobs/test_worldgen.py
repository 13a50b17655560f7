"""POST /api/ai/generate-world over HTTP (spec 004 AI 生成): the SSE frames, the three save targets,
validation retries, idle timeouts and the 400s; the worldgen.generate_world task called directly."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from django.conf import settings as django_settings

from covel.inprocess import wait_idle
from jobs.models import WorldGeneration
from sessions import world_packages as wp
from sessions.models import World
from tests.jobs.fake_openai import FakeOpenAI
from tests.turns.test_actions_helpers import sse_frames, stream_bytes

pytestmark = pytest.mark.django_db(transaction=True)

OPERATOR = "operator-token-123"
CONCEPT_EN = "A drowned archive city where librarians ration daylight"
BRIEF_ALL = {"content": ["characters", "lorebook", "rules"]}

MANIFEST_YAML = """\
id: glass-harbor
name: Glass Harbor
summary: A harbor of glass boats.
tags: [sea]
dimensions:
  mood:
    name: Mood
    schema: {type: integer, minimum: 0, maximum: 5}
    initialValue: 1
  broken:
    name: Broken
    schema: {type: integer, minimum: 0, maximum: 5}
    initialValue: 9
"""
LORE_MD = "# Glass Harbor\n\nBoats of glass.\n\n1. A crack.\n2. A storm.\n3. A theft.\n"


@pytest.fixture
def llm_path(settings, tmp_path):
    path = tmp_path / "llm.toml"
    settings.COVEL_LLM_TOML = str(path)
    return path


@pytest.fixture(autouse=True)
def _private_home(settings, tmp_path):
    """Generated packages land in COVEL_HOME/worlds: a home per test keeps ids from colliding."""
    settings.COVEL_HOME = tmp_path / "home"
    yield
    wait_idle(30)


def _generate(client, body, **headers):
    response = client.post("/api/ai/generate-world", data=json.dumps(body), content_type="application/json", **headers)
    if response.status_code != 200:
        return response, []
    return response, sse_frames(stream_bytes(response))


def _openai_llm(llm_path, fake):
    llm_path.write_text(f'[covel.story]\nprovider = "openai"\nmodel = "m-world"\nbaseUrl = "{fake.base_url}"\n', encoding="utf-8")


def test_return_only_streams_progress_then_done(client, llm_path):
    response, frames = _generate(client, {"concept": CONCEPT_EN, "locale": "en-US", "saveTarget": "return-only", "brief": BRIEF_ALL})

    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/event-stream")
    assert frames[0] == {"type": "progress", "phase": "generating"}
    assert [p["id"] for p in frames[1]["parts"]] == ["manifest", "lore", "characters", "lorebook", "rules"]
    assert all(p["state"] == "pending" for p in frames[1]["parts"])
    phases = [f.get("phase") for f in frames if f["type"] == "progress"]
    assert phases.index("validating") < phases.index("saving")
    last_parts = [f for f in frames if f.get("parts")][-1]["parts"]
    assert all(p["state"] == "done" and p["attempt"] == 1 and p["chars"] > 0 for p in last_parts)
    done = frames[-1]
    assert done["type"] == "done"
    assert "warnings" not in done
    assert done["usage"]["requests"] == 5
    world = done["world"]
    assert world["id"].startswith("a-drowned-archive-city-")
    assert world["locale"] == "en-US"
    assert world["metadata"]["generated"] is True
    assert "worldData" not in world["metadata"]
    assert [c["id"] for c in world["metadata"]["embeddedCharacters"]] == ["player-traveler", "npc-keeper", "npc-merchant"]
    assert {e["id"] for e in world["metadata"]["embeddedLorebook"]} >= {"the-gate", "rule-curfew"}
    assert set(world["metadata"]["dimensions"]) == {"tension"}
    assert "1. " in world["lore"]
    assert World.objects.count() == 0
    assert not (wp.user_worlds_dir(django_settings.COVEL_HOME) / world["id"]).exists()
    generation = WorldGeneration.objects.get()
    assert generation.status == "done" and generation.world_id == world["id"]


def test_server_store_saves_world_row(client, llm_path, settings):
    _response, frames = _generate(client, {"concept": "冰封大陆上的最后一座灯塔", "saveTarget": "server-store", "brief": BRIEF_ALL})

    done = frames[-1]
    assert done["type"] == "done"
    world_id = done["world"]["id"]
    row = World.objects.get(pk=world_id)
    assert row.metadata["source"] == "store"
    assert row.metadata["storage"] == {"scope": "server", "backend": settings.STORE_BACKEND, "durable": True}
    assert row.metadata["generated"] is True
    assert row.metadata["defaultLocale"] == "zh-CN"
    assert "worldData" not in row.metadata
    assert len(row.metadata["embeddedCharacters"]) == 3
    assert done["world"]["metadata"]["storage"]["backend"] == settings.STORE_BACKEND
    fetched = client.get(f"/api/worlds/{world_id}")
    assert fetched.status_code == 200
    assert fetched.json()["metadata"]["source"] == "store"
    from sessions.catalog import world_resolve

    resolved = world_resolve(world_id)
    assert [c["name"] for c in resolved.content("zh-CN")["characters"]][0] == "旅人"


def test_server_file_is_default_and_writes_package(client, llm_path, settings):
    _response, frames = _generate(client, {"concept": CONCEPT_EN, "locale": "en-US", "brief": {"content": ["characters"], "pack": "low-cost"}})

    done = frames[-1]
    assert done["type"] == "done", frames[-1]
    world_id = done["world"]["id"]
    root = wp.user_worlds_dir(settings.COVEL_HOME) / world_id
    package = wp.world_package_load(root, source=wp.SOURCE_USER, expected_id=world_id)
    assert package.ok
    assert package.plugin_policy.preset == "low-cost"
    assert [c["id"] for c in package.characters] == ["player-traveler", "npc-keeper", "npc-merchant"]
    marker = json.loads((root / ".covel-generated.json").read_text(encoding="utf-8"))
    for rel, digest in marker["files"].items():
        assert digest == "sha256:" + hashlib.sha256((root / rel).read_bytes()).hexdigest()
    assert set(marker["files"]) == {"world.yaml", "WORLD.md", "data/dimensions.yaml", "characters/characters.json"}
    assert done["world"]["metadata"]["storage"] == {"scope": "server", "backend": "file", "durable": True}
    assert client.get(f"/api/worlds/{world_id}").status_code == 200
    assert not [p for p in root.parent.iterdir() if p.name.startswith(".covel-staging-")]


def test_second_generation_with_same_id_fails_and_keeps_first(client, llm_path):
    body = {"concept": CONCEPT_EN, "locale": "en-US", "saveTarget": "server-store"}
    _generate(client, body)

    _response, frames = _generate(client, body)

    assert frames[-1]["type"] == "error"
    assert "world already exists" in frames[-1]["message"]
    assert World.objects.count() == 1


def test_invalid_part_is_requested_again_and_bad_dimension_dropped(client, llm_path):
    with FakeOpenAI() as fake:
        _openai_llm(llm_path, fake)
        fake.replies = [{"text": "id: Not Valid\nname: x"}, {"text": MANIFEST_YAML}, {"text": "no numbered entries"},
                        {"text": LORE_MD}]

        _response, frames = _generate(client, {"concept": "glass", "locale": "en-US", "saveTarget": "return-only"})

    done = frames[-1]
    assert done["type"] == "done", done
    assert done["world"]["id"] == "glass-harbor"
    assert set(done["world"]["metadata"]["dimensions"]) == {"mood"}
    assert len(done["warnings"]) == 1 and done["warnings"][0].startswith('dropped dimension "broken"')
    assert done["usage"] == {"inputTokens": 44, "outputTokens": 28, "requests": 4}
    attempts = [(p["id"], p["attempt"]) for f in frames if f.get("parts") for p in f["parts"] if p["state"] == "active"]
    assert ("manifest", 2) in attempts and ("lore", 2) in attempts
    assert fake.requests[1][3]["model"] == "m-world"
    assert "previous answer was rejected" in fake.requests[1][3]["messages"][-1]["content"]


def test_manifest_failing_three_times_ends_with_error(client, llm_path):
    with FakeOpenAI() as fake:
        _openai_llm(llm_path, fake)
        fake.replies = [{"text": "just prose"}]

        _response, frames = _generate(client, {"concept": "glass", "saveTarget": "return-only"})

    assert frames[-1]["type"] == "error"
    assert "manifest" in frames[-1]["message"]
    assert frames[-1]["usage"]["requests"] == 3
    assert len(fake.requests) == 3


def test_optional_part_failure_gives_world_with_warning(client, llm_path):
    with FakeOpenAI() as fake:
        _openai_llm(llm_path, fake)
        fake.replies = [{"text": MANIFEST_YAML}, {"text": LORE_MD}, {"text": "- id: a\n  type: player\n- id: b\n  type: player"}]

        _response, frames = _generate(client, {"concept": "glass", "saveTarget": "server-store",
                                                "brief": {"content": ["characters"]}})

    done = frames[-1]
    assert done["type"] == "done"
    assert any(w.startswith("characters could not be generated:") for w in done["warnings"])
    assert World.objects.get(pk="glass-harbor").metadata["embeddedCharacters"] == []


def test_idle_timeout_on_required_part(client, llm_path):
    with FakeOpenAI() as fake:
        _openai_llm(llm_path, fake)
        fake.replies = [{"stall_seconds": 3}]

        _response, frames = _generate(client, {"concept": "glass", "saveTarget": "return-only", "idleTimeoutMs": 1000})

    assert frames[-1]["type"] == "error"
    assert frames[-1]["code"] == "model_idle_timeout"
    assert len(fake.requests) == 1  # an idle timeout is never retried


def test_idle_timeout_on_optional_part_skips_later_parts(client, llm_path):
    with FakeOpenAI() as fake:
        _openai_llm(llm_path, fake)
        fake.replies = [{"text": MANIFEST_YAML}, {"text": LORE_MD}, {"stall_seconds": 3}]

        _response, frames = _generate(client, {"concept": "glass", "saveTarget": "return-only", "idleTimeoutMs": 1000,
                                                "brief": {"content": ["characters", "lorebook"]}})

    done = frames[-1]
    assert done["type"] == "done"
    assert done["warnings"][1:] == ["characters could not be generated: the model stopped answering",
                                    "lorebook was not requested: the model stopped answering"]
    assert len(fake.requests) == 3


@pytest.mark.parametrize("body,message", [
    ({}, "concept (string) is required"),
    ({"concept": ""}, "concept (string) is required"),
    ({"concept": "x" * 4001}, "concept must be at most 4000 characters"),
    ({"concept": "x", "saveTarget": "disk"}, 'saveTarget must be "server-file", "server-store", or "return-only"'),
    ({"concept": "x", "idleTimeoutMs": 999}, "idleTimeoutMs must be an integer from 1000 to 1800000"),
    ({"concept": "x", "idleTimeoutMs": 1800001}, "idleTimeoutMs must be an integer from 1000 to 1800000"),
    ({"concept": "x", "idleTimeoutMs": 1500.5}, "idleTimeoutMs must be an integer from 1000 to 1800000"),
    ({"concept": "x", "brief": {"pack": "nope"}}, "brief.pack is not a known pack: nope"),
    ({"concept": "x", "brief": {"content": ["maps"]}}, None),
    ({"concept": "x", "brief": {"contracts": ["memory.blocks@1"]}}, None),
    ({"concept": "x", "brief": {"additionalInstructions": "y" * 2001}}, None),
    ({"concept": "x", "locale": "not a locale"}, None),
])
def test_invalid_body_is_400_before_stream(client, llm_path, body, message):
    response, _frames = _generate(client, body)

    assert response.status_code == 400
    assert response["Content-Type"].startswith("application/json")
    if message:
        assert response.json()["error"] == message
    assert WorldGeneration.objects.count() == 0


def test_hosted_tier_requires_operator(client, llm_path, settings):
    settings.DEPLOYMENT_TIER = "commercial"
    settings.COVEL_OPERATOR_TOKEN = OPERATOR

    public, _ = _generate(client, {"concept": CONCEPT_EN, "saveTarget": "return-only"})
    operator, frames = _generate(client, {"concept": CONCEPT_EN, "saveTarget": "return-only"}, HTTP_AUTHORIZATION=f"Bearer {OPERATOR}")

    assert public.status_code == 401 and public.json()["code"] == "operator_token_required"
    assert operator.status_code == 200 and frames[-1]["type"] == "done"
