"""World data as plugins read it (issue 20/21, spec 004 §世界数据 / §世界数据的语言覆盖):

- a list-valued ``contract:`` source with ``key: id`` becomes one plugin-data row per record,
  keyed by that field (sessions.world_data_contracts.contract_source_rows), the provenance ledger
  names exactly those rows, and the affinity plugin finds a character's starting score in a turn;
- a locale overlay translates onto the base instead of replacing it: haruka-academy's
  ``time.en-US.yaml`` keeps the months' ``days``, the en-US opening is English, and two played
  turns have no failed runtime.

Real session creation and turns over HTTP (Django test client, in-process worker, offline
scripted model); runs in both shapes.
"""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import yaml
from django.conf import settings

from plugins_app.models import PluginData
from sessions.models import DimensionValue, WorldDataLedgerRow
from sessions.world_data_sync import value_hash
from sessions.worldpkg.files import overlay_merge
from tests.plugins_app.builtin.play_support import act, get_json, play, runtime_status
from tests.shared_paths import FIXTURES_DIR

pytestmark = pytest.mark.django_db(transaction=True)

FIXTURE_WORLDS = FIXTURES_DIR / "upstream" / "worlds"
CJK = re.compile(r"[\u4e00-\u9fff]")


@pytest.fixture
def installed(request):
    """Copy the named fixture world into COVEL_HOME/worlds/ (as an operator would)."""
    world_id = request.param
    target = Path(settings.COVEL_HOME) / "worlds" / world_id
    shutil.copytree(FIXTURE_WORLDS / world_id, target)
    yield world_id
    shutil.rmtree(target, ignore_errors=True)


def _affinity_rows(session_id: str) -> dict[str, dict]:
    return {r.key: r.value for r in PluginData.objects.filter(session_id=session_id, plugin_id="affinity", namespace="affinity")}


@pytest.mark.parametrize("installed", ["emberback"], indirect=True)
def test_starting_affinity_is_one_row_per_character_and_the_turn_reads_it(client, installed):
    starting = {r["id"]: r for r in yaml.safe_load((FIXTURE_WORLDS / "emberback" / "data" / "affinity.yaml").read_text())}
    # given an emberback session (its pack enables affinity) started and one turn addressed to a character
    played = play(client, installed, says=[], name="Ada Quill", locale="en-US")
    assert "affinity" in played.created["activePlugins"]
    session_id = played.id
    # then creation stored one row per character, keyed by the source's `key: id`, none under the source id
    rows = _affinity_rows(session_id)
    assert "affinity" not in rows
    assert set(starting) <= set(rows)
    assert all(rows[k]["score"] == starting[k]["score"] for k in starting if not rows[k].get("history"))
    # and the ledger names exactly those rows, with the hash of what the importer wrote (the world's record)
    ledger = {r.key: r for r in WorldDataLedgerRow.objects.filter(session_id=session_id, plugin_id="affinity")}
    assert set(ledger) == set(starting)
    assert all(ledger[k].source_id == "affinity" and ledger[k].namespace == "affinity" and ledger[k].managed
               and ledger[k].value_hash == value_hash(starting[k]) for k in starting)
    # when the player talks to Tomas Reed
    before = _affinity_rows(session_id)
    frames = act(client, played, "submit_actions", {"actions": [{"kind": "say", "text": "Tomas Reed, thank you for backing me up."}]})
    assert all(s["status"] != "failed" for s in runtime_status(frames, "affinity/affinity"))
    after = _affinity_rows(session_id)
    # then every changed score continues from the world's starting value (never from 0), and no
    # second record was made for a character that already had one
    changed = {k: v for k, v in after.items() if v != before.get(k)}
    assert changed, "the affinity runtime changed nobody"
    for key, record in changed.items():
        assert key in starting, f"a new row {key!r} instead of the character's starting row"
        last = record["history"][-1]
        assert record["score"] == max(-100, min(100, before[key]["score"] + last["delta"]))
    names = [v["name"] for v in after.values()]
    assert len(names) == len(set(names))
    # and the plugin-data listing shows the per-character rows
    listed = get_json(client, played, f"/api/sessions/{session_id}/plugin-data/affinity/affinity")["items"]
    assert set(starting) <= {item["key"] for item in listed}
    one = get_json(client, played, f"/api/sessions/{session_id}/plugin-data/affinity/affinity/june-okafor")
    assert one["value"]["name"] == "June Okafor"
    # and a zh-CN session gets the same rows, its overlay paired by id: Chinese names, the base scores
    response = client.post("/api/sessions", data=json.dumps({"worldId": installed, "locale": "zh-CN"}), content_type="application/json")
    assert response.status_code == 201, response.content
    zh = _affinity_rows(response.json()["id"])
    assert set(zh) == set(starting)
    assert zh["tomas-reed"]["name"] == "托马斯·里德" and zh["tomas-reed"]["score"] == starting["tomas-reed"]["score"]


@pytest.mark.parametrize("installed", ["haruka-academy"], indirect=True)
def test_haruka_academy_in_en_us_keeps_the_calendar_and_opens_in_english(client, installed):
    # given haruka-academy played in en-US for two turns
    played = play(client, installed, says=["Hello, is this seat free?", "Which club are you in?"], name="Ada Quill", locale="en-US")
    assert played.created["locale"] == "en-US"
    # then no runtime failed (world-time/context read the months' days every turn)
    failed = [f["payload"] for f in played.frames("runtime.completed") if f["payload"]["status"] == "failed"]
    assert not failed, failed
    ok = [f["payload"]["status"] for f in played.frames("runtime.completed") if f["payload"]["runtimeId"].startswith("world-time/")]
    assert ok and set(ok) <= {"success", "skipped"}
    # and the world-time definition the plugin received is the base calendar with English names
    [definition] = PluginData.objects.filter(session_id=played.id, plugin_id="world-time", namespace="definitions").values_list("value", flat=True)
    months = definition["definition"]["calendar"]["months"]
    assert [m["days"] for m in months] == [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
    assert months[0]["name"] == "January" and definition["definition"]["calendar"]["periods"][1] == {"startHour": 6, "name": "Morning"}
    # and the opening is English: the session's starting conditions and the opening narration
    opening = DimensionValue.objects.get(session_id=played.id, dimension_id="startingConditions").value["openingScenario"]
    assert opening.startswith("The second Monday of April") and not CJK.search(opening)
    first = played.frames("narrative.completed")[0]["payload"]["text"]
    assert "second Monday of April" in first and not CJK.search(first.split("\n\n", 1)[0])
    # while zh-CN sessions keep the Chinese opening
    zh = play(client, installed, says=[], name="林远", locale="zh-CN")
    zh_opening = DimensionValue.objects.get(session_id=zh.id, dimension_id="startingConditions").value["openingScenario"]
    assert zh_opening.startswith("四月的第二个周一")


def test_overlay_merge_pairs_by_key_then_position_and_replaces_text():
    base = {"months": [{"name": {"zh-CN": "1月"}, "days": 31}, {"name": {"zh-CN": "2月"}, "days": 28}],
            "weekdays": [{"zh-CN": "周一"}, {"zh-CN": "周二"}],
            "cast": [{"id": "a", "name": "甲", "age": 1}, {"id": "b", "name": "乙", "age": 2}],
            "rows": [{"slug": "x", "label": "叉", "n": 1}, {"slug": "y", "label": "歪", "n": 2}]}
    overlay = {"months": [{"name": "January"}],
               "weekdays": ["Monday", "Tuesday"],
               "cast": [{"id": "b", "name": "Bee"}, {"id": "a", "name": "Ay"}],  # reordered: paired by id
               "rows": [{"slug": "y", "label": "Why"}, {"slug": "x", "label": "Ex"}]}
    merged = overlay_merge(base, overlay, identity_keys=("slug", "id"))
    assert merged["months"] == [{"name": "January", "days": 31}, {"name": {"zh-CN": "2月"}, "days": 28}]
    assert merged["weekdays"] == ["Monday", "Tuesday"]
    assert merged["cast"] == [{"id": "a", "name": "Ay", "age": 1}, {"id": "b", "name": "Bee", "age": 2}]
    assert merged["rows"] == [{"slug": "x", "label": "Ex", "n": 1}, {"slug": "y", "label": "Why", "n": 2}]
    assert base["months"][0]["name"] == {"zh-CN": "1月"}  # inputs untouched
