"""The semantic memory index through HTTP (issue 22; spec 004 §GET /api/sessions/:id/memory-index,
§rebuild, §向量配置): the offline model locks a session on first recall and recalls a turn-3 fact
at turn 60 by meaning; an OpenAI-compatible ``/embeddings`` endpoint (tests.model_peer, real HTTP on
loopback) for the ``memory`` slot; model switch → stale + keyword-only; rebuild → fresh lock and a
background re-index with progress; 502 embedding_unavailable leaves the index; VECTOR_BACKEND=none.
Runs on SQLite and on PostgreSQL (both halves of ``make test``)."""
from __future__ import annotations

import time

import pytest

from tests.model_peer import ModelPeer
from tests.sessions.support import catalog, session_create  # noqa: F401
from turns.engine.providers.config import ModelConfig, ModelRouter, model_config_parse
from turns.engine.snapshot import session_snapshot_load
from turns.engine.tools import InMemoryStateView, ToolCall, ToolContext, ToolExecutor, default_registry
from turns.models import MemoryIndex, MemoryVector

pytestmark = pytest.mark.django_db(transaction=True)

FACT = "Orin the blacksmith buried the silver key beneath the old oak tree by the river."
#: None of the fact's words (nor any filler's): found only by meaning.
QUERY = "hidden metal lock opener location"
FILLER = ("I walk along the harbour and greet the fishermen.", "The tavern is loud tonight; a bard sings of kings.",
          "We haggle with a merchant over bolts of cloth.", "Rain drums on the roof while I write letters home.",
          "A cart loses a wheel on the hill road; we help push.", "The baker offers warm bread and news of a wedding.")


def _say_60_turns(client, session: dict) -> None:
    messages = []
    for turn in range(1, 61):
        player = FACT if turn == 3 else FILLER[turn % len(FILLER)]
        messages += [{"id": f"m{turn}-u", "role": "user", "content": f"{player}"},
                     {"id": f"m{turn}-a", "role": "assistant", "content": f"The day goes on. {FILLER[(turn + 3) % len(FILLER)]}"}]
    response = client.post(f"/api/sessions/{session['id']}/messages/sync", {"messages": messages},
                           content_type="application/json", HTTP_X_SESSION_TOKEN=session["ownerToken"])
    assert response.status_code == 200, response.content


def _get(client, session: dict, path: str = "", method: str = "get", expect: int = 200) -> dict:
    call = getattr(client, method)
    response = call(f"/api/sessions/{session['id']}/memory-index{path}", HTTP_X_SESSION_TOKEN=session["ownerToken"])
    assert response.status_code == expect, response.content
    return response.json()


def _recall(session_id: str, router: ModelRouter, query: str = QUERY, scope: str = "recall") -> list[dict]:
    """memory-search through the real executor over the session's committed snapshot."""
    from sessions.models import Session

    snapshot = session_snapshot_load(Session.objects.get(id=session_id))
    registry = default_registry()
    ctx = ToolContext(session_id=session_id, plugin_id="narrator", runtime_id="narrator", model_router=router,
                      state=InMemoryStateView(messages=list(snapshot.messages), lorebook=list(snapshot.lorebook)),
                      authorized_tool_names=frozenset(registry.builtin_names()))
    call = ToolCall("call-1", "memory-search", f'{{"query": "{query}", "scope": "{scope}", "limit": 3}}')
    outcome = ToolExecutor(registry).execute_batch([call], ctx)[0]
    return outcome.content["results"]


def _wait_idle(client, session: dict) -> dict:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        state = _get(client, session)
        if state["progress"]["state"] != "running":
            return state
        time.sleep(0.05)
    raise AssertionError(f"the re-index did not finish: {state}")


@pytest.fixture
def game(client, catalog) -> dict:
    session = session_create(client, worldId="tide-test", locale="en-US", plugins=["teller"])
    _say_60_turns(client, session)
    return session


def test_offline_model_locks_on_first_recall_and_recalls_turn_3_by_meaning(client, game):
    before = _get(client, game)
    assert before == {"available": True, "locked": None, "stale": False,
                      "configured": {"provider": "local", "modelName": "wordllama-l2-supercat-256"},
                      "progress": {"state": "idle", "indexed": 0, "total": 0}}
    results = _recall(game["id"], ModelRouter(ModelConfig()))
    assert results[0]["text"] == FACT, results
    after = _get(client, game)
    assert after["locked"]["provider"] == "local" and after["locked"]["dim"] == 256
    assert after["locked"]["lockedAt"].endswith("Z") and after["stale"] is False
    assert MemoryVector.objects.filter(session_id=game["id"]).count() == 120
    # Keywords alone cannot find it: no word is shared.
    assert _recall(game["id"], None) == []


def _peer_toml(tmp_path, peer: ModelPeer, model: str) -> str:
    path = tmp_path / f"llm-{model}.toml"
    path.write_text(f'[covel.story]\nprovider = "scripted"\n\n[covel.memory]\nprovider = "my-lab"\nmodel = "{model}"\n'
                    f'baseUrl = "{peer.base_url}"\n', encoding="utf-8")
    return str(path)


def test_embeddings_endpoint_switch_stale_rebuild_and_502(client, game, tmp_path, settings):
    settings.COVEL_OUTBOUND_ALLOW = ("127.0.0.1",)
    with ModelPeer() as peer:
        settings.COVEL_LLM_TOML = _peer_toml(tmp_path, peer, "peer-embed")
        router = lambda: ModelRouter(model_config_parse(open(settings.COVEL_LLM_TOML).read()))  # noqa: E731
        assert _get(client, game)["configured"] == {"provider": "my-lab", "modelName": "peer-embed"}
        _recall(game["id"], router())
        locked = _get(client, game)["locked"]
        assert (locked["provider"], locked["modelName"], locked["dim"]) == ("my-lab", "peer-embed", 16)
        assert any(r.path == "/v1/embeddings" and r.body["model"] == "peer-embed" for r in peer.requests)

        # Another configured model: stale, keyword-only, nothing new indexed.
        settings.COVEL_LLM_TOML = _peer_toml(tmp_path, peer, "peer-embed-2")
        state = _get(client, game)
        assert state["stale"] is True and state["configured"]["modelName"] == "peer-embed-2"
        count = MemoryVector.objects.filter(session_id=game["id"]).count()
        sent = len(peer.requests)
        assert _recall(game["id"], router(), query="merchant cloth")[0]["text"].startswith("We haggle")
        assert len(peer.requests) == sent and MemoryVector.objects.filter(session_id=game["id"]).count() == count

        # The new model fails its probe: 502, the old index stays.
        peer.embedding_faults.append({"status": 500})
        error = _get(client, game, "/rebuild", method="post", expect=502)
        assert error["code"] == "embedding_unavailable" and error["details"]["reason"]
        assert _get(client, game)["locked"]["modelName"] == "peer-embed"
        assert MemoryVector.objects.filter(session_id=game["id"]).count() == count

        # Rebuild: fresh lock now, re-index in the background with progress.
        rebuilt = _get(client, game, "/rebuild", method="post")
        assert rebuilt["locked"]["modelName"] == "peer-embed-2" and rebuilt["stale"] is False
        total = rebuilt["progress"]["total"]
        assert total >= 120  # 120 messages and the world's characters
        done = _wait_idle(client, game)
        assert done["progress"] == {"state": "idle", "indexed": total, "total": total}
        assert MemoryIndex.objects.get(session_id=game["id"]).generation == 1
        assert MemoryVector.objects.filter(session_id=game["id"]).count() == total
        assert {r.body["model"] for r in peer.requests[sent:] if r.path == "/v1/embeddings"} == {"peer-embed-2"}


def test_rebuild_without_a_model_unlocks_and_vector_backend_none(client, game, tmp_path, settings):
    _recall(game["id"], ModelRouter(ModelConfig()))
    path = tmp_path / "none.toml"
    path.write_text('[covel.story]\nprovider = "scripted"\n\n[covel.memory]\nprovider = "none"\n', encoding="utf-8")
    settings.COVEL_LLM_TOML = str(path)
    state = _get(client, game)
    assert state["configured"] is None and state["stale"] is True
    cleared = _get(client, game, "/rebuild", method="post")
    assert cleared["locked"] is None and cleared["stale"] is False
    assert MemoryVector.objects.filter(session_id=game["id"]).count() == 0

    settings.VECTOR_BACKEND = "none"
    assert _get(client, game) == {"available": False, "locked": None, "configured": None, "stale": False}
    error = _get(client, game, "/rebuild", method="post", expect=409)
    assert error["code"] == "memory_index_unavailable"
    assert _recall(game["id"], ModelRouter(ModelConfig()), query="silver key")[0]["text"] == FACT  # keywords still work
