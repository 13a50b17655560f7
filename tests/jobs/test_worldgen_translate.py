"""POST /api/worlds/:id/translate over SSE with the offline scripted model (issue 21; spec 004):
a real upstream package copied into COVEL_HOME/worlds gains ja-JP files beside the base files,
sessions in ja-JP use them, and the 400 / 404 / 409s come before the stream."""
from __future__ import annotations

import json
import shutil

import pytest

from tests.jobs.test_worldgen import _private_home, llm_path  # noqa: F401  (fixtures)
from tests.shared_paths import FIXTURES_DIR
from tests.turns.test_actions_helpers import sse_frames, stream_bytes

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def mistport(settings, _private_home):
    root = settings.COVEL_HOME / "worlds" / "mistport"
    shutil.copytree(FIXTURES_DIR / "upstream" / "worlds" / "mistport", root)
    return root


def _translate(client, world_id, body):
    response = client.post(f"/api/worlds/{world_id}/translate", data=json.dumps(body), content_type="application/json")
    if response.status_code != 200:
        return response, []
    return response, sse_frames(stream_bytes(response))


def test_translate_adds_a_locale_beside_the_base_files(client, llm_path, mistport):
    before = {p.relative_to(mistport).as_posix(): p.read_bytes() for p in mistport.rglob("*") if p.is_file()}
    response, frames = _translate(client, "mistport", {"locale": "ja-jp"})
    assert response.status_code == 200 and response["Content-Type"].startswith("text/event-stream")
    steps = [f["step"] for f in frames if f["type"] == "progress"]
    assert steps[:4] == ["glossary", "names", "texts", "long texts"]
    done = frames[-1]
    assert done["type"] == "done", done
    assert done["translated"] == done["total"] > 10 and done["failed"] == 0
    assert "ja-JP" in done["world"]["metadata"]["supportedLocales"]
    assert (mistport / "WORLD.ja-JP.md").read_text(encoding="utf-8").startswith("[ja-JP] ")
    assert (mistport / "world.ja-JP.yaml").is_file()
    assert (mistport / "characters" / "characters.ja-JP.json").is_file()
    after = {p.relative_to(mistport).as_posix(): p.read_bytes() for p in mistport.rglob("*") if p.is_file()}
    assert {k: v for k, v in after.items() if k in before} == before  # base and other files unchanged
    assert not list(mistport.parent.glob(".covel-*"))
    # a session in ja-JP gets the translated characters (aliases included)
    created = client.post("/api/sessions", {"worldId": "mistport", "locale": "ja-JP"}, content_type="application/json").json()
    assert created["locale"] == "ja-JP"
    chars = client.get(f"/api/sessions/{created['id']}/characters", HTTP_AUTHORIZATION=f"Bearer {created['ownerToken']}").json()
    items = chars["items"] if isinstance(chars, dict) else chars
    lin = next(c for c in items if c["id"] == "npc-lin-yuanzhou")
    assert lin["name"].startswith("[ja-JP] ") and all(a.startswith("[ja-JP] ") for a in lin["aliases"])
    again, _ = _translate(client, "mistport", {"locale": "ja-JP"})
    assert again.status_code == 409 and again.json()["code"] == "world_already_translated"


def test_translate_errors_before_the_stream(client, llm_path, mistport, settings):
    assert _translate(client, "mistport", {"locale": "not a tag"})[0].status_code == 400
    assert _translate(client, "mistport", {"locale": "ja-JP", "idleTimeoutMs": 5})[0].status_code == 400
    assert _translate(client, "none-such", {"locale": "ja-JP"})[0].json()["code"] == "world_not_found"
    assert _translate(client, "mistport", {"locale": "zh-CN"})[0].json()["code"] == "world_already_translated"
    builtin = client.get("/api/worlds").json()["items"]
    builtin_id = next(w["id"] for w in builtin if w["metadata"]["source"] == "file")
    refused = _translate(client, builtin_id, {"locale": "ja-JP"})[0]
    assert refused.status_code == 409 and refused.json()["code"] == "world_not_translatable"
    store = client.post("/api/worlds", {"id": "stored", "name": "Stored"}, content_type="application/json")
    assert store.status_code == 201
    assert _translate(client, "stored", {"locale": "ja-JP"})[0].json()["code"] == "world_not_translatable"


def test_a_package_replaced_while_the_model_runs_gets_an_sse_error_and_stays_untouched(client, llm_path, mistport, monkeypatch):
    from jobs import worldgen_translate

    real = worldgen_translate._ask
    replaced = []

    def ask_while_replaced(run, step, batch, glossary):
        if not replaced:  # the world is deleted and rebuilt with the same id meanwhile
            shutil.move(str(mistport), str(mistport.parent.parent / "old-mistport"))
            shutil.copytree(FIXTURES_DIR / "upstream" / "worlds" / "mistport", mistport)
            replaced.append(True)
        return real(run, step, batch, glossary)

    monkeypatch.setattr(worldgen_translate, "_ask", ask_while_replaced)
    response, frames = _translate(client, "mistport", {"locale": "ja-JP"})
    assert response.status_code == 200
    assert frames[-1]["type"] == "error" and "replaced" in frames[-1]["message"]
    assert not list(mistport.glob("*.ja-JP.*")) and not list(mistport.parent.glob(".covel-*"))
