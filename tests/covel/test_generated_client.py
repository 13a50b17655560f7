"""A Python client generated with openapi-python-client from a live server's /api/openapi.json plays a
session through that server (issue 16): create it with a typed body, start it, answer the setup
form, play a turn, read the history back as typed models. Real daphne process, loopback only.

The generator gets one config line for media types it cannot model (``image/*``, ``*/*``: the
upload and downloads are plain bytes to it).
"""
from __future__ import annotations

import importlib
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import pytest

from tests.turns.test_actions_helpers import sse_frames
from tests.turns.events_support import Daphne, server_env
from turns import event_stream

pytestmark = pytest.mark.django_db(transaction=True)

WORLD = "hollow-reach-light"
PACKAGE = "covel_client"
GENERATOR = Path(sys.executable).parent / "openapi-python-client"
CONFIG = f"""\
project_name_override: covel-client
package_name_override: {PACKAGE}
post_hooks: []
content_type_overrides:
  "image/*": application/octet-stream
  "*/*": application/octet-stream
  "image/*, audio/*": application/octet-stream
"""


@pytest.fixture
def server():
    # The hosted shape runs the turn in the web process here (no Celery worker in this test).
    daphne = Daphne(server_env(COVEL_INPROCESS_WORKER="1"))
    try:
        yield daphne
    finally:
        daphne.stop()
        event_stream.db_connections_close()


@pytest.fixture
def generated(server, tmp_path):
    """The client package generated from the server's document, imported (removed afterwards)."""
    document = httpx.get(f"{server.url}/api/openapi.json", timeout=30)
    assert document.status_code == 200
    (tmp_path / "openapi.json").write_bytes(document.content)
    (tmp_path / "config.yaml").write_text(CONFIG)
    result = subprocess.run(
        [str(GENERATOR), "generate", "--path", "openapi.json", "--meta", "none", "--output-path", PACKAGE,
         "--config", "config.yaml"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    skipped = [line for line in result.stdout.splitlines() if "will not be generated" in line]
    assert skipped == [], result.stdout[-3000:]
    sys.path.insert(0, str(tmp_path))
    try:
        yield importlib.import_module(PACKAGE)
    finally:
        sys.path.remove(str(tmp_path))
        for name in [n for n in sys.modules if n == PACKAGE or n.startswith(PACKAGE + ".")]:
            del sys.modules[name]


def _api(name: str):
    return importlib.import_module(f"{PACKAGE}.api.{name}")


def _model(name: str):
    return getattr(importlib.import_module(f"{PACKAGE}.models"), name)


def _act(client, session_id: str, type_: str, payload: dict) -> list[dict]:
    """POST /api/actions through the generated client; the parsed 200 is the SSE text."""
    body = _model("ActionRequestIn")(request_id=f"gen-{uuid.uuid4().hex[:12]}", type_=_model("ActionRequestInType")(type_),
                                     session_id=session_id, payload=_model("ActionRequestInPayload").from_dict(payload))
    response = _api("actions.post_action").sync_detailed(client=client, body=body)
    assert response.status_code == 200, response.content[:500]
    frames = sse_frames(response.parsed)
    completed = [f for f in frames if f["type"] == "execution.completed"]
    assert len(completed) == 1 and completed[0]["payload"]["committed"] is True, [f["type"] for f in frames]
    return frames


def _form_answer(frame: dict) -> dict:
    interaction = frame["payload"]["interaction"]
    values = {}
    for spec in interaction["fields"]:
        if spec["type"] == "select":
            options = [o["value"] if isinstance(o, dict) else o for o in spec["options"]]
            values[spec["name"]] = spec.get("defaultValue") if spec.get("defaultValue") in options else options[0]
        else:
            values[spec["name"]] = "Wren" if "name" in spec["name"].lower() else "Quiet and watchful."
    return {"kind": interaction.get("actionKind") or "act", "fields": values,
            "interaction": {"turnId": frame["turnId"], "interactionId": interaction["interactionId"], "type": "form"}}


def test_a_generated_client_plays_a_session_against_a_live_server(server, generated):
    # given: the generated package, a public client and the typed models
    client = generated.Client(base_url=server.url, timeout=httpx.Timeout(120.0), raise_on_unexpected_status=True)
    HealthOut, SessionIn, SessionCreatedOut, MessagesPageOut, ErrorOut = (
        _model(n) for n in ("HealthOut", "SessionIn", "SessionCreatedOut", "MessagesPageOut", "ErrorOut"))
    assert isinstance(_api("health.health").sync(client=client), HealthOut)
    plan = _api("worlds.get_world_plugin_plan").sync(world_id=WORLD, client=client)

    # when: a session is created with a typed body, started, set up and played for one turn
    created = _api("sessions.create_session").sync(
        client=client, body=SessionIn(world_id=WORLD, locale="en-US", plugins=plan.default_plugin_ids))
    assert isinstance(created, SessionCreatedOut) and created.world_id == WORLD and created.owner_token
    owner = generated.AuthenticatedClient(base_url=server.url, token=created.owner_token, timeout=httpx.Timeout(120.0))
    started = _act(owner, created.id, "start_session", {})
    forms = [f for f in started if f["type"] == "interaction.requested"]
    assert forms
    _act(owner, created.id, "submit_actions", {"actions": [_form_answer(f) for f in forms]})
    played = _act(owner, created.id, "submit_actions", {"actions": [{"kind": "say", "text": "I climb to the lamp room."}]})

    # then: the history reads back as typed models, the session record agrees, errors are typed too
    page = _api("sessions.list_messages_page").sync(session_id=created.id, client=owner, limit=200)
    assert isinstance(page, MessagesPageOut) and page.next_cursor is None
    unset = importlib.import_module(f"{PACKAGE}.types").Unset
    kinds = [m.kind for m in page.items if not isinstance(m.kind, unset)]
    assert "story" in kinds and "ui" in kinds
    said = [m for m in page.items if m.role.value == "user" and m.content == "I climb to the lamp room."]
    assert len(said) == 1
    narrated = [f for f in played if f["type"] == "narrative.completed"]
    assert narrated and any(m.content == narrated[-1]["payload"]["text"] for m in page.items)
    session = _api("sessions.get_session").sync(session_id=created.id, client=owner)
    assert session.phase == "playing" and session.completed_player_turns == 1
    missing = _api("sessions.get_session").sync_detailed(session_id="no-such-session", client=owner)
    assert missing.status_code == 404 and isinstance(missing.parsed, ErrorOut)
    assert missing.parsed.code == "session_not_found"
