"""The builtin `history-compaction` plugin over HTTP with the offline scripted model (issue 22;
spec 000 §memory-search recall "历史摘要"; spec 004 context.compaction.failed): past its budget the
older turns are summarized by a detached settle job, story prompts then lead with the rolling
summary instead of those turns, the segments are recall results with role `summary`, and a
failing model call leaves a `context.compaction.failed` trace row and writes nothing. Runs on
SQLite and on PostgreSQL (both halves of ``make test``)."""
from __future__ import annotations

import json

import pytest

from tests.plugins_app.test_memory_plugin import _narrator_system_prompts, _rows, _say, _session, _settled
from tests.turns.test_real_model_game import ClientApi

pytestmark = pytest.mark.django_db(transaction=True)

SETTINGS = {"history-compaction": {"protectTurns": 2, "budgetChars": 2000}}
LINES = ("I walk down to the harbour and greet whoever is there.", "I ask about the old lamp and where it came from.",
         "I follow the path uphill toward the lights.", "I knock on the nearest door and introduce myself.",
         "I cross the square to the far side.")


def _recall(session_id: str, query: str) -> list[dict]:
    """memory-search (scope recall) through the real executor over the session's committed state,
    read the way a runtime reads it (turns.engine.state.EngineStateView)."""
    from sessions.models import Session
    from turns.engine.providers.config import ModelConfig, ModelRouter
    from turns.engine.snapshot import session_snapshot_load
    from turns.engine.state import EngineStateView, StagedProposals
    from turns.engine.tools import ToolCall, ToolContext, ToolExecutor, default_registry

    snapshot = session_snapshot_load(Session.objects.get(id=session_id))
    registry = default_registry()
    ctx = ToolContext(session_id=session_id, plugin_id="narrator", runtime_id="narrator", model_router=ModelRouter(ModelConfig()),
                      state=EngineStateView(snapshot, upstream=[], own=StagedProposals()),
                      authorized_tool_names=frozenset(registry.builtin_names()))
    call = ToolCall("call-1", "memory-search", json.dumps({"query": query, "scope": "recall", "limit": 5}))
    return ToolExecutor(registry).execute_batch([call], ctx)[0].content["results"]


def _narrator_messages(session_id: str, turn_id: str) -> list[dict]:
    from turns.models import TraceEvent

    row = TraceEvent.objects.filter(session_id=session_id, turn_id=turn_id, type="llm.calling", runtime_id="narrator").first()
    return row.payload["messages"]


def test_old_turns_are_replaced_by_the_rolling_summary_and_segments_are_recall_summaries(client):
    # given a builtin game with history-compaction on a small budget (2 protected turns, 2,000 characters)
    played = _session(client, ("history-compaction",))
    api = ClientApi(client, played.token, headers={"X-Plugin-User-Settings": json.dumps(SETTINGS)})

    # when five turns are played
    turn_ids = []
    for line in LINES:
        result = api.action("submit_actions", played.id, {"actions": [{"kind": "say", "text": line}]})
        turn_ids.append(result.of_type("execution.completed")[0]["payload"]["turnId"])
    _settled(played.id)

    # then the history past the budget was compacted into a rolling summary through an older turn
    rolling = _rows(played.api.json("GET", f"/api/sessions/{played.id}/plugin-data/history-compaction/rolling"))["current"]
    segments = _rows(played.api.json("GET", f"/api/sessions/{played.id}/plugin-data/history-compaction/summaries"))
    assert rolling["throughTurnId"] in turn_ids[:-2] and rolling["turnCount"] >= 2
    assert "The player: I walk down to the harbour and greet whoever is there." in rolling["text"]
    assert segments and all(s["throughTurnId"] and s["text"] for s in segments.values())

    # and the next story prompt leads with the summary and no longer holds the compacted turns
    last = api.action("submit_actions", played.id, {"actions": [{"kind": "say", "text": "I wait for the tide to turn."}]})
    messages = _narrator_messages(played.id, last.of_type("execution.completed")[0]["payload"]["turnId"])
    rolling = _rows(played.api.json("GET", f"/api/sessions/{played.id}/plugin-data/history-compaction/rolling"))["current"]
    assert messages[1]["role"] == "system" and messages[1]["content"].startswith("[EARLIER STORY — SUMMARY]\n")
    history = [m["content"] for m in messages[2:-1]]
    assert LINES[0] not in history and LINES[-1] in history

    # and memory-search finds the segments as recall results with role summary
    results = _recall(played.id, "harbour greet")
    assert results and results[0]["role"] == "summary" and "harbour" in results[0]["text"], results


def test_a_failing_compaction_call_leaves_a_trace_row_and_writes_nothing(client, tmp_path, settings):
    # given a game whose plugin slot answers HTTP 500 (story stays on the offline model)
    from tests.model_peer import ModelPeer

    played = _session(client, ("history-compaction",))
    with ModelPeer() as peer:
        peer.faults = [{"status": 500, "when_tool": "submit-history-summary"} for _ in range(20)]
        path = tmp_path / "llm.toml"
        path.write_text("\n".join([
            "[covel.story]", 'provider = "scripted"', 'model = "scripted"', "",
            "[covel.plugin]", 'provider = "my-lab"', 'protocol = "openai-chat-v1"', 'model = "peer-large"',
            f'baseUrl = "{peer.base_url}"', ""]), encoding="utf-8")
        settings.COVEL_LLM_TOML = str(path)
        settings.COVEL_OUTBOUND_ALLOW = ("127.0.0.1",)
        api = ClientApi(client, played.token, headers={"X-Plugin-User-Settings": json.dumps(SETTINGS)})
        for line in LINES[:3]:
            api.action("submit_actions", played.id, {"actions": [{"kind": "say", "text": line}]})
        _settled(played.id)

    # then each over-budget attempt left context.compaction.failed, and nothing was written
    from turns.models import TraceEvent

    failed = list(TraceEvent.objects.filter(session_id=played.id, type="context.compaction.failed"))
    assert failed and all(r.payload["reason"].startswith("model call failed:") for r in failed)
    assert all(r.payload["pluginId"] == "history-compaction" for r in failed)
    assert _rows(played.api.json("GET", f"/api/sessions/{played.id}/plugin-data/history-compaction/rolling")) == {}
