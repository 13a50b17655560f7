"""Community code authorization and approvals over HTTP (spec 004 §社区插件授权, §RPC Approval 流程,
§插件来源与 approval 行为, §会话插件管理, revoke 边界).

The community test plugin ``lantern`` (tests/sessions/lantern_support.py) leaves a marker file
whenever one of its modules is imported, which proves what was (not) imported when.
"""
from __future__ import annotations

import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from plugins_app.registry import registry_reset
from sessions.models import Approval, Session
from tests.sessions.lantern_support import lantern_install, lantern_uninstall, lantern_zip, marks, marks_clear, marks_of
from tests.turns.test_actions_helpers import action_body, post_action, session_make, stream_read
from turns.models import Execution

pytestmark = pytest.mark.django_db(transaction=True)

OPERATOR = "operator-test-token"
NO_HELPER = ("watch", "manual", "later", "listener")


@pytest.fixture(autouse=True)
def _fresh_registry():
    lantern_uninstall()
    marks_clear()
    yield
    lantern_uninstall()
    marks_clear()


def _decide(api, approval_id: str, decision: str = "allow", scope: str | None = "session", **headers):
    body = {"decision": decision, **({"scope": scope} if scope else {})}
    return api.post(f"/api/approvals/{approval_id}/decision", data=json.dumps(body), content_type="application/json", **headers)


def _rpc(api, session_id: str, body: dict, **headers):
    return api.post(f"/api/sessions/{session_id}/plugin-rpc", data=json.dumps(body), content_type="application/json", **headers)


def _approval_required(response, action: str) -> dict:
    assert response.status_code == 202, response.content
    body = response.json()
    assert body["status"] == "approval-required" and body["approvalId"] == body["pending"]["approvalId"]
    assert body["pending"]["action"] == action and body["pending"]["trustLevel"] == "community"
    return body


def _playing_session(**kwargs):
    return session_make(plugins=("narrator", "lantern"), characters=[("hero", "Hero", "player")], **kwargs)


def test_an_installed_community_plugin_is_listed_and_selectable_but_not_imported(api):
    # given lantern installed from a zip, then the server restarted (the registry rebuilt)
    upload = SimpleUploadedFile("lantern.zip", lantern_zip(runtimes=NO_HELPER), content_type="application/zip")
    installed = api.post("/api/install/plugin", {"file": upload})
    assert installed.status_code == 201 and installed.json()["hasServerCode"] is True
    registry_reset()
    # when the plugins are listed and a session selects it
    listed = {p["id"]: p for p in api.get("/api/plugins").json()["items"]}
    created = api.post("/api/sessions", {"worldId": "hollow-reach-light", "locale": "en-US", "plugins": ["lantern"]},
                       content_type="application/json")
    # then it is listed with its trust, selectable, and none of its code was imported
    assert listed["lantern"]["hostState"] == "installed" and listed["lantern"]["source"] == "community"
    assert listed["lantern"]["trust"] == {"source": None, "trustedSource": False, "integrity": "no-receipt", "autoApproved": False}
    assert "trust" not in listed["narrator"]
    assert created.status_code == 201, created.content
    session_id = created.json()["id"]
    items = {p["id"]: p for p in api.get(f"/api/sessions/{session_id}/plugins").json()["items"]}
    assert items["lantern"]["serverCodeApproved"] is False and items["lantern"]["approvalRequired"] is True
    assert items["lantern"]["active"] is False and items["lantern"]["sessionState"] == "approval-required"
    assert "lantern" in Session.objects.get(pk=session_id).active_plugins
    assert items["narrator"]["locked"] is True and items["narrator"]["serverCodeApproved"] is True
    assert marks() == []


def test_actions_asks_for_server_code_then_the_runtime_and_then_runs(api):
    # given a playing session with the community plugin
    lantern_install(runtimes=NO_HELPER)
    session = _playing_session()
    body = action_body(session.id, request_id="req-lantern")

    # when the player acts: server code is asked first, before any write or import
    first = _approval_required(post_action(api, body), "covel:plugin-server-code")
    assert Execution.objects.count() == 0 and marks() == []
    assert first["pending"]["sessionId"] == session.id and first["pending"]["pluginId"] == "lantern"
    listed = api.get(f"/api/sessions/{session.id}/approvals").json()["items"]
    assert [i["approvalId"] for i in listed] == [first["approvalId"]]
    # the same request asks the same pending approval again
    assert post_action(api, body).json()["approvalId"] == first["approvalId"]
    # code approvals accept only the session scope
    refused = _decide(api, first["approvalId"], scope="once")
    assert refused.status_code == 400 and refused.json()["code"] == "invalid_scope"
    assert _decide(api, first["approvalId"], scope=None).json()["code"] == "invalid_scope"
    decided = _decide(api, first["approvalId"])
    assert decided.status_code == 200, decided.content
    assert decided.json()["ok"] is True and decided.json()["scope"] == "session"
    assert decided.json()["pending"]["approvalId"] == first["approvalId"]
    # allowing server code imports the entry (in this process), not yet the runtime's handler
    assert marks_of("entry") and not marks_of("watch")

    # then the retried request asks for the runtime, one grant at a time
    second = _approval_required(post_action(api, body), "runtime:lantern/watch")
    assert _decide(api, second["approvalId"]).status_code == 200
    assert marks_of("watch")
    assert api.get(f"/api/sessions/{session.id}/approvals").json()["items"] == []

    # and the third time the turn runs, the community runtime included
    frames = stream_read(post_action(api, body))
    assert frames[-1]["type"] == "execution.completed" and frames[-1]["payload"]["committed"] is True, frames[-1]
    assert Execution.objects.get().request_id == "req-lantern"
    from plugins_app.models import PluginData

    assert PluginData.objects.get(session_id=session.id, plugin_id="lantern", namespace="stats", key="turns").value == 1
    plugins = {p["id"]: p for p in api.get(f"/api/sessions/{session.id}/plugins").json()["items"]}
    assert plugins["lantern"]["serverCodeApproved"] is True and plugins["lantern"]["serverCodeApprovedBy"] == "session"
    assert plugins["lantern"]["active"] is True and "approvalRequired" not in plugins["lantern"]


def test_deny_runs_nothing_and_the_next_request_asks_again(api):
    lantern_install(runtimes=NO_HELPER)
    session = _playing_session()
    asked = _approval_required(post_action(api, action_body(session.id, request_id="r1")), "covel:plugin-server-code")
    # when the player denies
    denied = _decide(api, asked["approvalId"], decision="deny", scope=None)
    # then nothing ran or was imported, and the decision is final for that approval
    assert denied.status_code == 200 and denied.json()["decision"] == "deny" and "scope" not in denied.json()
    assert marks() == [] and Execution.objects.count() == 0
    again = _decide(api, asked["approvalId"])
    assert again.status_code == 404 and again.json()["code"] == "approval_not_found"
    retried = _approval_required(post_action(api, action_body(session.id, request_id="r1")), "covel:plugin-server-code")
    assert retried["approvalId"] != asked["approvalId"]
    assert Approval.objects.get(pk=asked["approvalId"]).status == "denied"


def _grant_code(api, session_id: str, request) -> None:
    for action in ("covel:plugin-server-code", "runtime:lantern/watch"):
        asked = _approval_required(request(), action)
        assert _decide(api, asked["approvalId"]).status_code == 200


def test_revoke_asks_again_and_old_approvals_answer_scope_changed(api):
    lantern_install(runtimes=NO_HELPER)
    session = _playing_session()
    _grant_code(api, session.id, lambda: post_action(api, action_body(session.id, request_id="r1")))
    pending = _approval_required(_rpc(api, session.id, {"kind": "action", "pluginId": "lantern", "action": "ping"}), "ping")

    # when the player revokes the session's approvals
    revoked = api.delete(f"/api/sessions/{session.id}/approvals")

    # then the two grants are cleared, the pending request is gone and its id no longer applies
    assert revoked.status_code == 200 and revoked.json() == {"ok": True, "cleared": 2}
    assert api.get(f"/api/sessions/{session.id}/approvals").json()["items"] == []
    stale = _decide(api, pending["approvalId"])
    assert stale.status_code == 409 and stale.json()["code"] == "approval_scope_changed"
    assert _decide(api, pending["approvalId"]).json()["code"] == "approval_not_found"  # it was used up
    # and the next request asks for server code again
    _approval_required(post_action(api, action_body(session.id, request_id="r2")), "covel:plugin-server-code")


def test_revoking_one_plugin_and_disabling_it_end_its_grants(api):
    lantern_install(runtimes=NO_HELPER)
    session = _playing_session()
    _grant_code(api, session.id, lambda: post_action(api, action_body(session.id, request_id="r1")))
    one = api.delete(f"/api/sessions/{session.id}/approvals?pluginId=lantern")
    assert one.json() == {"ok": True, "cleared": 2}
    _grant_code(api, session.id, lambda: post_action(api, action_body(session.id, request_id="r1")))
    # when the plugin is disabled and enabled again
    assert api.delete(f"/api/sessions/{session.id}/plugins/lantern").status_code == 200
    assert api.put(f"/api/sessions/{session.id}/plugins/lantern").status_code == 200
    # then its grants are gone
    _approval_required(post_action(api, action_body(session.id, request_id="r3")), "covel:plugin-server-code")


def test_core_plugins_are_locked(api):
    lantern_install(runtimes=NO_HELPER)
    session = _playing_session()
    response = api.delete(f"/api/sessions/{session.id}/plugins/narrator")
    assert response.status_code == 403 and response.json()["code"] == "plugin_locked"
    assert "narrator" in Session.objects.get(pk=session.id).active_plugins


def test_a_recreated_session_with_the_same_id_starts_without_grants(api):
    lantern_install(runtimes=NO_HELPER)
    create = {"worldId": "hollow-reach-light", "locale": "en-US", "plugins": ["lantern"], "id": "same-id"}
    assert api.post("/api/sessions", create, content_type="application/json").status_code == 201
    ping = {"kind": "action", "pluginId": "lantern", "action": "ping", "payload": {"n": 1}}
    code = _approval_required(_rpc(api, "same-id", ping), "covel:plugin-server-code")
    assert _decide(api, code["approvalId"]).status_code == 200
    action = _approval_required(_rpc(api, "same-id", ping), "ping")
    assert _decide(api, action["approvalId"]).status_code == 200
    assert _rpc(api, "same-id", ping).json() == {"status": "ok", "result": {"pong": {"n": 1}, "plugin": "lantern", "command": None}}

    # when the session is deleted and created again under the same id
    assert api.delete("/api/sessions/same-id").status_code == 200
    assert api.post("/api/sessions", create, content_type="application/json").status_code == 201

    # then its old grants do not apply: server code is asked again
    _approval_required(_rpc(api, "same-id", ping), "covel:plugin-server-code")


def test_a_pending_approval_of_an_earlier_incarnation_is_scope_changed(api):
    lantern_install(runtimes=NO_HELPER)
    create = {"worldId": "hollow-reach-light", "locale": "en-US", "plugins": ["lantern"], "id": "again-id"}
    assert api.post("/api/sessions", create, content_type="application/json").status_code == 201
    asked = _approval_required(_rpc(api, "again-id", {"kind": "action", "pluginId": "lantern", "action": "ping"}),
                               "covel:plugin-server-code")
    assert api.delete("/api/sessions/again-id").status_code == 200
    gone = _decide(api, asked["approvalId"])
    assert gone.status_code == 404 and gone.json()["code"] == "session_not_found"
    assert api.post("/api/sessions", create, content_type="application/json").status_code == 201
    changed = _decide(api, asked["approvalId"])
    assert changed.status_code == 409 and changed.json()["code"] == "approval_scope_changed"
    assert marks() == []


def test_allow_once_serves_one_identical_payload_in_any_key_order(api):
    lantern_install(runtimes=NO_HELPER)
    session = _playing_session()
    ping = {"kind": "action", "pluginId": "lantern", "action": "ping", "payload": {"a": 1, "b": [1, 2]}}
    code = _approval_required(_rpc(api, session.id, ping), "covel:plugin-server-code")
    _decide(api, code["approvalId"])
    asked = _approval_required(_rpc(api, session.id, ping), "ping")
    assert asked["pending"]["payload"] == {"a": 1, "b": [1, 2]}
    once = _decide(api, asked["approvalId"], scope="once")
    assert once.status_code == 200 and once.json()["scope"] == "once"
    # a different payload does not use it
    _approval_required(_rpc(api, session.id, {**ping, "payload": {"a": 2}}), "ping")
    # the same payload with its keys in another order does, once
    reordered = {**ping, "payload": {"b": [1, 2], "a": 1}}
    ran = _rpc(api, session.id, reordered)
    assert ran.status_code == 200 and ran.json()["result"]["pong"] == {"a": 1, "b": [1, 2]}
    _approval_required(_rpc(api, session.id, reordered), "ping")


def test_decision_validation_and_not_found(api):
    lantern_install(runtimes=NO_HELPER)
    session = _playing_session()
    asked = _approval_required(post_action(api, action_body(session.id)), "covel:plugin-server-code")
    bad = api.post(f"/api/approvals/{asked['approvalId']}/decision", data=json.dumps({"decision": "maybe"}),
                   content_type="application/json")
    assert bad.status_code == 400 and bad.json()["code"] == "invalid_decision"
    bad_scope = _decide(api, asked["approvalId"], scope="forever")
    assert bad_scope.status_code == 400 and bad_scope.json()["code"] == "invalid_scope"
    for unknown in ("00000000-0000-0000-0000-000000000000", "not-a-uuid"):
        missing = _decide(api, unknown)
        assert missing.status_code == 404 and missing.json()["code"] == "approval_not_found"
    # nothing of that consumed the pending request
    assert [i["approvalId"] for i in api.get(f"/api/sessions/{session.id}/approvals").json()["items"]] == [asked["approvalId"]]


def test_hosted_tiers_need_the_owner_and_the_operator_token(api, settings):
    # given a demo deployment
    lantern_install(runtimes=NO_HELPER)
    settings.DEPLOYMENT_TIER = "demo"
    settings.COVEL_OPERATOR_TOKEN = OPERATOR
    created = api.post("/api/sessions", {"worldId": "hollow-reach-light", "locale": "en-US", "plugins": ["lantern"]},
                       content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {OPERATOR}").json()
    owner = {"HTTP_AUTHORIZATION": f"Bearer {created['ownerToken']}"}
    asked = _approval_required(_rpc(api, created["id"], {"kind": "action", "pluginId": "lantern", "action": "ping"}, **owner),
                               "covel:plugin-server-code")
    # when strangers and the owner alone decide
    stranger = _decide(api, asked["approvalId"], HTTP_AUTHORIZATION="Bearer nope")
    owner_only = _decide(api, asked["approvalId"], **owner)
    # then both are refused and the request stays pending; the operator may decide
    assert stranger.status_code == 401 and stranger.json()["code"] == "session_owner_required"
    assert owner_only.status_code == 401 and owner_only.json()["code"] == "operator_token_required"
    listed = api.get(f"/api/sessions/{created['id']}/approvals", **owner)
    assert [i["approvalId"] for i in listed.json()["items"]] == [asked["approvalId"]]
    assert api.get(f"/api/sessions/{created['id']}/approvals").status_code == 401
    assert _decide(api, asked["approvalId"], HTTP_AUTHORIZATION=f"Bearer {OPERATOR}").status_code == 200


def test_a_trusted_source_skips_the_code_approvals_but_not_the_action_approval(api, settings):
    # given lantern installed with a receipt from acme/lantern, and acme a trusted source
    from plugins_app.trust import receipt_write

    root = lantern_install(runtimes=NO_HELPER)
    receipt_write(root, "acme/lantern")
    settings.COVEL_TRUSTED_SOURCES = "acme"
    session = _playing_session()
    # then the summary says so, and the turn runs without a code approval
    summary = next(p for p in api.get("/api/plugins").json()["items"] if p["id"] == "lantern")
    assert summary["trust"] == {"source": "acme/lantern", "trustedSource": True, "integrity": "verified", "autoApproved": True}
    item = next(p for p in api.get(f"/api/sessions/{session.id}/plugins").json()["items"] if p["id"] == "lantern")
    assert item["serverCodeApproved"] is True and item["serverCodeApprovedBy"] == "trusted-source"
    frames = stream_read(post_action(api, action_body(session.id)))
    assert frames[-1]["payload"]["committed"] is True and marks_of("watch")
    # an ordinary action still needs the player
    _approval_required(_rpc(api, session.id, {"kind": "action", "pluginId": "lantern", "action": "ping"}), "ping")
    # and a modified package is not trusted any more
    (root / "server" / "entry.py").write_text("# changed\n", encoding="utf-8")
    summary = next(p for p in api.get("/api/plugins").json()["items"] if p["id"] == "lantern")
    assert summary["trust"]["integrity"] == "modified" and summary["trust"]["autoApproved"] is False


def test_subagent_providers_are_asked_with_the_auto_runtimes(api):
    lantern_install()
    session = _playing_session()
    body = action_body(session.id, request_id="r-sub")
    asked = [_approval_required(post_action(api, body), "covel:plugin-server-code")]
    _decide(api, asked[0]["approvalId"])
    for action in ("runtime:lantern/helper", "runtime:lantern/watch"):
        step = _approval_required(post_action(api, body), action)
        _decide(api, step["approvalId"])
    assert stream_read(post_action(api, body))[-1]["payload"]["committed"] is True


def test_plugin_rpc_runtime_of_a_community_plugin_asks_code_then_runtime(api):
    lantern_install(runtimes=NO_HELPER)
    session = _playing_session()
    body = {"kind": "runtime", "pluginId": "lantern", "runtimeId": "lantern/manual", "payload": {"x": 1}}
    for action in ("covel:plugin-server-code", "runtime:lantern/manual"):
        asked = _approval_required(_rpc(api, session.id, body), action)
        decided = _decide(api, asked["approvalId"])
        assert decided.status_code == 200 and "runtimeLoadErrors" not in decided.json()
    assert marks_of("manual") and not marks_of("watch")  # only the granted runtime's module was loaded
    ran = _rpc(api, session.id, body)
    assert ran.status_code == 200, ran.content
    assert ran.json()["runtimeResults"][0]["output"] == {"echo": {"x": 1}, "origin": "manual"}


def test_plugin_rpc_event_asks_the_event_then_each_community_subscriber(api):
    lantern_install(runtimes=NO_HELPER)
    session = _playing_session()
    body = {"kind": "event", "pluginId": "lantern", "topic": "lantern-lit", "payload": {"brightness": 1}}
    for action, scope in (("event:lantern-lit", "session"), ("covel:plugin-server-code", "session"),
                          ("runtime:lantern/listener", "session")):
        asked = _approval_required(_rpc(api, session.id, body), action)
        assert _decide(api, asked["approvalId"], scope=scope).status_code == 200
    response = _rpc(api, session.id, body)
    assert response.status_code == 200 and [j["runtimeId"] for j in response.json()["deferredJobs"]] == ["lantern/listener"]


def test_a_runtime_load_error_is_reported_and_the_grant_stands(api):
    root = lantern_install(runtimes=NO_HELPER)
    (root / "runtimes" / "manual" / "handler.py").write_text("raise RuntimeError('broken at import')\n", encoding="utf-8")
    session = _playing_session()
    body = {"kind": "runtime", "pluginId": "lantern", "runtimeId": "lantern/manual"}
    code = _approval_required(_rpc(api, session.id, body), "covel:plugin-server-code")
    _decide(api, code["approvalId"])
    runtime = _approval_required(_rpc(api, session.id, body), "runtime:lantern/manual")
    decided = _decide(api, runtime["approvalId"]).json()
    assert decided["ok"] is True
    assert decided["runtimeLoadErrors"] == [{"runtimeId": "lantern/manual", "error": "./handler.py: RuntimeError: broken at import"}]
    ran = _rpc(api, session.id, body).json()
    assert ran["runtimeResults"][0]["status"] == "failed"
    assert ran["runtimeResults"][0]["error"]["code"] == "handler_not_loadable"


def test_the_worker_check_refuses_a_runtime_whose_grant_was_revoked_after_admission(api):
    # given grants, then a turn admitted (its row written) but not run yet
    lantern_install(runtimes=NO_HELPER)
    session = _playing_session()
    _grant_code(api, session.id, lambda: post_action(api, action_body(session.id, request_id="r1")))
    from sessions.grants import code_grant_checker
    from turns.engine.run import execution_run
    from turns.engine.trace import RecordingSink
    from turns.models import Execution as ExecutionRow

    execution = ExecutionRow.objects.create(session=session, request_id="r-late", type="submit_actions",
                                            payload={"actions": [{"kind": "say", "text": "hi", "seatId": "main", "source": "player"}]},
                                            trace_id="t-late")
    # when the grants are revoked before the worker runs it
    api.delete(f"/api/sessions/{session.id}/approvals")
    sink = RecordingSink()
    outcome = execution_run(str(execution.pk), sink, code_grants=code_grant_checker(session.id))
    # then the community runtime fails at its load check; the rest of the turn commits
    assert outcome.committed is True and outcome.failed_runtime_ids == ["lantern/watch"]
    [failed] = sink.of_type("runtime.failed")
    assert failed["runtimeId"] == "lantern/watch" and failed["error"]["code"] == "approval_required"
    from plugins_app.models import PluginData

    assert not PluginData.objects.filter(session_id=session.id, plugin_id="lantern", namespace="stats").exists()
