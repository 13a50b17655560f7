"""The memory index follows commits (issue 22): once a session's index is locked, every turn's and
runtime job's commit sends ``jobs.memory_index_update``, which embeds the new messages and the
searchable plugin data (the memory plugin's facts) without waiting for a memory-search; a stale
index is left alone; GET /api/health reports the real vector driver. Runs on SQLite and on
PostgreSQL (both halves of ``make test``)."""
from __future__ import annotations

import time

import pytest

from tests.plugins_app.test_memory_plugin import _say, _session, _settled
from turns.models import MemoryIndex, MemoryVector

pytestmark = pytest.mark.django_db(transaction=True)


def _wait_for(predicate, what: str, seconds: float = 30):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _index(played, path: str = "", method: str = "GET") -> dict:
    return played.api.json(method, f"/api/sessions/{played.id}/memory-index{path}")


def test_commits_index_new_messages_and_searchable_plugin_data_once_the_index_is_locked(client):
    from sessions.models import ChatMessage

    # given a game with the memory plugin whose index the player locked with a rebuild (offline model)
    played = _session(client, ("memory",))
    first = _say(played, "I walk down to the harbour and greet whoever is there.")
    _settled(played.id)
    assert not MemoryVector.objects.filter(session_id=played.id).exists()  # nothing indexed before a lock
    state = _index(played, "/rebuild", "POST")
    from turns.engine.providers.embeddings import LOCAL_MODEL_NAME

    assert (state["locked"]["provider"], state["locked"]["modelName"]) == ("local", LOCAL_MODEL_NAME), state
    _wait_for(lambda: _index(played)["progress"]["state"] == "idle", "the re-index")

    # when two more turns are played (no memory-search asked for anything)
    _say(played, "I ask the innkeeper Maren Holt about the drowned bell.")
    _say(played, "I wait by the door and listen.")
    _settled(played.id)

    # then their messages and the memory plugin's new facts were embedded by the commit's update task
    from sessions.models import Session
    from turns.engine.memory_index import memory_items_of_session

    recall = {i.key for i in memory_items_of_session(Session.objects.get(id=played.id)) if i.key.startswith("message:")}
    said = set(ChatMessage.objects.filter(session_id=played.id, role="user", content__contains="Maren Holt")
               .values_list("message_id", flat=True))
    assert len(said) == 1 and {f"message:{m}" for m in said} <= recall
    _wait_for(lambda: set(MemoryVector.objects.filter(session_id=played.id, item_key__startswith="message:")
                          .values_list("item_key", flat=True)) >= recall, "message vectors")
    facts = played.api.json("GET", f"/api/sessions/{played.id}/plugin-data/memory/facts")["items"]
    keys = {f"plugin:memory/facts/{f['key']}" for f in facts}
    assert any(f["value"]["text"] == "I ask the innkeeper Maren Holt about the drowned bell." for f in facts)
    _wait_for(lambda: set(MemoryVector.objects.filter(session_id=played.id, source="archival")
                          .values_list("item_key", flat=True)) >= keys, "fact vectors")
    assert first.status_code == 200

    # and GET /api/health reports the in-memory exact-cosine driver and the one locked model
    health = client.get("/api/health").json()
    assert health["vector"] == health["storage"]["vector"] == {"capable": True, "driver": "in-memory", "modelCount": 1, "tableCount": 1}


def test_a_stale_index_is_not_written_by_commits_and_vector_backend_none_reports_no_driver(client, settings):
    # given a locked session whose lock then names another model (as after a model switch)
    played = _session(client, ("memory",))
    _index(played, "/rebuild", "POST")
    _wait_for(lambda: _index(played)["progress"]["state"] == "idle", "the re-index")
    MemoryIndex.objects.filter(session_id=played.id).update(model_name="another-model")
    before = MemoryVector.objects.filter(session_id=played.id).count()

    # when a turn commits
    _say(played, "I cross the square to the far side.")
    _settled(played.id)
    time.sleep(0.5)  # the update task had its chance

    # then nothing was indexed (stale: keyword-only, new content not indexed)
    assert _index(played)["stale"] is True
    assert MemoryVector.objects.filter(session_id=played.id).count() == before

    # and with VECTOR_BACKEND=none health reports no vector driver
    settings.VECTOR_BACKEND = "none"
    assert client.get("/api/health").json()["vector"] == {"capable": False, "driver": "none", "modelCount": 0, "tableCount": 0}
