"""Suspend and resume over HTTP (spec 004 §Suspend / Resume; spec 000 suspend). A community plugin
with no server code, ``gatekeeper``, runs an agent post-turn runtime on the HTTP model peer: it
creates a character and suspends in the same reply, asking which gate to open; the resume continues
the saved conversation. Checked: the suspension row, ``turn.suspended`` on the stream, the buffered
write held back until the resume, the player turn counted once (on the last resume, or when
abandoned), every rejection code, staleness reasons produced for real, and re-suspension chains."""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from django.conf import settings

from tests.sessions.grants_support import community_grants_allow
from tests.model_peer import GameBrain, ModelPeer, Reply
from tests.turns.test_actions_helpers import action_body, post_action, session_make, stream_read
from tests.turns.test_real_model_game import llm_toml

pytestmark = pytest.mark.django_db(transaction=True)

GATEKEEPER = textwrap.dedent("""\
    ---
    id: gatekeeper
    kind: plugin
    version: 1.0.0
    description: Asks the player which gate to open, then records the warden (test plugin).
    requires:
      - narrative-engine@1
    runtime:
      type: agent
      schedule:
        stage: post-turn
      io:
        visibility: system
      agent:
        model: plugin
        tools:
          builtin:
            - sync-characters
            - suspend
    ---
    Decide with the player which gate opens. Create the warden, then ask with suspend.
    """)
WARDEN = "Warden Sal"


class GateBrain(GameBrain):
    """Gatekeeper: create the warden + suspend; after an answer, suspend again ``chain`` more times,
    then runtime-done. Suspends only on the first ``suspend_turns`` turns."""

    def __init__(self, *, chain: int = 0, suspend_turns: int = 1) -> None:
        super().__init__()
        self.chain = chain
        self.suspend_turns = suspend_turns
        self.turns_seen = 0
        self.answers: list[dict] = []

    def __call__(self, body):
        names = [t["function"]["name"] for t in body.get("tools") or []]
        if "suspend" not in names:
            return super().__call__(body)
        messages = body["messages"]
        last = messages[-1]
        ask = ("suspend", {"reason": "Which gate?", "fields": [
            {"type": "select", "name": "gate", "label": "Gate", "options": [{"value": "north", "label": "North"},
                                                                         {"value": "south", "label": "South"}]}]})
        if last.get("role") != "tool":
            self.turns_seen += 1
            if self.turns_seen > self.suspend_turns:
                return Reply(calls=[("runtime-done", {})])
            return Reply(calls=[("sync-characters", {"creates": [{"name": WARDEN, "type": "npc"}]}), ask])
        answer = json.loads(last["content"])
        self.answers.append(answer)
        if self.chain > 0:
            self.chain -= 1
            return Reply(calls=[ask])
        return Reply(calls=[("runtime-done", {})])


@pytest.fixture
def gate(tmp_path):
    root = Path(settings.COVEL_HOME) / "plugins" / "gatekeeper"
    root.mkdir(parents=True, exist_ok=True)
    (root / "PLUGIN.md").write_text(GATEKEEPER, encoding="utf-8")
    from plugins_app.registry import registry_reset

    registry_reset()
    yield
    registry_reset()


def _game(tmp_path, settings_, brain):
    peer = ModelPeer(brain=brain)
    peer.__enter__()
    settings_.COVEL_LLM_TOML = llm_toml(tmp_path, peer)
    session = session_make(plugins=("narrator", "gatekeeper"), characters=[("hero", "Hero", "player")])
    community_grants_allow(session, "gatekeeper", runtime_ids=("gatekeeper",))
    return peer, session


def _turn(api, session, text="I walk to the gates."):
    frames = stream_read(post_action(api, action_body(session.id, actions=[{"kind": "say", "text": text}])))
    assert frames[-1]["type"] == "execution.completed" and frames[-1]["payload"]["committed"] is True, \
        [(f["type"], f["payload"]) for f in frames if f["type"] in ("error.occurred", "runtime.failed")]
    return frames


def _auth(session):
    return {"HTTP_X_SESSION_TOKEN": session.owner_token} if getattr(session, "owner_token", None) else {}


def _get(api, path, session):
    return api.get(path, **_auth(session))


def _resume(api, session, suspension_id, body):
    return api.post(f"/api/sessions/{session.id}/suspensions/{suspension_id}/resume", data=json.dumps(body),
                    content_type="application/json", **_auth(session))


def _characters(api, session):
    return [c["name"] for c in _get(api, f"/api/sessions/{session.id}/characters", session).json()["items"]]


def _turns(session):
    session.refresh_from_db()
    return session.completed_player_turns


def test_a_suspended_runtime_is_saved_then_resumed_and_the_turn_counts_once(api, tmp_path, settings, gate):
    brain = GateBrain()
    peer, session = _game(tmp_path, settings, brain)
    try:
        # when a turn runs the gatekeeper, which creates the warden and suspends
        frames = _turn(api, session)
        suspended = [f for f in frames if f["type"] == "turn.suspended"]
        assert len(suspended) == 1, [f["type"] for f in frames]
        sid = suspended[0]["payload"]["suspensionId"]
        # then the suspension is listed with its schema, the write waits and the turn does not count
        items = _get(api, f"/api/sessions/{session.id}/suspensions", session).json()["items"]
        assert [i["id"] for i in items] == [sid]
        assert items[0]["runtimeId"] == "gatekeeper" and items[0]["reason"] == "Which gate?"
        assert items[0]["resumeSchema"]["properties"]["gate"]["enum"] == ["north", "south"]
        assert "continuation" not in json.dumps(items)
        assert WARDEN not in _characters(api, session)
        assert _turns(session) == 0

        # when data outside the schema is sent, nothing is claimed
        bad = _resume(api, session, sid, {"data": {"gate": "east"}})
        assert bad.status_code == 400 and bad.json()["code"] == "resume_data_invalid", bad.content
        assert _resume(api, session, sid, {"gate": "north"}).status_code == 400  # not {data}

        # when the player answers
        ok = _resume(api, session, sid, {"data": {"gate": "north"}})
        assert ok.status_code == 200, ok.content
        body = ok.json()
        assert body["result"]["status"] == "success"
        assert "turn.resumed" in [e["type"] for e in body["events"]]
        # then the model got the answer under the suspend call's id, the buffered write committed
        # with the resumed run, the turn counted once, and the suspension is gone
        assert brain.answers == [{"summary": "The player answered.", "data": {"gate": "north"}}]
        assert _characters(api, session).count(WARDEN) == 1
        assert _turns(session) == 1
        assert _get(api, f"/api/sessions/{session.id}/suspensions", session).json()["items"] == []
        again = _resume(api, session, sid, {"data": {"gate": "north"}})
        assert again.status_code == 409
        assert _resume(api, session, "susp_nope", {"data": {"gate": "north"}}).status_code == 404
    finally:
        peer.__exit__()


def test_a_resume_that_suspends_twice_more_counts_one_player_turn(api, tmp_path, settings, gate):
    brain = GateBrain(chain=2)
    peer, session = _game(tmp_path, settings, brain)
    try:
        frames = _turn(api, session)
        sid = next(f for f in frames if f["type"] == "turn.suspended")["payload"]["suspensionId"]
        for answer in ("north", "south"):
            response = _resume(api, session, sid, {"data": {"gate": answer}})
            assert response.status_code == 200, response.content
            result = response.json()["result"]
            assert result["status"] == "suspended"
            assert _turns(session) == 0 and WARDEN not in _characters(api, session)
            assert _resume(api, session, sid, {"data": {"gate": answer}}).status_code == 409  # the old id is processed
            sid = result["output"]["suspensionId"]
        final = _resume(api, session, sid, {"data": {"gate": "north"}})
        assert final.status_code == 200 and final.json()["result"]["status"] == "success", final.content
        assert _turns(session) == 1
        assert _characters(api, session).count(WARDEN) == 1
    finally:
        peer.__exit__()


def test_a_suspension_is_outdated_once_the_session_moved_on(api, tmp_path, settings, gate):
    peer, session = _game(tmp_path, settings, GateBrain(suspend_turns=1))
    try:
        sid = next(f for f in _turn(api, session) if f["type"] == "turn.suspended")["payload"]["suspensionId"]
        _turn(api, session, "I wait.")  # the gatekeeper does not suspend this time: the turn counts
        assert _turns(session) == 1
        response = _resume(api, session, sid, {"data": {"gate": "north"}})
        assert response.status_code == 409 and response.json()["code"] == "suspension_outdated", response.content
        assert response.json()["details"]["reason"] == "session-moved-on"
        assert _get(api, f"/api/sessions/{session.id}/suspensions", session).json()["items"] == []
        assert WARDEN not in _characters(api, session)
    finally:
        peer.__exit__()


def test_a_suspension_is_outdated_when_a_record_it_would_write_changed(api, tmp_path, settings, gate):
    peer, session = _game(tmp_path, settings, GateBrain())
    try:
        sid = next(f for f in _turn(api, session) if f["type"] == "turn.suspended")["payload"]["suspensionId"]
        # someone else writes the character the suspended run would create
        written = api.post(f"/api/sessions/{session.id}/characters", data=json.dumps({"id": "npc-warden-sal", "name": WARDEN, "type": "npc"}),
                           content_type="application/json", **_auth(session))
        assert written.status_code in (200, 201), written.content
        response = _resume(api, session, sid, {"data": {"gate": "north"}})
        assert response.status_code == 409 and response.json()["details"]["reason"] == "data-changed", response.content
        assert _characters(api, session).count(WARDEN) == 1
    finally:
        peer.__exit__()


def test_abandoning_the_last_suspension_finishes_its_turn(api, tmp_path, settings, gate):
    peer, session = _game(tmp_path, settings, GateBrain())
    try:
        sid = next(f for f in _turn(api, session) if f["type"] == "turn.suspended")["payload"]["suspensionId"]
        response = api.delete(f"/api/sessions/{session.id}/suspensions/{sid}", **_auth(session))
        assert response.status_code == 200 and response.json() == {"ok": True, "suspensionId": sid}
        assert _turns(session) == 1
        assert WARDEN not in _characters(api, session)
        assert api.delete(f"/api/sessions/{session.id}/suspensions/{sid}", **_auth(session)).status_code == 404
        assert _resume(api, session, sid, {"data": {"gate": "north"}}).status_code == 404
    finally:
        peer.__exit__()


def test_a_community_runtime_resumes_only_with_its_grants(api, tmp_path, settings, gate):
    peer, session = _game(tmp_path, settings, GateBrain())
    try:
        sid = next(f for f in _turn(api, session) if f["type"] == "turn.suspended")["payload"]["suspensionId"]
        from sessions.models import Approval

        Approval.objects.filter(session_id=session.pk, plugin_id="gatekeeper").delete()  # the grants are gone
        response = _resume(api, session, sid, {"data": {"gate": "north"}})
        assert response.status_code == 202 and response.json()["status"] == "approval-required", response.content
        # nothing was claimed: after the grant the same request resumes
        community_grants_allow(session, "gatekeeper", runtime_ids=("gatekeeper",))
        assert _resume(api, session, sid, {"data": {"gate": "north"}}).status_code == 200
    finally:
        peer.__exit__()


def test_the_sweep_abandons_expired_suspensions_and_releases_stale_claims(api, tmp_path, settings, gate):
    from datetime import timedelta

    from django.utils import timezone

    from turns.models import Suspension

    settings.COVEL_SUSPENSION_SWEEP_SECONDS = 0
    peer, session = _game(tmp_path, settings, GateBrain(suspend_turns=2))
    try:
        first = next(f for f in _turn(api, session) if f["type"] == "turn.suspended")["payload"]["suspensionId"]
        # a process died mid-resume long ago: its claim is released by the sweep, then it resumes
        Suspension.objects.filter(suspension_id=first).update(status="resuming", resolved_at=timezone.now() - timedelta(hours=1))
        assert [i["id"] for i in _get(api, f"/api/sessions/{session.id}/suspensions", session).json()["items"]] == [first]
        assert Suspension.objects.get(suspension_id=first).status == "pending"
        assert _resume(api, session, first, {"data": {"gate": "south"}}).status_code == 200
        assert _turns(session) == 1
        # a suspension past its expiry is abandoned by the next list: its turn finishes and counts
        second = next(f for f in _turn(api, session) if f["type"] == "turn.suspended")["payload"]["suspensionId"]
        row = Suspension.objects.get(suspension_id=second)
        row.payload = {**row.payload, "expiresAt": (timezone.now() - timedelta(seconds=1)).isoformat()}
        row.save(update_fields=["payload"])
        assert _get(api, f"/api/sessions/{session.id}/suspensions", session).json()["items"] == []
        assert _turns(session) == 2
    finally:
        peer.__exit__()



def test_an_embedded_start_releases_every_claim_a_killed_run_left(api, tmp_path, settings, gate):
    from django.utils import timezone

    from turns import tasks
    from turns.models import Suspension

    peer, session = _game(tmp_path, settings, GateBrain(suspend_turns=1))
    try:
        first = next(f for f in _turn(api, session) if f["type"] == "turn.suspended")["payload"]["suspensionId"]
        # the previous process died a moment ago while resuming it (a fresh claim: the age rule keeps it)
        Suspension.objects.filter(suspension_id=first).update(status="resuming", resolved_at=timezone.now())
        assert _resume(api, session, first, {"data": {"gate": "south"}}).status_code == 409
        # when: the start-up task of the next embedded process runs
        tasks.release_suspension_claims()
        # then: hosted processes leave claims to the age rule; the one embedded process frees them all
        if settings.STORE_BACKEND == "pg":
            assert Suspension.objects.get(suspension_id=first).status == "resuming"
            return
        assert Suspension.objects.get(suspension_id=first).status == "pending"
        assert _resume(api, session, first, {"data": {"gate": "south"}}).status_code == 200
        assert _turns(session) == 1
    finally:
        peer.__exit__()

TOLLBOOTH = textwrap.dedent("""\
    ---
    id: tollbooth
    kind: plugin
    version: 1.0.0
    description: Asks for a toll after each story turn (test plugin with a function runtime).
    requires:
      - narrative-engine@1
    contributes:
      data:
        tolls:
          schema: ./toll.schema.json
    runtime:
      type: function
      schedule:
        stage: post-turn
      io:
        visibility: system
      function:
        handler: ./handler.py
    ---
    Test plugin.
    """)
TOLL_HANDLER = textwrap.dedent('''\
    def handle(ctx):
        if ctx.resume_data is None:
            ctx.plugin_data.set("tolls", "asked", {"turn": ctx.logical_turn})
            return {"outcome": "suspended", "reason": "Pay the toll?",
                    "resumeSchema": {"type": "object", "required": ["coins"],
                                     "properties": {"coins": {"type": "integer", "minimum": 1, "maximum": 9}},
                                     "additionalProperties": False}}
        ctx.plugin_data.set("tolls", "paid", {"coins": ctx.resume_data["coins"], "from": ctx.resumed_from_suspension_id})
        return {"paid": ctx.resume_data["coins"]}
    ''')


def test_a_function_runtime_suspends_and_its_handler_runs_again_with_the_answer(api, tmp_path, settings):
    from plugins_app.registry import registry_reset

    root = Path(settings.COVEL_HOME) / "plugins" / "tollbooth"
    root.mkdir(parents=True, exist_ok=True)
    (root / "PLUGIN.md").write_text(TOLLBOOTH, encoding="utf-8")
    (root / "handler.py").write_text(TOLL_HANDLER, encoding="utf-8")
    (root / "toll.schema.json").write_text('{"type": "object"}', encoding="utf-8")
    registry_reset()
    with ModelPeer() as peer:
        settings.COVEL_LLM_TOML = llm_toml(tmp_path, peer)
        session = session_make(plugins=("narrator", "tollbooth"), characters=[("hero", "Hero", "player")])
        community_grants_allow(session, "tollbooth", runtime_ids=("tollbooth",))
        frames = _turn(api, session)
        assert [f for f in frames if f["type"] == "turn.suspended"], [
            (f["type"], f["payload"].get("runtimeId"), f["payload"].get("error")) for f in frames if f["type"].startswith("runtime")]
        sid = next(f for f in frames if f["type"] == "turn.suspended")["payload"]["suspensionId"]
        data = lambda: _get(api, f"/api/sessions/{session.id}/plugin-data/tollbooth/tolls", session).json()
        assert _turns(session) == 0 and data().get("items", []) == []  # the buffered write waits
        assert _resume(api, session, sid, {"data": {"coins": 12}}).json()["code"] == "resume_data_invalid"
        response = _resume(api, session, sid, {"data": {"coins": 3}})
        assert response.status_code == 200 and response.json()["result"]["output"] == {"paid": 3}, response.content
        rows = {item["key"]: item["value"] for item in data()["items"]}
        assert rows == {"asked": {"turn": 1}, "paid": {"coins": 3, "from": sid}}
        assert _turns(session) == 1
    registry_reset()
