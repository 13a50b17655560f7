"""The upstream fixture worlds play with the builtin plugins: installed under COVEL_HOME/worlds/,
their dimensions, characters and lorebook are used and plugin requirements we cannot meet come
back as `unmetRequirements`, not as errors (issue 7, "Done when")."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from django.conf import settings

from sessions.models import Character, DimensionValue, LorebookEntry
from tests.plugins_app.builtin.play_support import play
from tests.shared_paths import FIXTURES_DIR

pytestmark = pytest.mark.django_db(transaction=True)

FIXTURE_WORLDS = FIXTURES_DIR / "upstream" / "worlds"


@pytest.fixture
def installed_world(request):
    world_id = request.param
    target = Path(settings.COVEL_HOME) / "worlds" / world_id
    shutil.copytree(FIXTURE_WORLDS / world_id, target)
    yield world_id
    shutil.rmtree(target, ignore_errors=True)


@pytest.mark.parametrize("installed_world", ["emberback", "mistport", "haruka-academy"], indirect=True)
def test_fixture_world_plays_two_turns(client, installed_world):
    played = play(client, installed_world, says=["I look around.", "I ask who is in charge here."], name="Ada Quill")
    session_id = played.id
    # creation succeeded although the world requests plugins this host does not have
    assert played.created["phase"] == "setup"
    unknown = {u["pluginId"] for u in played.created.get("unmetRequirements", []) if u.get("code") == "unknown-plugin"}
    assert not unknown & set(played.created["activePlugins"])
    if installed_world == "emberback":  # its pack's catalogue plugins all ship now (issue 20)
        assert not unknown and {"dice-check", "core-quest", "inventory"} <= set(played.created["activePlugins"])
    # the world's own cast, lorebook and dimensions were imported and used
    cast = set(Character.objects.filter(session_id=session_id).exclude(type="player").values_list("name", flat=True))
    assert cast
    prose = [f["payload"]["text"] for f in played.frames("narrative.completed")]
    assert len(prose) == 3 and any(name in " ".join(prose) for name in cast)
    assert LorebookEntry.objects.filter(session_id=session_id).count() >= 8
    assert DimensionValue.objects.filter(session_id=session_id).count() >= 9
    settled = [f["payload"]["status"] for f in played.frames("runtime.completed")
               if f["payload"]["runtimeId"] == "world-init/dimension-tracker"]
    assert len(settled) == 3 and set(settled) <= {"success", "skipped"}
    failed = [f["payload"] for f in played.frames("runtime.completed") if f["payload"]["status"] == "failed"]
    assert not failed, [(f["runtimeId"], f.get("error")) for f in failed]


@pytest.mark.parametrize("installed_world", ["mistport"], indirect=True)
def test_a_static_setting_block_takes_the_session_locales_values(client, installed_world):
    """mistport's base dimensions are static setting blocks (zh-CN) and its en-US overlay carries
    the translated values as definition-shaped entries (name, schema, initialValue): an en-US
    session stores the English values, a zh-CN session the base ones (issue 20)."""
    import json

    import yaml

    overlay = yaml.safe_load((FIXTURE_WORLDS / "mistport" / "data" / "dimensions.en-US.yaml").read_text(encoding="utf-8"))
    base = yaml.safe_load((FIXTURE_WORLDS / "mistport" / "data" / "dimensions.yaml").read_text(encoding="utf-8"))
    values = {}
    for locale in ("en-US", "zh-CN"):
        created = client.post("/api/sessions", data=json.dumps({"worldId": installed_world, "locale": locale}),
                              content_type="application/json")
        assert created.status_code == 201, created.content
        values[locale] = {d.dimension_id: d for d in DimensionValue.objects.filter(session_id=created.json()["id"])}
    english = values["en-US"]
    assert english["geography"].value["overview"] == overlay["geography"]["initialValue"]["overview"]
    assert english["geography"].definition["name"] == overlay["geography"]["name"]
    assert [f["name"] for f in english["factions"].value] == [f["name"] for f in overlay["factions"]["initialValue"]]
    # the structure (and anything the overlay does not translate) stays the base's
    assert len(english["geography"].value["regions"]) == len(base["geography"]["regions"])
    assert values["zh-CN"]["geography"].value["overview"] == base["geography"]["overview"]


@pytest.mark.parametrize("installed_world", ["haruka-academy"], indirect=True)
def test_an_untranslated_static_block_keeps_its_values_but_takes_the_overlays_labels(client, installed_world):
    """haruka-academy's en-US overlay names and titles its static setting blocks but carries no
    value text for them: an en-US session gets the English name and field titles, and the base
    values as the package ships them (nothing is made up)."""
    import json

    import yaml

    overlay = yaml.safe_load((FIXTURE_WORLDS / installed_world / "data" / "dimensions.en-US.yaml").read_text(encoding="utf-8"))
    base = yaml.safe_load((FIXTURE_WORLDS / installed_world / "data" / "dimensions.yaml").read_text(encoding="utf-8"))
    created = client.post("/api/sessions", data=json.dumps({"worldId": installed_world, "locale": "en-US"}),
                          content_type="application/json")
    assert created.status_code == 201 and created.json()["locale"] == "en-US", created.content
    geography = DimensionValue.objects.get(session_id=created.json()["id"], dimension_id="geography")
    assert geography.definition["name"] == overlay["geography"]["name"] == "Geography"
    schema = geography.definition["schema"]
    assert schema["type"] == "object" and schema["properties"]["overview"]["title"] == "Overview"
    assert schema["properties"]["regions"]["items"]["properties"]["landmarks"]["title"] == "Landmarks"
    assert geography.value == base["geography"]
