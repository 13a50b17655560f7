"""Each builtin plugin's effect in committed state, through real scripted-model turns over HTTP
(POST /api/sessions, POST /api/actions on the in-process worker): session `yanhui-ferry`
(zh-CN: setup, opening continuation, two `say` turns) and `hollow-reach-light` (en-US) for the
clock-driven dimensions."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from plugins_app.models import PluginData
from sessions.models import Character, CharacterSchema, ChatMessage, DimensionValue, Session
from tests.plugins_app.builtin.play_support import get_json, model_calls, play, runtime_status

pytestmark = pytest.mark.django_db(transaction=True)

SAYS = ["我去码头看看那条船。", "我向裴照打听押纲官的下落。"]
HERO = "林照"
WORLD = Path(__file__).resolve().parents[3] / "sessions" / "worlds" / "yanhui-ferry"


@pytest.fixture
def yanhui(client):
    return play(client, "yanhui-ferry", says=SAYS, name=HERO)


def _data(session_id: str, plugin_id: str, namespace: str) -> dict:
    return dict(PluginData.objects.filter(session_id=session_id, plugin_id=plugin_id, namespace=namespace)
                .values_list("key", "value"))


def test_pregame_writes_session_metadata_and_the_welcome(yanhui):
    # the function runtime ran once, without a model, and completed its setup step
    start = yanhui.streams[0]
    assert runtime_status(start, "pregame") == [{**runtime_status(start, "pregame")[0], "status": "success", "preGameDone": True}]
    assert not model_calls(start, "pregame")
    metadata = _data(yanhui.id, "pregame", "session")["metadata"]
    assert metadata and isinstance(metadata, dict)
    parts = [p for f in yanhui.frames("ui.rendered", 0) for p in f["payload"]["block"]["parts"]]
    welcome = next(p for p in parts if p["id"] == "pregame-welcome")
    assert welcome["content"]["title"] == "欢迎来到雁回渡・上元灯谜"
    world_part = next(p for p in parts if p["id"] == "pregame-world")
    assert "盐纲船" in world_part["content"]["text"]  # the world's own summary, not its heading
    session = Session.objects.get(pk=yanhui.id)
    assert session.setup_runtimes["pregame"]["state"] == "done"


def test_char_creator_form_guard_and_tracker_grow_the_cast(yanhui):
    # player-init asked for the form once (model) and its guard created the hero from the answer
    form = yanhui.frames("interaction.requested", 0)[0]["payload"]["interaction"]
    assert form["interactionId"] == "char-creation" and form["fields"][0]["name"] == "characterName"
    answer_stream = yanhui.streams[1]
    assert runtime_status(answer_stream, "char-creator/player-init")[0]["preGameDone"] is True
    assert not model_calls(answer_stream, "char-creator/player-init")
    hero = Character.objects.get(session_id=yanhui.id, type="player")
    assert hero.name == HERO and hero.fields["origin"] == "本镇人"
    # the cast is the world's own plus the hero: the tracker invents nobody ...
    cast = [c["name"] for c in json.loads((WORLD / "characters" / "characters.json").read_text(encoding="utf-8"))]
    names = list(Character.objects.filter(session_id=yanhui.id).order_by("id").values_list("name", flat=True))
    assert sorted(names) == sorted([*cast, HERO])
    # ... and records the talk with the character the player addressed
    pei = Character.objects.get(session_id=yanhui.id, name="裴照")
    assert pei.fields["attitude"].endswith(f"和{HERO}谈过「巡检司」。")
    last = yanhui.frames("character.upserted", 3)
    assert [f["payload"]["character"]["name"] for f in last] == ["裴照"]


def test_narrator_tells_the_turn_with_the_hero_and_the_cast(yanhui):
    turn = ChatMessage.objects.filter(session_id=yanhui.id, role="assistant").order_by("-id").first()
    assert turn.content.startswith(f"{HERO}向裴照打听押纲官的下落。")  # first person told about the hero
    assert "裴照冷硬寡言" in turn.content  # the addressed character answers, in their persona
    assert "巡检司管雁回渡的缉捕与水上治安" in turn.content  # with lore about him, whole sentences
    opening = yanhui.frames("narrative.completed", 1)[0]["payload"]["text"]
    assert opening.startswith("正月十二五更") and f"{HERO}是第一个跳上船的人" in opening


def test_world_init_adopts_the_schema_and_moves_dimensions(yanhui):
    # schema-gen's guard adopted the world's character schema without a model call
    setup = yanhui.streams[0]
    assert runtime_status(setup, "world-init/schema-gen")[0]["preGameDone"] is True
    assert not model_calls(setup, "world-init/schema-gen")
    assert CharacterSchema.objects.get(session_id=yanhui.id).schema["attributes"][0]["id"] == "persona"
    # the tracker read the rules from {{ world.dimensionRules }} and added a lead per story turn
    call = [c for c in yanhui.model_calls(2) if c["runtimeId"] == "world-init/dimension-tracker"][0]
    system = call["messages"][0]["content"]
    assert "## caseFile — 案卷" in system and "rule: 剩余时辰只随世界时钟减少" in system
    case_file = DimensionValue.objects.get(session_id=yanhui.id, dimension_id="caseFile")
    leads = [k for k in case_file.value if k not in ("riddle-lantern", "pebble-chest", "sleeping-crew", "missing-officer")]
    assert len(leads) == 3 and case_file.version == 4  # opening + two turns, one lorebook clue each
    assert case_file.value["patrol-office"] == {**case_file.value["patrol-office"], "lead": "巡检司", "status": "unverified"}
    receipts = _data(yanhui.id, "world-init", "settlements")
    assert len(receipts) == 3 and all(r["status"] == "settled" for r in receipts.values())


def test_codex_guide_and_affinity_record_the_turns(yanhui):
    entries = _data(yanhui.id, "codex", "entries")
    characters = sorted(v["title"] for v in entries.values() if v["category"] == "character")
    assert {"小满", "裴照"} <= set(characters) and set(characters) <= {c.name for c in Character.objects.filter(session_id=yanhui.id)}
    assert "巡检司" in [v["title"] for v in entries.values() if v["category"] == "lore"]
    assert any(p["type"] == "codex.entries" for f in yanhui.frames("ui.rendered", 3) for p in f["payload"]["block"]["parts"])
    guide = _data(yanhui.id, "guide", "guides")["latest"]
    names = {c.name for c in Character.objects.filter(session_id=yanhui.id, type="npc")}
    assert len(guide["prompts"]) == 3 and any(n in guide["prompts"][0]["text"] for n in names)  # names a present character
    scores = {v["name"]: v["score"] for v in _data(yanhui.id, "affinity", "affinity").values()}
    assert scores["裴照"] == 3  # +3 for the character the player addressed
    assert set(scores) <= names and all(v == 1 for n, v in scores.items() if n != "裴照")  # +1 for sharing a scene


def test_world_time_context_and_advance_move_the_clock(yanhui):
    # the contract data world.time-definition@1 reached the plugin; context published the clock
    definition = _data(yanhui.id, "world-time", "definitions")["world"]
    assert definition["definition"]["evolution"]["defaultStep"] == 2
    assert runtime_status(yanhui.streams[2], "world-time/context")[0]["status"] == "success"
    advanced = [f["payload"]["output"] for f in yanhui.frames("tool.completed") if f["payload"]["tool"] == "advance-world-time"]
    assert len(advanced) == 3
    assert advanced[-1]["summary"].endswith("景和7年正月12日 寅时六刻。")  # 3 × defaultStep (ke) from 寅时 (issue 20: the world's own day)


def test_hollow_reach_clock_dimension_counts_down(client):
    played = play(client, "hollow-reach-light", says=["I climb the tower stair."], name="Ada Quill")
    night = DimensionValue.objects.get(session_id=played.id, dimension_id="night")
    assert night.value["minutesToReef"] == 340 - 2 * 10  # opening + one turn, 10 minutes each
    tracker = [f["payload"]["input"] for f in played.frames("tool.calling") if f["payload"]["tool"] == "update-dimensions"]
    assert tracker[-1]["followsClock"] == ["night", "lamp"]
    evidence = DimensionValue.objects.get(session_id=played.id, dimension_id="evidence").value
    assert len(evidence) == 4 + 2  # the opening's clue and the turn's clue
    view = get_json(client, played, f"/api/sessions/{played.id}/view")
    assert view["dimensions"]["night"]["value"]["minutesToReef"] == 320


def test_message_history_rebuilds_every_ui_block(client, yanhui):
    # given the blocks the turns streamed (ui.rendered frames) ...
    streamed = {f["payload"]["messageId"]: f["payload"]["block"] for f in yanhui.frames("ui.rendered")}
    assert streamed
    # when a client reloads the chat from each history route
    full = get_json(client, yanhui, f"/api/sessions/{yanhui.id}/messages")["items"]
    page = get_json(client, yanhui, f"/api/sessions/{yanhui.id}/messages/page?limit=500")["items"]
    view = get_json(client, yanhui, f"/api/sessions/{yanhui.id}/view")["messages"]
    # then every ui message carries its block, exactly as streamed
    for items in (full, page, view):
        blocks = {m["id"]: m.get("block") for m in items if m.get("kind") == "ui"}
        assert {k: v for k, v in blocks.items() if k in streamed} == {k: streamed[k] for k in blocks}, items
    assert {m["id"]: m["block"] for m in full if m.get("kind") == "ui"} == streamed


def test_the_view_lists_model_calls_without_their_prompts(client, yanhui):
    view = get_json(client, yanhui, f"/api/sessions/{yanhui.id}/view")
    calls = [e for e in view["executionSteps"] if e["type"] == "llm.calling"]
    traces = get_json(client, yanhui, f"/api/traces/{yanhui.id}")
    full = {e["id"]: e for e in traces["events"] if e["type"] == "llm.calling"}
    assert calls and all("messages" not in c and "payload" not in c for c in calls)
    for call in calls:
        prompt = full[call["id"]]["payload"]["messages"]  # the trace route keeps the whole prompt
        assert call["messageCount"] == len(prompt) > 0 and len(call["promptDigest"]) == 16
        # the request's start (payload and diagnostic startedAt) is the trace row's own time, even for
        # the post-turn runtimes that call their models in parallel, so the step needs no second stamp
        event = full[call["id"]]
        assert event["payload"]["startedAt"] == event["diagnostic"]["startedAt"]
        assert event["payload"]["startedAt"][:23] == event["timestamp"][:23] == call["timestamp"][:23], event
        assert "startedAt" not in call


def test_view_steps_summarise_the_latest_trace_events_and_the_trace_route_keeps_their_payloads(client, yanhui):
    view = get_json(client, yanhui, f"/api/sessions/{yanhui.id}/view")
    traces = {e["id"]: e for e in get_json(client, yanhui, f"/api/traces/{yanhui.id}")["events"]}
    steps = view["executionSteps"]
    assert steps and [s["id"] for s in steps] == sorted((s["id"] for s in steps), key=int)
    assert {s["type"] for s in steps} >= {"runtime.started", "runtime.completed", "llm.calling", "llm.responded"}
    openers = {"runtime.completed": "runtime.started", "llm.responded": "llm.calling", "tool.completed": "tool.calling"}
    trimmed = set()
    for index, step in enumerate(steps):
        event = traces[step["id"]]
        diagnostic = event["diagnostic"]
        assert (step["type"], step["turnId"], step["timestamp"]) == (event["type"], event["turnId"], event["timestamp"])
        for key in ("runtimeId", "stage", "tool", "durationMs", "provider", "slot", "error", "warning"):
            if diagnostic.get(key) in (None, ""):
                continue
            if key not in step:
                # a closing step leaves out what its opening step (the same turn's and runtime's
                # latest earlier one) already says
                assert key in ("stage", "provider", "slot", "tool") and step["type"] in openers, (key, step)
                opener = next(s for s in reversed(steps[:index]) if s["type"] == openers[step["type"]]
                              and s["turnId"] == step["turnId"] and s["runtimeId"] == step["runtimeId"])
                assert opener[key] == diagnostic[key], (key, step, opener)
                if step["type"] == "tool.completed":  # the very call it answers
                    assert traces[opener["id"]]["payload"]["callId"] == event["payload"]["callId"]
                trimmed.add((step["type"], key))
                continue
            assert step[key] == diagnostic[key], (key, step, diagnostic)
        # pluginId is left out only where the runtimeId names it
        if "pluginId" in diagnostic and "pluginId" not in step:
            assert step["runtimeId"] == diagnostic["pluginId"] or step["runtimeId"].startswith(diagnostic["pluginId"] + "/")
        assert step.get("severity", "info") == diagnostic["severity"]
        assert "payload" not in step and "input" not in step and "output" not in step
    assert {("runtime.completed", "stage"), ("llm.responded", "provider"), ("llm.responded", "slot")} <= trimmed


def test_story_messages_carry_narration_segments(client, yanhui):
    items = get_json(client, yanhui, f"/api/sessions/{yanhui.id}/messages")["items"]
    stories = [m for m in items if m.get("kind") == "story"]
    assert len(stories) >= 3  # the opening and two turns
    for story in stories:
        assert story["segments"] and all(s["kind"] == "narration" and s["text"] for s in story["segments"])
        assert story["content"] == "\n\n".join(s["text"] for s in story["segments"])
    view = get_json(client, yanhui, f"/api/sessions/{yanhui.id}/view")["messages"]
    assert [m["segments"] for m in view if m.get("kind") == "story"] == [m["segments"] for m in stories][-len(
        [m for m in view if m.get("kind") == "story"]):]


def test_a_trace_row_written_before_summaries_is_summarised_from_its_payload(client, yanhui):
    from turns.models import TraceEvent

    before = {s["id"]: s for s in get_json(client, yanhui, f"/api/sessions/{yanhui.id}/view")["executionSteps"]}
    # rows as an older server wrote them: no summary column, the digest (if any) inside the payload
    TraceEvent.objects.filter(session_id=yanhui.id).update(summary=None)
    after = {s["id"]: s for s in get_json(client, yanhui, f"/api/sessions/{yanhui.id}/view")["executionSteps"]}
    assert after == before and any(s["type"] == "llm.calling" for s in after.values())


def test_view_step_timestamps_are_the_trace_routes_to_the_millisecond(client, yanhui):
    from datetime import datetime, timezone

    from turns.models import TraceEvent

    rows = list(TraceEvent.objects.filter(session_id=yanhui.id).order_by("-id")[:3])
    # a whole second (stored without a fraction), a sub-millisecond remainder, and 999.999 ms
    stamps = [datetime(2026, 3, 4, 5, 6, 7, 0, tzinfo=timezone.utc), datetime(2026, 3, 4, 5, 6, 8, 1500, tzinfo=timezone.utc),
              datetime(2026, 3, 4, 5, 6, 9, 999999, tzinfo=timezone.utc)]
    for row, stamp in zip(rows, stamps):
        TraceEvent.objects.filter(pk=row.pk).update(created_at=stamp)
    steps = {s["id"]: s for s in get_json(client, yanhui, f"/api/sessions/{yanhui.id}/view")["executionSteps"]}
    assert [steps[str(r.pk)]["timestamp"] for r in rows] == [
        "2026-03-04T05:06:07.000Z", "2026-03-04T05:06:08.001Z", "2026-03-04T05:06:09.999Z"]
    traced = {e["id"]: e["timestamp"] for e in get_json(client, yanhui, f"/api/traces/{yanhui.id}")["events"]}
    assert {i: s["timestamp"] for i, s in steps.items()} == {i: traced[i] for i in steps}


def test_the_action_stream_names_each_prompt_and_the_trace_keeps_it_once(client, yanhui):
    from turns.engine.trace import prompt_digest
    from turns.models import ExecutionFrame

    streamed = [f["payload"] for s in yanhui.streams for f in s if f["type"] == "llm.calling"]
    kept = yanhui.model_calls()
    # the stream's llm.calling frames carry the call without its prompt, named by count and digest
    assert streamed and all("messages" not in c for c in streamed)
    assert [(c["runtimeId"], c["messageCount"], c["promptDigest"]) for c in streamed] == [
        (c["runtimeId"], len(c["messages"]), prompt_digest(c["messages"])) for c in kept]
    # and the replay rows of the stream do not keep a second copy
    assert not [f for f in ExecutionFrame.objects.filter(execution__session_id=yanhui.id, type="llm.calling")
                if "messages" in (f.payload or {})]
