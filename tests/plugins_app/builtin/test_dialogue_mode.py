"""The dialogue-mode pack end to end: GET /api/worlds/:id/plugin-plan selects it for haruka-academy
(preset dialogue-mode), a session created with the world's defaults resolves it — chat-mode-narrator
replaces the core narrator, every required contract has a provider, nothing unmet — and a 10-turn
scripted game runs with 0 failed runtimes while the cast, the stage, the quick replies and the reply
variants follow the conversation."""
from __future__ import annotations

import json

import pytest

from tests.plugins_app.builtin.catalogue_support import (
    failed_runtimes,
    play_with,
    plugin_data,
)
from tests.plugins_app.builtin.play_support import get_json
from tests.plugins_app.builtin.rpc_support import session_jobs_finished, upstream_world

PACK = ["pregame", "world-init", "char-creator", "chat-mode-narrator", "scene-cast", "scene-stage", "scene-prompts",
        "character-blueprint", "character-presence", "living-world-rules", "branch-reply"]
SAYS = [
    "神代澪，你觉得我该加入哪个社团？",
    "我跟着神代澪去社团楼看看。",
    "朝仓凛，学园祭倒计时到底是怎么回事？",
    "我问椎名夏帆轻音部还缺不缺人。",
    "白石悠真，学生会最近在忙什么？",
    "我去图书馆找找旧校刊。",
    "三枝遥，你为什么总是一个人待在这里？",
    "我答应神代澪，明天放学后一起排练。",
    "小野寺千寻，值日表上为什么写着我的名字？",
    "我在海堤边坐一会儿，听听大家怎么说。",
]


@pytest.mark.django_db(transaction=True)
def test_plugin_plan_and_creation_resolve_the_pack(client):
    with upstream_world("haruka-academy"):
        plan = client.get("/api/worlds/haruka-academy/plugin-plan").json()
        assert plan["selectedPackId"] == "dialogue-mode" and plan["defaultPluginIds"] == PACK, plan
        assert not [m for m in plan["missing"] if m.get("packId") == "dialogue-mode"], plan["missing"]
        created = client.post("/api/sessions", data=json.dumps({"worldId": "haruka-academy"}), content_type="application/json")
        assert created.status_code == 201, created.content
        body = created.json()
        assert set(PACK) <= set(body["activePlugins"]) and "narrator" not in body["activePlugins"]
        assert not body.get("unmetRequirements"), body.get("unmetRequirements")
        # two engines asked for at once conflict on narrative-engine@1
        both = client.post("/api/sessions", data=json.dumps({"worldId": "haruka-academy", "plugins": [*PACK, "narrator"]}),
                           content_type="application/json")
        assert both.status_code == 400 and both.json()["code"] == "plugin_rejected", both.content


@pytest.mark.django_db(transaction=True)
def test_ten_dialogue_turns(client):
    with upstream_world("haruka-academy"):
        played = play_with(client, "haruka-academy", None, says=SAYS, name="林照")
        assert "chat-mode-narrator" in played.created["activePlugins"] and not played.created.get("unmetRequirements")
        assert failed_runtimes(played) == []
        prose = [f["payload"]["text"] for f in played.frames("narrative.completed")]
        assert len(prose) == 11 and all(p.strip() for p in prose)  # the opening and ten turns
        session_jobs_finished(played.id)
        # every reply was staged: one speaker (or narration) per paragraph
        dialogue = plugin_data(played.id, "scene-stage", "dialogue")
        for n, text in enumerate(prose[1:], start=1):
            record = dialogue[f"turn-{n}"]
            assert len(record["paragraphSpeakers"]) == len([p for p in text.split("\n\n") if p.strip()]), (n, text)
        # the addressed character leads the cast and is named in the answer
        for n, (said, text) in enumerate(zip(SAYS, prose[1:]), start=1):
            if "，" in said[:6]:
                name = said.split("，")[0]
                assert name in text, (n, text)
        cast = plugin_data(played.id, "scene-cast", "active-cast")["current"]["speakers"]
        assert cast and cast[0]["reason"] in ("addressed", "continuing", "present")
        # quick replies and reply variants every turn
        assert len(plugin_data(played.id, "scene-prompts", "scenes")) >= 11
        assert {f"turn-{n}" for n in range(1, 11)} <= set(plugin_data(played.id, "branch-reply", "turns"))
        slots = get_json(client, played, f"/api/sessions/{played.id}/ui-slots?slot=stage.choices@1")["items"]
        assert slots[0]["value"]["prompts"]


@pytest.mark.django_db(transaction=True)
def test_the_pack_plays_on_a_real_http_model(client, tmp_path, settings):
    """Every slot on tests/model_peer.py (split index-less tool calls, an ignored tool_choice): the
    dialogue-mode plugins in a builtin world, setup with the opening and a quiet turn, no failed runtime."""
    from tests.e2e.play import PlayedSession, expect_committed, session_setup
    from tests.model_peer import ModelPeer, Quirks
    from tests.turns.test_real_model_game import ClientApi, _failed, llm_toml

    def failures(result):
        return [(f["type"], f["payload"]) for f in result.frames if f["type"] in ("runtime.failed", "tool.failed")]

    with ModelPeer(quirks=Quirks(indexless=True, ignore_tool_choice=True)) as peer:
        settings.COVEL_LLM_TOML = llm_toml(tmp_path, peer)
        settings.COVEL_OUTBOUND_ALLOW = ("127.0.0.1",)
        api = ClientApi(client)
        created = api.json("POST", "/api/sessions", {"worldId": "hollow-reach-light", "plugins": PACK}, expect=201)
        played = PlayedSession(id=created["id"], token=created["ownerToken"], api=api.with_token(created["ownerToken"]),
                               created=created)
        for result in session_setup(played):
            assert _failed(result) == [], failures(result)
        ran: set[str] = set()
        for line in ("I wait by the door and listen.",):  # a quiet turn after the (busy) opening
            result = expect_committed(played.api.action("submit_actions", played.id, {"actions": [{"kind": "say", "text": line}]}))
            assert _failed(result) == [], failures(result)
            ran |= {f["payload"]["runtimeId"] for f in result.of_type("runtime.completed") if f["payload"]["status"] == "success"}
        assert {"chat-mode-narrator", "scene-stage/cast", "scene-cast", "scene-prompts", "branch-reply"} <= ran, sorted(ran)
        assert peer.errors == []
