"""POST /api/actions request validation over HTTP: the schema and the eight-step submit_actions check
order (spec 004 §Actions（SSE 桥接）, §submit_actions). A rejected request writes nothing."""
from __future__ import annotations

import json

import pytest

from tests.turns.test_actions_helpers import action_body, post_action, session_make, whisper_plugin_install
from turns.models import Execution

pytestmark = pytest.mark.django_db


def _rejected(response, status: int, code: str) -> dict:
    assert response.status_code == status, response.content
    body = response.json()
    assert body["code"] == code
    assert isinstance(body["error"], str) and body["error"]
    assert Execution.objects.count() == 0
    return body


@pytest.mark.parametrize(
    "mutate",
    [
        pytest.param(lambda b: b.update(locale="en-US"), id="locale"),
        pytest.param(lambda b: b.update(extra=1), id="unknown-top-level-field"),
        pytest.param(lambda b: b.update(type="send_message"), id="removed-type"),
        pytest.param(lambda b: b.update(type="dance"), id="unknown-type"),
        pytest.param(lambda b: b.pop("payload"), id="missing-payload"),
        pytest.param(lambda b: b.pop("requestId"), id="missing-request-id"),
        pytest.param(lambda b: b.update(requestId="req 1; drop"), id="unsafe-request-id"),
        pytest.param(lambda b: b.update(requestId="r" * 129), id="long-request-id"),
        pytest.param(lambda b: b.update(sessionId="../etc"), id="unsafe-session-id"),
        pytest.param(lambda b: b.update(requestId=12), id="numeric-request-id"),
        pytest.param(lambda b: b["payload"].update(actions=[]), id="no-actions"),
        pytest.param(lambda b: b["payload"].update(actions=[{"kind": "say", "text": "x"}] * 9), id="nine-actions"),
        pytest.param(lambda b: b["payload"].update(mood="happy"), id="unknown-payload-field"),
        pytest.param(lambda b: b["payload"]["actions"][0].update(source="system"), id="action-source"),
        pytest.param(lambda b: b["payload"]["actions"][0].update(color="red"), id="unknown-action-field"),
        pytest.param(lambda b: b["payload"].update(actions=[{"kind": "say", "text": "a" * 60_000}, {"kind": "say", "text": "b" * 40_001}]), id="text-over-100000"),
        pytest.param(lambda b: b.update(type="retry_runtime", payload={}), id="retry-runtime-without-id"),
        pytest.param(lambda b: b.update(type="retry_runtime", payload={"runtimeId": "a/b/c"}), id="bad-runtime-id"),
        pytest.param(lambda b: b.update(type="retry_runtime", payload={"runtimeId": "has space"}), id="unsafe-runtime-id"),
        pytest.param(lambda b: b.update(type="retry_failed_runtimes", payload={"runtimeIds": ["a/b", "a/b"], "retryFromTurnId": "t1"}), id="repeated-runtime-ids"),
        pytest.param(lambda b: b.update(type="retry_failed_runtimes", payload={"runtimeIds": [f"p/r{i}" for i in range(21)], "retryFromTurnId": "t1"}), id="21-runtime-ids"),
        pytest.param(lambda b: b.update(type="retry_failed_runtimes", payload={"runtimeIds": ["a/b"]}), id="retry-failed-without-source"),
        pytest.param(lambda b: b.update(type="retry_turn", payload={"actions": []}), id="retry-turn-with-actions"),
        pytest.param(lambda b: b.update(type="start_session", payload={"loreOverride": "x" * 500_001}), id="lore-too-long"),
    ],
)
def test_rejects_malformed_requests_with_invalid_action_request(api, mutate):
    # given
    session = session_make()
    body = action_body(session.id)
    mutate(body)
    # when
    response = post_action(api, body)
    # then
    payload = _rejected(response, 400, "invalid_action_request")
    assert payload["details"]["issues"]


def test_accepts_the_total_text_limit_exactly(api, django_capture_on_commit_callbacks):
    session = session_make(characters=[("hero", "Hero", "player")])
    body = action_body(session.id, actions=[{"kind": "say", "text": "a" * 60_000}, {"kind": "say", "text": "b" * 40_000}])
    with django_capture_on_commit_callbacks(execute=False):
        response = post_action(api, body)
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/event-stream")
    assert Execution.objects.get().status == Execution.STATUS_QUEUED


def test_unknown_session_is_session_not_found(api):
    response = post_action(api, action_body("no-such-session"))
    body = _rejected(response, 404, "session_not_found")
    assert body["error"] == "Session not found: no-such-session"


def test_schema_is_checked_before_the_session(api):
    response = post_action(api, action_body("no-such-session", locale="zh-CN"))
    _rejected(response, 400, "invalid_action_request")


@pytest.mark.parametrize(
    ("seats", "action", "status", "code"),
    [
        pytest.param(None, {"kind": "say", "text": "hi", "seatId": "nope"}, 404, "seat_not_found", id="2-unknown-seat"),
        pytest.param([{"id": "gm", "controller": "human", "role": "host", "characters": []}], {"kind": "narrate", "text": "rain"}, 404, "seat_not_found", id="2-no-main-seat"),
        pytest.param([{"id": "main", "controller": "ai", "role": "player", "characters": "auto"}], {"kind": "say", "text": "hi", "seatId": "main"}, 409, "seat_not_human", id="3-ai-seat"),
        pytest.param(None, {"kind": "juggle", "text": "hi"}, 409, "unknown_action_kind", id="4-unknown-kind"),
        pytest.param(None, {"kind": "other-plugin/whisper", "text": "hi"}, 409, "unknown_action_kind", id="4-inactive-plugin-kind"),
        pytest.param(None, {"kind": "narrate", "text": "The rain falls."}, 409, "action_kind_not_allowed", id="5-player-narrates"),
        pytest.param([{"id": "main", "controller": "human", "role": "player", "characters": "auto"}, {"id": "eye", "controller": "human", "role": "spectator", "characters": []}], {"kind": "say", "text": "hi", "seatId": "eye"}, 409, "action_kind_not_allowed", id="5-spectator"),
        pytest.param(None, {"kind": "say", "text": "hi", "actorId": "villain"}, 409, "actor_not_bound", id="6-foreign-actor"),
        pytest.param(None, {"kind": "command", "text": "/roll", "actorId": "hero"}, 409, "actor_not_bound", id="6-actor-on-command"),
        pytest.param(None, {"kind": "say"}, 400, "invalid_action", id="7-say-without-text"),
        pytest.param(None, {"kind": "say", "text": "   "}, 400, "invalid_action", id="7-blank-text"),
        pytest.param(None, {"kind": "command", "text": "roll"}, 400, "invalid_action", id="7-command-without-slash"),
        pytest.param([{"id": "gm", "controller": "human", "role": "host", "characters": []}, {"id": "main", "controller": "human", "role": "player", "characters": "auto"}], {"kind": "advance", "text": "go", "seatId": "gm"}, 400, "invalid_action", id="7-advance-with-text"),
        pytest.param(None, {"kind": "act", "interaction": {"turnId": "t1", "interactionId": "f1", "type": "form"}, "text": "hi", "fields": {}}, 400, "invalid_action", id="7-answer-with-text"),
        pytest.param(None, {"kind": "say", "text": "hi", "fields": {"a": 1}}, 400, "invalid_action_fields", id="8-fields-on-base-kind"),
    ],
)
def test_submit_actions_checks_in_spec_order(api, seats, action, status, code):
    # given: one player character bound to the main seat, and a villain bound to no seat
    session = session_make(seats=seats, characters=[("hero", "Hero", "player"), ("villain", "Villain", "npc")])
    # when
    response = post_action(api, action_body(session.id, actions=[action]))
    # then
    _rejected(response, status, code)


def test_first_failing_action_decides_the_code(api):
    session = session_make(characters=[("hero", "Hero", "player")])
    actions = [{"kind": "say", "text": "ok"}, {"kind": "narrate", "text": "x"}, {"kind": "juggle", "text": "y"}]
    body = _rejected(post_action(api, action_body(session.id, actions=actions)), 409, "action_kind_not_allowed")
    assert "actions[1]" in body["error"]


def test_answers_must_belong_to_one_turn(api):
    session = session_make(characters=[("hero", "Hero", "player")])
    actions = [
        {"kind": "act", "interaction": {"turnId": "t1", "interactionId": "a", "type": "form"}, "fields": {"x": 1}},
        {"kind": "act", "interaction": {"turnId": "t2", "interactionId": "b", "type": "form"}, "fields": {"y": 1}},
    ]
    _rejected(post_action(api, action_body(session.id, actions=actions)), 400, "invalid_action")


def test_answer_kind_must_match_the_interaction(api):
    from turns.models import InteractionRecord

    session = session_make(characters=[("hero", "Hero", "player")])
    InteractionRecord.objects.create(session=session, interaction_id="path", turn_id="t1", type="choice", spec={})
    action = {"kind": "act", "interaction": {"turnId": "t1", "interactionId": "path", "type": "choice"},
              "fields": {"selectedId": "forest"}}
    _rejected(post_action(api, action_body(session.id, actions=[action])), 400, "invalid_action")


class TestPluginActionKinds:
    @pytest.fixture(autouse=True)
    def _whisper(self):
        whisper_plugin_install()

    def test_plugin_kind_fields_must_match_its_schema(self, api):
        session = session_make(plugins=("whisper-pack",), characters=[("hero", "Hero", "player")])
        action = {"kind": "whisper-pack/whisper", "text": "psst", "fields": {"target": 3}}
        body = _rejected(post_action(api, action_body(session.id, actions=[action])), 400, "invalid_action_fields")
        assert body["details"]["issues"][0]["path"] == ["target"]

    def test_plugin_kind_without_required_fields_is_rejected(self, api):
        session = session_make(plugins=("whisper-pack",), characters=[("hero", "Hero", "player")])
        action = {"kind": "whisper-pack/whisper", "text": "psst"}
        _rejected(post_action(api, action_body(session.id, actions=[action])), 400, "invalid_action_fields")

    def test_plugin_kind_needs_the_plugin_active(self, api):
        session = session_make(plugins=("narrator",), characters=[("hero", "Hero", "player")])
        action = {"kind": "whisper-pack/whisper", "fields": {"target": "guard"}}
        _rejected(post_action(api, action_body(session.id, actions=[action])), 409, "unknown_action_kind")

    def test_valid_plugin_kind_opens_the_stream(self, api, django_capture_on_commit_callbacks):
        session = session_make(plugins=("whisper-pack",), characters=[("hero", "Hero", "player")])
        action = {"kind": "whisper-pack/whisper", "fields": {"target": "guard"}}
        with django_capture_on_commit_callbacks(execute=False) as callbacks:
            response = post_action(api, action_body(session.id, actions=[action]))
        assert response.status_code == 200
        assert len(callbacks) == 1
        stored = Execution.objects.get()
        assert stored.payload["actions"] == [
            {"kind": "whisper-pack/whisper", "seatId": "main", "source": "player", "actorId": "hero",
             "fields": {"target": "guard"}}
        ]


def test_resolves_seat_and_actor_and_enqueues_after_commit(api, django_capture_on_commit_callbacks):
    # given
    session = session_make(characters=[("hero", "Hero", "player")])
    body = action_body(session.id, actions=[{"kind": "say", "text": "Hello"}, {"kind": "command", "text": "/look"}],
                       request_id="req-001")
    body["payload"]["inputMessageId"] = "msg-1"
    # when
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = post_action(api, body)
    # then
    assert response.status_code == 200
    assert len(callbacks) == 1  # the worker task, only once the row committed
    execution = Execution.objects.get()
    assert (execution.request_id, execution.type, execution.status) == ("req-001", "submit_actions", "queued")
    assert execution.input_message_id == "msg-1"
    assert execution.payload == {
        "actions": [
            {"kind": "say", "seatId": "main", "source": "player", "actorId": "hero", "text": "Hello"},
            {"kind": "command", "seatId": "main", "source": "player", "text": "/look"},
        ],
        "inputMessageId": "msg-1",
    }


def test_start_session_needs_active_plugins(api):
    session = session_make(plugins=())
    body = action_body(session.id, type="start_session", payload={})
    _rejected(post_action(api, body), 400, "no_active_plugins")


def test_ended_session_is_not_active(api):
    session = session_make(status="ended", characters=[("hero", "Hero", "player")])
    _rejected(post_action(api, action_body(session.id)), 409, "session_not_active")


def test_same_request_id_with_another_body_conflicts(api, django_capture_on_commit_callbacks):
    session = session_make(characters=[("hero", "Hero", "player")])
    with django_capture_on_commit_callbacks(execute=False):
        first = post_action(api, action_body(session.id, request_id="req-9"))
    assert first.status_code == 200
    response = post_action(api, action_body(session.id, request_id="req-9", actions=[{"kind": "say", "text": "Other"}]))
    assert response.status_code == 409
    assert response.json()["code"] == "request_id_conflict"
    assert Execution.objects.count() == 1


def test_malformed_json_is_rejected(api):
    response = api.post("/api/actions", data="{nope", content_type="application/json")
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_json_body"
    assert json.loads(response.content)["error"]


def test_invalid_payload_message_names_the_field_once(api):
    # given: a submit_actions payload without its actions
    session = session_make()
    body = action_body(session.id)
    body["payload"] = {"text": "hi"}
    # when
    response = post_action(api, body)
    # then
    payload = _rejected(response, 400, "invalid_action_request")
    assert "payload.actions: Field required" in payload["error"]
    assert "payload.payload" not in payload["error"]
    assert ["payload", "actions"] in [issue["path"] for issue in payload["details"]["issues"]]
