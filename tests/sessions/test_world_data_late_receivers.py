"""PUT /api/sessions/:id/plugins/:pluginId imports the world's data once for a receiver that joins
after the start (spec 004 开局后加入的接收插件; sessions.world_data_import): the response's
``worldData {receivers, imported, conflicts, notices}``, the plugin-data rows, a second enable
importing nothing, and a row the game changed kept as a conflict. ``almanac`` accepts
``world.time-definition@1``, which hollow-reach-light ships (tests/turns/platform_support.py)."""
from __future__ import annotations

import pytest

from plugins_app.models import PluginData
from plugins_app.registry import registry_reset
from tests.turns.platform_support import builtin_dir_with_platform

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def platform(settings, tmp_path):
    settings.COVEL_BUILTIN_PLUGINS_DIR = str(builtin_dir_with_platform(tmp_path / "builtin", with_world_time=True))
    registry_reset()
    yield
    registry_reset()


#: hollow-reach-light has dimensions; no plugin of this builtin dir provides world.dimensions@1.
NO_DIMENSIONS = [{"level": "warning", "code": "dimension-provider-missing", "sourceId": "dimensions",
                  "message": "no enabled plugin provides world.dimensions@1; dimensions were not imported"}]


def _create(api, **extra) -> dict:
    response = api.post("/api/sessions", {"worldId": "hollow-reach-light", "locale": "en-US", "plugins": ["narrator"], **extra},
                        content_type="application/json")
    assert response.status_code == 201, response.content
    return response.json()


def _rows(session_id: str, plugin_id: str) -> dict:
    return {(r.namespace, r.key): r.value for r in PluginData.objects.filter(session_id=session_id, plugin_id=plugin_id)}


def test_a_receiver_enabled_after_the_start_gets_the_world_data_once(api):
    # given a session whose world ships a time definition that world-time received at creation
    created = _create(api)
    given = _rows(created["id"], "world-time")
    assert len(given) == 1 and "almanac" not in created["activePlugins"]
    # when almanac (which accepts the same contract) is enabled
    response = api.put(f"/api/sessions/{created['id']}/plugins/almanac")
    # then it receives the definition in the same request
    assert response.status_code == 200, response.content
    body = response.json()
    assert "almanac" in body["activePluginIds"]
    assert body["worldData"] == {"receivers": ["almanac"], "imported": 1, "conflicts": 0, "notices": NO_DIMENSIONS}
    [(key, value)] = [(k, v) for k, v in _rows(created["id"], "almanac").items()]
    assert key[0] == "calendar" and value == next(iter(given.values()))
    # and enabling it again after a disable imports nothing more (it received it already)
    assert api.delete(f"/api/sessions/{created['id']}/plugins/almanac").status_code == 200
    again = api.put(f"/api/sessions/{created['id']}/plugins/almanac").json()
    assert again["worldData"] == {"receivers": [], "imported": 0, "conflicts": 0, "notices": NO_DIMENSIONS}
    assert "worldDataReceivers" not in api.get(f"/api/sessions/{created['id']}").json()["metadata"]


def test_a_row_the_game_changed_is_kept_as_a_conflict(api):
    created = _create(api)
    key = next(iter(_rows(created["id"], "world-time")))[1]
    PluginData.objects.create(session_id=created["id"], plugin_id="almanac", namespace="calendar", key=key,
                              value={"changed": "by the game"})
    body = api.put(f"/api/sessions/{created['id']}/plugins/almanac").json()
    assert body["worldData"]["receivers"] == ["almanac"]
    assert (body["worldData"]["imported"], body["worldData"]["conflicts"]) == (0, 1)
    assert _rows(created["id"], "almanac") == {("calendar", key): {"changed": "by the game"}}


def test_enabling_a_plugin_that_receives_nothing_reports_no_import(api):
    created = _create(api)
    body = api.put(f"/api/sessions/{created['id']}/plugins/tally").json()
    assert body["worldData"] == {"receivers": [], "imported": 0, "conflicts": 0, "notices": NO_DIMENSIONS}


def test_a_session_without_a_world_has_no_world_data_in_the_answer(api):
    response = api.post("/api/sessions", {"locale": "en-US", "plugins": ["narrator"]}, content_type="application/json")
    assert response.status_code == 201, response.content
    body = api.put(f"/api/sessions/{response.json()['id']}/plugins/almanac").json()
    assert body["ok"] is True and "worldData" not in body


def test_the_first_dimension_provider_to_join_imports_the_worlds_dimensions(api, settings):
    # given a builtin dir that also has a world.dimensions@1 provider, not enabled at creation
    import shutil
    from pathlib import Path

    from sessions.models import DimensionValue

    shutil.copytree(Path(__file__).parent / "plugins" / "dims", Path(settings.COVEL_BUILTIN_PLUGINS_DIR) / "dims")
    registry_reset()
    created = _create(api)
    assert not DimensionValue.objects.filter(session_id=created["id"]).exists()
    # when it is enabled
    body = api.put(f"/api/sessions/{created['id']}/plugins/dims").json()
    # then the world's dimensions are written at once and the session is bound to it
    imported = DimensionValue.objects.filter(session_id=created["id"]).count()
    assert imported > 0
    assert body["worldData"] == {"receivers": ["dims"], "imported": imported, "conflicts": 0, "notices": []}
    assert api.get(f"/api/sessions/{created['id']}").json()["metadata"]["dimensionProviderPluginId"] == "dims"
