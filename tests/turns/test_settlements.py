"""Dimension settlements end to end with world-init's tracker (issue 25; spec 004 §维度编辑与待结算恢复,
§GET /api/sessions/:id/view): a concurrent edit makes the tracker's settlement conflict, the receipt
stays pending-settlement and shows in /view; the player resolves one manually, skips another,
retries a third from its source turn; a stale editor write is refused in the output, one the commit
finds answers 409; the next turn retries a pending source by itself, and ends with an abortReason
when the retry cannot settle it. Session ``yanhui-ferry`` on the offline scripted provider
(tests/plugins_app/builtin/play_support.py); the concurrent writer is the test plugin ``meddler``."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from django.conf import settings as django_settings

from plugins_app.registry import registry_reset
from sessions.models import ChatMessage, DimensionValue, Session
from tests.plugins_app.builtin.play_support import _auth, act, get_json, play
from tests.turns.test_actions_helpers import stream_read
from turns.models import SessionEvent

pytestmark = pytest.mark.django_db(transaction=True)

BUILTIN = Path(__file__).resolve().parents[2] / "plugins_app" / "builtin"

MEDDLER_MD = """\
---
id: meddler
kind: plugin
version: 1.0.0
description: Edits the session's dimensions behind the turn's back (test plugin).
entry: ./entry.py
contributes:
  hooks:
    - event: PreRuntime
runtime:
  type: function
  schedule:
    stage: post-turn
    trigger:
      type: auto
  function:
    handler: ./handler.py
---
Meddler.
"""

# Another writer (think: a second server process) moves every dimension's version while the turn
# runs, after the turn froze its snapshot: the turn's settlement then meets a version conflict.
# The same writer strikes while the dimension editor runs (its PreRuntime hook, after the editor's
# snapshot was frozen), when COVEL_HOME/meddle-editor exists: the editor's commit meets the conflict.
MEDDLER_ENTRY = '''
import os
from pathlib import Path


def _pre_runtime(event):
    if event["runtimeId"] == "world-init/edit-dimensions" and (Path(os.environ["COVEL_HOME"]) / "meddle-editor").exists():
        from django.db.models import F
        from sessions.models import DimensionValue

        DimensionValue.objects.filter(session_id=event["sessionId"]).update(version=F("version") + 1)
    return None


def register(api):
    api.register_hook("PreRuntime", _pre_runtime)
'''

MEDDLER_PY = '''
import os
from pathlib import Path


def handle(ctx):
    if (Path(os.environ["COVEL_HOME"]) / "meddle").exists():
        from django.db.models import F
        from sessions.models import DimensionValue

        DimensionValue.objects.filter(session_id=ctx.session_id).update(version=F("version") + 1)
    return None
'''


@pytest.fixture(autouse=True)
def builtin_with_meddler(settings, tmp_path):
    target = tmp_path / "builtin"
    shutil.copytree(BUILTIN, target, ignore=shutil.ignore_patterns("__pycache__"))
    (target / "meddler").mkdir()
    (target / "meddler" / "PLUGIN.md").write_text(MEDDLER_MD, encoding="utf-8")
    (target / "meddler" / "handler.py").write_text(MEDDLER_PY, encoding="utf-8")
    (target / "meddler" / "entry.py").write_text(MEDDLER_ENTRY, encoding="utf-8")
    settings.COVEL_BUILTIN_PLUGINS_DIR = str(target)
    registry_reset()
    yield
    _meddle(False)
    registry_reset()


def _meddle(on: bool) -> None:
    flag = Path(django_settings.COVEL_HOME) / "meddle"
    if on:
        flag.write_text("1")
    else:
        flag.unlink(missing_ok=True)


@pytest.fixture
def played(client):
    played = play(client, "yanhui-ferry", says=[], name="林照")
    session = Session.objects.get(pk=played.id)
    session.active_plugins = [*session.active_plugins, "meddler"]
    session.save(update_fields=["active_plugins"])
    return played


def _say(client, played, text, *, meddle=False):
    _meddle(meddle)
    try:
        frames = act(client, played, "submit_actions", {"actions": [{"kind": "say", "text": text}]})
    finally:
        _meddle(False)
    return frames


def _view(client, played):
    return get_json(client, played, f"/api/sessions/{played.id}/view")


def _rpc(client, played, body):
    return client.post(f"/api/sessions/{played.id}/plugin-rpc", data=json.dumps(body), content_type="application/json",
                       **_auth(played))


def _pending(view):
    return [s for s in view["dimensionSettlements"] if s["status"] == "pending-settlement"]


def _editor(view, payload):
    recovery = view["dimensionRecovery"]
    return {"kind": "runtime", "pluginId": view["dimensionProviderPluginId"], "runtimeId": recovery["editorRuntimeId"],
            "payload": payload}


def _pending_after(client, played, text):
    """Play one turn during which another writer edits the dimensions; return its pending receipt."""
    frames = _say(client, played, text, meddle=True)
    assert frames[-1]["payload"]["committed"] is True  # the narrative stays committed
    [pending] = _pending(_view(client, played))
    assert pending["error"]["code"] == "dimension-version-conflict" and pending["version"] == 1
    assert set(pending) == {"source", "status", "sourceTurnId", "version", "error"}
    assert set(pending["source"]) == {"resultId", "turnNumber"}
    return pending


def _versions(played):
    return dict(DimensionValue.objects.filter(session_id=played.id).values_list("dimension_id", "version"))


def test_a_conflicted_settlement_stays_pending_and_the_player_repairs_it(client, played):
    view = _view(client, played)
    assert view["dimensionProviderPluginId"] == "world-init"
    assert view["dimensionRecovery"] == {"editorRuntimeId": "world-init/edit-dimensions",
                                         "trackerRuntimeId": "world-init/dimension-tracker"}
    assert [s["status"] for s in view["dimensionSettlements"]] == ["settled"]  # the opening
    before = _versions(played)

    # 1. a concurrent edit: the settlement conflicts, no settled value is applied, the receipt is pending
    manual = _pending_after(client, played, "我去码头看看那条船。")
    after = _versions(played)
    assert after == {k: v + 1 for k, v in before.items()}  # only the other writer's bumps
    [event] = SessionEvent.objects.filter(session_id=played.id, type="dimensions.settlement.changed")
    assert event.payload["settlement"] == manual and event.payload["providerPluginId"] == "world-init"
    # a stale edit is refused in the output and writes nothing
    stale = _rpc(client, played, _editor(view, {"updates": [{"id": "caseFile", "expectedVersion": 1, "value": {}}]}))
    assert stale.status_code == 200, stale.content
    [item] = stale.json()["runtimeResults"]
    assert item["output"]["applied"] is False and item["output"]["code"] == "dimension-version-conflict"
    assert item["output"]["currentVersions"] == after and _versions(played) == after
    # skipping with corrections, or half a source, fails the editor and writes nothing
    for bad in ({"updates": [{"id": "caseFile", "expectedVersion": after["caseFile"], "value": {}}],
                 "resultId": manual["source"]["resultId"], "resolution": "skipped"},
                {"updates": [], "resultId": manual["source"]["resultId"]}):
        refused = _rpc(client, played, _editor(view, bad))
        assert refused.status_code == 200 and refused.json()["runtimeResults"][0]["status"] == "failed", refused.content
        assert refused.json()["runtimeResults"][0]["error"]["code"] == "invalid-input"
    # resolve it manually (updates: [] confirms)
    done = _rpc(client, played, _editor(view, {"updates": [], "resultId": manual["source"]["resultId"], "resolution": "manual"}))
    assert done.status_code == 200 and done.json()["runtimeResults"][0]["output"]["applied"] is True, done.content

    # 2. another conflicted source, skipped
    skipped = _pending_after(client, played, "我向裴照打听押纲官的下落。")
    done = _rpc(client, played, _editor(view, {"updates": [], "resultId": skipped["source"]["resultId"], "resolution": "skipped"}))
    assert done.status_code == 200, done.content

    # 3. a third, retried from its source turn: the tracker reads the stored narrative and settles it
    retried = _pending_after(client, played, "我去巡检司看看。")
    retry = _rpc(client, played, {"kind": "runtime", "pluginId": "world-init", "runtimeId": view["dimensionRecovery"]["trackerRuntimeId"],
                                  "payload": {}, "retryFromTurnId": retried["sourceTurnId"]})
    assert retry.status_code == 200, retry.content

    view = _view(client, played)
    by_id = {s["source"]["resultId"]: s for s in view["dimensionSettlements"]}
    assert len(by_id) == 4 and not _pending(view)
    got = by_id[manual["source"]["resultId"]]
    assert got["status"] == "manual" and got["version"] == 2 and "error" not in got
    assert got["sourceTurnId"] == manual["sourceTurnId"]
    assert by_id[skipped["source"]["resultId"]]["status"] == "skipped"
    assert by_id[retried["source"]["resultId"]]["status"] in ("settled", "no-change")
    assert by_id[retried["source"]["resultId"]]["sourceTurnId"] == retried["sourceTurnId"]
    statuses = [e.payload["settlement"]["status"] for e in
                SessionEvent.objects.filter(session_id=played.id, type="dimensions.settlement.changed").order_by("seq")]
    assert statuses == ["pending-settlement", "manual", "pending-settlement", "skipped", "pending-settlement"]
    # an ended source is never settled again
    again = _rpc(client, played, _editor(view, {"updates": [], "resultId": skipped["source"]["resultId"], "resolution": "manual"}))
    assert again.json()["runtimeResults"][0]["output"]["code"] == "settlement-not-pending"
    _edit_meets_a_newer_version_at_commit(client, played)
    # a bound provider that no longer runs: its id and receipts stay, dimensionRecovery goes (paused)
    session = Session.objects.get(pk=played.id)
    assert session.metadata["dimensionProviderPluginId"] == "world-init"
    session.active_plugins = [p for p in session.active_plugins if p != "world-init"]
    session.save(update_fields=["active_plugins"])
    paused = _view(client, played)
    assert paused["dimensionProviderPluginId"] == "world-init" and "dimensionRecovery" not in paused
    assert len(paused["dimensionSettlements"]) == 4


def _edit_meets_a_newer_version_at_commit(client, played):
    """An edit whose commit (not its pre-check) meets a newer version answers 409 with the current versions."""
    settings = django_settings
    view = _view(client, played)
    before = _versions(played)
    value = DimensionValue.objects.get(session_id=played.id, dimension_id="caseFile").value
    (Path(settings.COVEL_HOME) / "meddle-editor").write_text("1")
    try:
        response = _rpc(client, played, _editor(view, {"updates": [{"id": "caseFile", "expectedVersion": before["caseFile"],
                                                                     "value": value}]}))
    finally:
        (Path(settings.COVEL_HOME) / "meddle-editor").unlink()
    assert response.status_code == 409, response.content
    body = response.json()
    assert body["code"] == "dimension-version-conflict" and body["error"]
    assert body["details"]["currentVersions"] == {k: v + 1 for k, v in before.items()} == _versions(played)


def test_the_next_turn_retries_a_pending_settlement_first_and_aborts_when_it_still_fails(client, played, settings, tmp_path):
    # a pending source is settled by the next turn's automatic retry, before that turn runs
    pending = _pending_after(client, played, "我去码头看看那条船。")
    frames = _say(client, played, "我向裴照打听押纲官的下落。")
    assert frames[-1]["payload"].get("abortReason") is None
    view = _view(client, played)
    by_id = {s["source"]["resultId"]: s for s in view["dimensionSettlements"]}
    assert by_id[pending["source"]["resultId"]]["status"] in ("settled", "no-change")
    assert not _pending(view) and len(view["dimensionSettlements"]) == 3

    pending = _pending_after(client, played, "我去巡检司看看。")
    # the tracker's model slot now answers nothing (a closed loopback port): the retry cannot settle
    toml = tmp_path / "llm.toml"
    toml.write_text('[covel.plugin]\nprovider = "lab"\nprotocol = "openai-chat-v1"\nmodel = "m"\n'
                    'baseUrl = "http://127.0.0.1:9/v1"\n', encoding="utf-8")
    settings.COVEL_LLM_TOML = str(toml)
    body = {"requestId": "req-abort-1", "type": "submit_actions", "sessionId": played.id,
            "payload": {"actions": [{"kind": "say", "text": "我再去码头。"}]}}
    response = client.post("/api/actions", data=json.dumps(body), content_type="application/json", **_auth(played))
    frames = stream_read(response)
    done = frames[-1]["payload"]
    assert frames[-1]["type"] == "execution.completed" and done["committed"] is False
    assert done["abortReason"] == "dimension-settlement-pending"
    assert "dimension editor" in done["error"]["message"] and done["error"]["pending"] == [pending["source"]["resultId"]]
    # nothing of the player's turn was written; the receipt is still pending
    assert not ChatMessage.objects.filter(session_id=played.id, content__contains="我再去码头").exists()
    assert [s["source"]["resultId"] for s in _pending(_view(client, played))] == [pending["source"]["resultId"]]
