"""The browser-private workspace over HTTP (spec 004 §浏览器私有工作区, §校验与错误, §幂等重放缓存,
§有后台作业时上传 checkpoint, §共享部署). The profile is switched on with STORE_BACKEND=memory on the test
database (the routes read the setting the process was configured with; the real in-memory store is
exercised in tests/e2e/test_browser_private.py)."""
from __future__ import annotations

import copy
import json
import threading
import time

import pytest

from jobs.models import RuntimeJob
from sessions.models import Character, ChatMessage, Session, Snapshot, World
from turns import browser_workspace
from turns.models import SessionEvent

pytestmark = pytest.mark.django_db

JSON = "application/json"
WORLD = "hollow-reach-light"


@pytest.fixture(autouse=True)
def _fresh_workspaces():
    browser_workspace.workspaces_reset()
    yield
    browser_workspace.workspaces_reset()


@pytest.fixture
def memory(settings):
    """This process runs the browser-private profile."""
    settings.STORE_BACKEND = "memory"
    return settings


def _create(client, **body) -> tuple[str, dict]:
    response = client.post("/api/sessions", {"worldId": WORLD, "locale": "en-US", **body}, content_type=JSON)
    assert response.status_code == 201, response.content
    created = response.json()
    return created["id"], {"HTTP_X_SESSION_TOKEN": created["ownerToken"]}


def _put(client, sid, checkpoint, **headers):
    return client.put(f"/api/sessions/{sid}/browser-checkpoint", {"checkpoint": checkpoint}, content_type=JSON, **headers)


def _commit(client, sid, action_id, base, **headers):
    return client.post(f"/api/sessions/{sid}/browser-commit", {"actionId": action_id, "baseRevision": base},
                       content_type=JSON, **headers)


@pytest.fixture
def save(client, memory):
    """A new browser save: the server session and its first export (revision 1)."""
    sid, owner = _create(client)
    response = _commit(client, sid, f"local:create:{sid}", 0, **owner)
    assert response.status_code == 200, response.content
    return sid, owner, response.json()["checkpoint"]


def _message(mid, text="Hello", role="user"):
    return {"id": mid, "role": role, "kind": "text", "content": text, "createdAt": "2026-01-01T00:00:00Z"}


def _error(response, status, code):
    assert response.status_code == status, response.content
    body = response.json()
    assert body["code"] == code, body
    return body


# --- the profile -------------------------------------------------------------------------------------


def test_normal_server_answers_browser_private_profile_required(client):
    # given: the default sqlite store and a session
    sid, owner = _create(client)
    # when / then: both routes refuse (a missing session is 404 first, like on every session route)
    _error(_put(client, sid, {"schemaVersion": 2}, **owner), 409, "browser_private_profile_required")
    _error(_commit(client, sid, f"local:create:{sid}", 0, **owner), 409, "browser_private_profile_required")
    _error(_put(client, "nobody", {"schemaVersion": 2}), 404, "session_not_found")


def test_health_and_config_info_report_the_memory_store(client, memory):
    health = client.get("/api/health").json()
    assert health["storage"]["data"] == {"backend": "memory", "durable": False, "frontendMode": "local"}
    assert health["deployment"]["form"] == "browser-private" and health["operatorTokenRequired"] is True
    info = client.get("/api/config/info").json()
    assert info["storeBackend"] == "memory" and info["requiresAuth"] is True


def test_session_list_is_empty_unless_the_debug_page_is_on(client, memory):
    sid, _ = _create(client)
    assert client.get("/api/sessions").json() == {"items": []}
    memory.ENABLE_DEBUG_PAGE = True
    assert [s["id"] for s in client.get("/api/sessions").json()["items"]] == [sid]


def test_owner_token_is_checked_in_the_self_tier(client, memory):
    sid, owner = _create(client)
    _error(_commit(client, sid, f"local:create:{sid}", 0), 401, "session_owner_required")
    _error(_commit(client, sid, f"local:create:{sid}", 0, HTTP_X_SESSION_TOKEN="wrong"), 401, "session_owner_required")
    _error(_put(client, sid, {}, HTTP_AUTHORIZATION="Bearer wrong"), 401, "session_owner_required")
    # the other session routes too (spec 004 §生产 MemoryStore 例外: 会话仍然强制检查 owner token)
    assert client.get(f"/api/sessions/{sid}").status_code == 401
    assert client.get(f"/api/sessions/{sid}", **owner).status_code == 200


# --- browser-commit --------------------------------------------------------------------------------------


def test_first_export_is_revision_one_and_replays(client, memory):
    sid, owner = _create(client)
    first = _commit(client, sid, f"local:create:{sid}", 0, **owner)
    assert first.status_code == 200, first.content
    commit = first.json()
    assert (commit["baseRevision"], commit["revision"], commit["actionId"]) == (0, 1, f"local:create:{sid}")
    checkpoint = commit["checkpoint"]
    assert checkpoint["schemaVersion"] == 2 and checkpoint["profile"] == "browser-private"
    assert checkpoint["sessionId"] == sid and checkpoint["revision"] == 1 and len(checkpoint["head"]) == 64
    assert checkpoint["session"]["worldId"] == WORLD and checkpoint["world"]["source"] == "file"
    # the same actionId gets the same commit
    assert _commit(client, sid, f"local:create:{sid}", 0, **owner).json() == commit


@pytest.mark.parametrize("action_id, base", [("local:create:other", 0), ("act:1", 0), ("{local}", 1)])
def test_commit_without_checkpoint_is_browser_checkpoint_required(client, memory, action_id, base):
    sid, owner = _create(client)
    action_id = action_id.replace("{local}", f"local:create:{sid}")
    _error(_commit(client, sid, action_id, base, **owner), 409, "browser_checkpoint_required")


def test_first_export_needs_no_completed_player_turn(client, memory):
    sid, owner = _create(client)
    Session.objects.filter(pk=sid).update(completed_player_turns=1)
    _error(_commit(client, sid, f"local:create:{sid}", 0, **owner), 409, "browser_checkpoint_required")


@pytest.mark.parametrize("body", [{"actionId": "", "baseRevision": 0}, {"actionId": "a", "baseRevision": -1},
                                  {"actionId": "a", "baseRevision": True}, {"actionId": 5, "baseRevision": 0},
                                  {"actionId": "a"}, {"actionId": "a", "baseRevision": 0, "extra": 1}])
def test_commit_body_is_validated(client, save, body):
    sid, owner, _ = save
    response = client.post(f"/api/sessions/{sid}/browser-commit", body, content_type=JSON, **owner)
    _error(response, 400, "invalid_request")


def test_commit_of_missing_session_is_not_found(client, memory):
    _error(_commit(client, "nobody-here", "local:create:nobody-here", 0), 404, "session_not_found")


def test_next_commit_needs_the_head_revision_and_keeps_16_replays(client, save):
    sid, owner, checkpoint = save
    assert _put(client, sid, checkpoint, **owner).status_code == 200
    _error(_commit(client, sid, "act:x", 0, **owner), 409, "browser_revision_conflict")
    commits = []
    for n in range(17):
        response = _commit(client, sid, f"act:{n}", 1 + n, **owner)
        assert response.status_code == 200, response.content
        commits.append(response.json())
    assert [c["revision"] for c in commits] == list(range(2, 19))
    # the newest 16 replay unchanged; the oldest left the cache (its base revision is long gone)
    assert _commit(client, sid, "act:1", 2, **owner).json() == commits[1]
    assert _commit(client, sid, "act:16", 17, **owner).json() == commits[16]
    _error(_commit(client, sid, "act:0", 1, **owner), 409, "browser_revision_conflict")


def test_deleted_session_takes_its_revision_and_replays_along(client, save, django_capture_on_commit_callbacks):
    sid, owner, _ = save
    with django_capture_on_commit_callbacks(execute=True):
        assert client.delete(f"/api/sessions/{sid}", **owner).status_code == 200
    assert sid not in browser_workspace._workspaces
    # a new session under the same id starts again at revision 1
    new_sid, new_owner = _create(client, id=sid)
    assert new_sid == sid
    again = _commit(client, sid, f"local:create:{sid}", 0, **new_owner)
    assert again.status_code == 200 and again.json()["revision"] == 1


# --- browser-checkpoint --------------------------------------------------------------------------------


def test_checkpoint_replaces_the_workspace(client, save):
    sid, owner, checkpoint = save
    # given: the server has a message the browser's save does not
    ChatMessage.objects.create(session_id=sid, message_id="server-only", role="user", content="stray")
    upload = copy.deepcopy(checkpoint)
    upload["messages"] = [_message("m1", "I open the door."), _message("m2", "The wind answers.", role="assistant")]
    upload["characters"] = [{"id": "wren", "name": "Wren", "type": "player", "fields": {"age": 30}}]
    upload["session"]["title"] = "Browser title"
    upload["session"]["metadata"] = {"pluginSelection": {"chosen": ["a"]}}
    # when
    response = _put(client, sid, upload, **owner)
    # then: the browser's save is the workspace now; the server keeps its own credentials
    assert response.status_code == 200, response.content
    assert response.json() == {"ok": True, "sessionId": sid, "revision": 1, "head": checkpoint["head"]}
    assert list(ChatMessage.objects.filter(session_id=sid).order_by("id").values_list("message_id", "content")) == [
        ("m1", "I open the door."), ("m2", "The wind answers.")]
    assert Character.objects.get(session_id=sid).fields == {"age": 30}
    row = Session.objects.get(pk=sid)
    assert row.title == "Browser title" and row.metadata["pluginSelection"] == {"chosen": ["a"]}
    last = SessionEvent.objects.filter(session_id=sid).order_by("-seq").first()
    assert (last.type, last.payload) == ("system.reset", {"reason": "browser_checkpoint", "revision": 1})
    assert row.owner_token_hash and row.incarnation
    exported = _commit(client, sid, "act:1", 1, **owner).json()["checkpoint"]
    assert [m["id"] for m in exported["messages"]] == ["m1", "m2"] and exported["revision"] == 2


def test_checkpoint_timestamps_without_a_zone_are_read_as_utc(client, save):
    sid, owner, checkpoint = save
    upload = copy.deepcopy(checkpoint)
    upload["characters"] = [{"id": "wren", "name": "Wren", "type": "player", "fields": {},
                             "createdAt": "2026-01-02T03:04:05.678"}]
    response = _put(client, sid, upload, **owner)
    assert response.status_code == 200, response.content
    assert Character.objects.get(session_id=sid).created_at.isoformat() == "2026-01-02T03:04:05.678000+00:00"


def test_stale_revision_and_fork_are_refused(client, save):
    sid, owner, checkpoint = save
    assert _put(client, sid, checkpoint, **owner).status_code == 200
    second = _commit(client, sid, "act:1", 1, **owner).json()["checkpoint"]
    stale = _error(_put(client, sid, checkpoint, **owner), 409, "browser_revision_conflict")
    assert stale["details"] == {"reason": "stale", "serverRevision": 2, "revision": 1}
    fork = _error(_put(client, sid, dict(second, head="0" * 64), **owner), 409, "browser_revision_conflict")
    assert fork["details"]["reason"] == "fork"
    assert _put(client, sid, second, **owner).status_code == 200


def _invalid(checkpoint: dict, case: str) -> dict:
    c = copy.deepcopy(checkpoint)
    if case == "schema-version":
        c["schemaVersion"] = 1
    elif case == "clock":
        del c["session"]["phase"]
    elif case == "origin":
        c["turnResults"] = [{"turnId": "t1", "origin": "someone", "commitStatus": "committed"}]
    elif case == "commit-status":
        c["turnResults"] = [{"turnId": "t1", "origin": "player", "commitStatus": "maybe"}]
    elif case == "snapshot-schema":
        c["snapshots"] = [{"id": "s1", "sessionId": c["sessionId"], "kind": "manual", "payload": {"schemaVersion": 2}}]
    elif case == "not-object":
        c = ["nope"]
    elif case == "head-at-zero":
        c["revision"] = 0
    elif case == "duplicate-message":
        c["messages"] = [_message("a"), _message("b"), _message("a")]
    elif case == "api-key":
        c["session"]["metadata"] = {"providerSettings": {"openai": {"apiKey": "sk-1"}}}
    elif case == "duplicate-character":
        c["messages"] = [_message("m-new")]
        c["characters"] = [{"id": "wren", "name": "Wren"}, {"id": "wren", "name": "Wren again"}]
    elif case == "owner-token":
        c["pluginData"] = [{"pluginId": "p", "namespace": "n", "key": "k", "value": {"ownerToken": "x"}}]
    return c


@pytest.mark.parametrize("case", ["schema-version", "clock", "origin", "commit-status", "snapshot-schema", "not-object",
                                  "head-at-zero", "duplicate-message", "duplicate-character", "api-key",
                                  "owner-token"])
def test_invalid_checkpoint_is_refused_before_anything_is_written(client, save, case):
    sid, owner, checkpoint = save
    before = list(ChatMessage.objects.filter(session_id=sid).values_list("message_id", flat=True))
    body = _error(_put(client, sid, _invalid(checkpoint, case), **owner), 400, "invalid_checkpoint")
    if case == "duplicate-message":
        assert body["details"]["path"] == "messages[2].id" and body["details"]["duplicateOf"] == "messages[0].id"
    assert list(ChatMessage.objects.filter(session_id=sid).values_list("message_id", flat=True)) == before


def test_server_secret_inside_the_checkpoint_is_refused(client, save, settings):
    sid, owner, checkpoint = save
    settings.COVEL_OPERATOR_TOKEN = "operator-secret-value"
    upload = dict(checkpoint, messages=[_message("m1", "my token is operator-secret-value")])
    body = _error(_put(client, sid, upload, **owner), 400, "invalid_checkpoint")
    assert body["details"]["path"] == "checkpoint.messages[0].content"


@pytest.mark.parametrize("case", ["session-id", "session-record", "profile", "message-owner", "world", "world-import"])
def test_checkpoint_of_another_scope_is_invalid_checkpoint_scope(client, save, case):
    sid, owner, checkpoint = save
    c = copy.deepcopy(checkpoint)
    if case == "session-id":
        c["sessionId"] = "someone-else"
    elif case == "session-record":
        c["session"]["id"] = "someone-else"
    elif case == "profile":
        c["profile"] = "remote"
    elif case == "message-owner":
        c["messages"] = [dict(_message("m1"), sessionId="someone-else")]
    elif case == "world":
        c["world"] = {"id": "another-world", "name": "x"}
    elif case == "world-import":
        c["worldImports"] = [{"worldId": "another-world", "kind": "dimension", "sourceId": "s", "target": "t",
                              "key": "k", "valueHash": "h"}]
    _error(_put(client, sid, c, **owner), 400, "invalid_checkpoint_scope")


def test_record_of_another_session_rolls_the_whole_write_back(client, save):
    sid, owner, checkpoint = save
    other_sid, _ = _create(client)
    Snapshot.objects.create(session_id=other_sid, snapshot_id="snap-taken", data={})
    snapshot_payload = {"schemaVersion": 3, "session": {"status": "active", "phase": "setup", "completedPlayerTurns": 0,
                                                        "setupRuntimes": {}},
                        "characters": [], "lorebookEntries": [], "dimensions": [], "pluginData": [], "suspensions": []}
    upload = dict(checkpoint, messages=[_message("m-new")],
                  snapshots=[{"id": "snap-taken", "sessionId": sid, "kind": "manual", "payload": snapshot_payload}])
    body = _error(_put(client, sid, upload, **owner), 400, "session_record_scope_conflict")
    assert body["details"]["id"] == "snap-taken"
    assert not ChatMessage.objects.filter(session_id=sid, message_id="m-new").exists()
    assert Snapshot.objects.get(snapshot_id="snap-taken").session_id == other_sid


def test_unfinished_background_job_keeps_the_server_state(client, save):
    sid, owner, checkpoint = save
    assert _put(client, sid, checkpoint, **owner).status_code == 200
    base = _commit(client, sid, "act:1", 1, **owner).json()["checkpoint"]
    RuntimeJob.objects.create(session_id=sid, plugin_id="memory", runtime_id="memory/extract", status="running")
    # when: the browser adds a user message and changes the status / model overrides
    upload = copy.deepcopy(base)
    upload["messages"].append(_message("m-user", "I wait."))
    upload["session"]["status"] = "paused"
    upload["session"]["metadata"]["runtimeModelOverrides"] = {"teller/main": "scripted"}
    response = _put(client, sid, upload, **owner)
    # then: taken, and the browser must reconcile (also on an identical retry)
    assert response.status_code == 200, response.content
    assert response.json()["reconcileRequired"] is True
    assert _put(client, sid, upload, **owner).json()["reconcileRequired"] is True
    assert ChatMessage.objects.filter(session_id=sid, message_id="m-user").count() == 1
    row = Session.objects.get(pk=sid)
    assert row.status == "paused" and row.metadata["runtimeModelOverrides"] == {"teller/main": "scripted"}


@pytest.mark.parametrize("case", ["delete-message", "assistant-message", "characters", "world-id", "phase"])
def test_unfinished_background_job_refuses_other_mutations(client, save, case):
    sid, owner, checkpoint = save
    ChatMessage.objects.create(session_id=sid, message_id="kept", role="user", content="hi")
    assert _put(client, sid, dict(checkpoint, messages=[_message("kept", "hi")]), **owner).status_code == 200
    base = _commit(client, sid, "act:1", 1, **owner).json()["checkpoint"]
    RuntimeJob.objects.create(session_id=sid, plugin_id="memory", runtime_id="memory/extract", status="queued")
    upload = copy.deepcopy(base)
    if case == "delete-message":
        upload["messages"] = []
    elif case == "assistant-message":
        upload["messages"].append(_message("m-a", "Narration", role="assistant"))
    elif case == "characters":
        upload["characters"] = [{"id": "x", "name": "X"}]
    elif case == "world-id":
        upload["session"]["worldId"] = "yanhui-ferry"
        upload["world"], upload["worldImports"] = None, []
    elif case == "phase":
        upload["session"]["phase"] = "playing"
    _error(_put(client, sid, upload, **owner), 409, "unsupported_browser_mutation")
    assert list(ChatMessage.objects.filter(session_id=sid).values_list("message_id", flat=True)) == ["kept"]


def test_missing_session_is_rebuilt_for_the_presented_token(client, save):
    sid, owner, checkpoint = save
    # given: the process lost the session (a restart of the memory store)
    Session.objects.filter(pk=sid).delete()
    browser_workspace.workspaces_reset()
    # then: without a token nobody can claim it; with one, the checkpoint rebuilds it for that token
    _error(_put(client, sid, checkpoint), 401, "session_owner_required")
    assert _put(client, sid, checkpoint, **owner).status_code == 200
    assert client.get(f"/api/sessions/{sid}", **owner).json()["worldId"] == WORLD
    assert client.get(f"/api/sessions/{sid}", HTTP_X_SESSION_TOKEN="other").status_code == 401


def test_world_missing_on_the_server_needs_the_operator(client, save, settings):
    sid, owner, checkpoint = save
    settings.COVEL_OPERATOR_TOKEN = "op-token-1234"
    Session.objects.filter(pk=sid).delete()
    upload = copy.deepcopy(checkpoint)
    upload["session"]["worldId"] = "browser-world"
    upload["world"] = {"id": "browser-world", "name": "Browser World", "source": "store", "metadata": {}, "package": {}}
    upload["worldImports"] = []
    # an ordinary owner may not create a global world through a checkpoint (world content or not)
    _error(_put(client, sid, upload, **owner), 401, "operator_token_required")
    _error(_put(client, sid, dict(upload, world=None), **owner), 401, "operator_token_required")
    assert not World.objects.filter(pk="browser-world").exists()
    # the operator may; the server keeps that world from then on
    response = _put(client, sid, upload, HTTP_AUTHORIZATION="Bearer op-token-1234")
    assert response.status_code == 200, response.content
    assert World.objects.get(pk="browser-world").name == "Browser World"


def test_world_being_deleted_is_world_deleting(client, save):
    sid, owner, checkpoint = save
    World.objects.create(id=WORLD, name=WORLD, state=World.STATE_DELETING)
    _error(_put(client, sid, checkpoint, **owner), 409, "world_deleting")


def test_existing_world_ignores_uploaded_content(client, save):
    sid, owner, checkpoint = save
    upload = dict(checkpoint, world={"id": WORLD, "name": "Renamed by a browser", "source": "store",
                                     "metadata": {}, "package": {"lore": "x"}})
    assert _put(client, sid, upload, **owner).status_code == 200
    assert not World.objects.filter(pk=WORLD).exists()


def test_checkpoint_body_limit_is_64_mib(client, save):
    sid, owner, checkpoint = save
    # above the general 1 MiB limit: accepted
    big = dict(checkpoint, messages=[_message("m1", "x" * (2 * 1024 * 1024))])
    assert _put(client, sid, big, **owner).status_code == 200
    # above 64 MiB: 413 before anything is parsed
    huge = json.dumps({"checkpoint": dict(checkpoint, messages=[_message("m1", "x" * (64 * 1024 * 1024))])})
    response = client.put(f"/api/sessions/{sid}/browser-checkpoint", huge, content_type=JSON, **owner)
    assert response.status_code == 413
    # browser-commit keeps the 1 MiB limit
    response = client.post(f"/api/sessions/{sid}/browser-commit", json.dumps({"actionId": "a" * (1024 * 1024 + 1),
                                                                             "baseRevision": 1}),
                           content_type=JSON, **owner)
    assert response.status_code == 413


@pytest.mark.parametrize("body, code", [({}, "invalid_checkpoint"), ({"checkpoint": {}, "revision": 1}, "invalid_request")])
def test_checkpoint_body_needs_exactly_the_checkpoint(client, save, body, code):
    sid, owner, _ = save
    response = client.put(f"/api/sessions/{sid}/browser-checkpoint", body, content_type=JSON, **owner)
    _error(response, 400, code)


# --- re-checked after the session lock -------------------------------------------------------------------


def _wait_until_queued(session_id: str) -> None:
    """Until a request waits for the session's lock (the in-process lock's users, or an ungranted
    PostgreSQL advisory lock in the hosted half)."""
    from django.db import connection

    from sessions import locks

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")
                if cursor.fetchone()[0]:
                    return
        else:
            entry = locks._local_locks.get(session_id)
            if entry is not None and entry.users >= 2:
                return
        time.sleep(0.02)
    raise AssertionError("the request never queued for the session lock")


def _queued_request(send):
    """Run ``send()`` on another thread; returns (thread, result holder)."""
    from django.db import connections

    result: dict = {}

    def run():
        try:
            result["response"] = send()
        finally:
            connections.close_all()  # this thread's own connections (the test database is dropped later)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, result


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("change, status, code", [("owner", 401, "session_owner_required"),
                                                  ("incarnation", 409, "session_incarnation_changed"),
                                                  ("deleting", 409, "session_deleting")])
def test_owner_incarnation_and_deletion_are_checked_again_under_the_lock(memory, change, status, code):
    from django.test import Client

    from sessions.locks import session_lock

    client = Client()
    sid, owner = _create(client)
    checkpoint = _commit(client, sid, f"local:create:{sid}", 0, **owner).json()["checkpoint"]
    with session_lock(sid):
        thread, result = _queued_request(lambda: _put(Client(), sid, checkpoint, **owner))
        _wait_until_queued(sid)
        # while the upload waits for the lock, the session changes hands / is recreated / starts deleting
        if change == "owner":
            Session.objects.filter(pk=sid).update(owner_token_hash="0" * 64)
        elif change == "incarnation":
            Session.objects.filter(pk=sid).update(incarnation="f" * 32)
        else:
            Session.objects.filter(pk=sid).update(deletion_state=Session.DELETION_DELETING)
    thread.join(timeout=30)
    _error(result["response"], status, code)
    # nothing of the upload was taken: the process still holds the head of the first export
    assert browser_workspace._workspaces[sid].head == checkpoint["head"]


# --- spec 004 §生产 MemoryStore 例外: the public site's operator routes, Host check and model addresses

def test_browser_private_operator_routes_need_the_operator_token_even_in_the_self_tier(client, memory):
    memory.DEPLOYMENT_TIER = "self"
    memory.COVEL_OPERATOR_TOKEN = ""
    # anyone may create a session, and list a provider's models with their own keys
    sid, owner = _create(client)
    assert sid
    # without a configured operator token the operator routes stay closed
    for method, path in (("get", "/api/provider-keys"), ("post", "/api/model-db/refresh"), ("post", "/api/llm-config/reload")):
        response = getattr(client, method)(path, content_type=JSON)
        assert response.status_code == 401 and response.json()["code"] == "operator_token_required", (path, response.content)
    # with one, only its holder passes
    memory.COVEL_OPERATOR_TOKEN = "op-secret-123"
    assert client.get("/api/provider-keys").json()["code"] == "operator_token_required"
    assert client.get("/api/provider-keys", HTTP_AUTHORIZATION="Bearer op-secret-123").status_code == 200


def _ping_own_preset(client, base_url: str) -> dict:
    from tests.covel.test_model_relay import slot_config

    response = client.post("/api/ai/ping", {"modelRef": "my-ollama"}, content_type=JSON, HTTP_X_SLOT_CONFIG=slot_config(base_url))
    assert response.status_code == 200, response.content
    return response.json()


def test_browser_private_has_no_host_check_and_refuses_private_model_addresses(client, memory):
    from tests.covel.outbound_support import Listener

    memory.DEPLOYMENT_TIER = "self"
    # a public site answers its own host name
    assert client.get("/api/health", HTTP_HOST="play.example.org").status_code == 200
    # and a visitor's model address may not point at this machine: the loopback model is never reached
    with Listener() as model:
        answer = _ping_own_preset(client, model.base_url)
        assert answer["ok"] is False and not model.requests, answer
        # the same preset on a personal server is the player's own machine: it is reached
        memory.STORE_BACKEND = "sqlite"
        _ping_own_preset(client, model.base_url)
        assert model.requests


def test_a_personal_server_keeps_its_host_check(client, settings):
    settings.DEPLOYMENT_TIER = "self"
    response = client.get("/api/health", HTTP_HOST="play.example.org")
    assert response.status_code == 403 and response.json()["code"] == "host_not_allowed"
