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
    assert not failed
