"""Plugin-data writes refuse namespaces / keys longer than their columns with a 400 (spec 004
§插件数据; §响应格式约定: never a 500 for bad input, nothing half-written)."""
from __future__ import annotations

import pytest

from plugins_app.models import PluginData
from tests.sessions.support import catalog, session  # noqa: F401
from turns.models import SessionEvent

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("namespace, key", [("n" * 129, "k"), ("notes", "k" * 257)])
def test_over_long_namespace_or_key_is_400_without_row_or_event(client, session, namespace, key):
    url = f"/api/sessions/{session['id']}/plugin-data/teller/{namespace}/{key}"
    response = client.put(url, {"value": 1}, content_type="application/json")
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_plugin_data_key"
    assert not PluginData.objects.filter(session_id=session["id"]).exists()
    assert not SessionEvent.objects.filter(session_id=session["id"], type="plugin-data.changed").exists()


def test_namespace_and_key_at_their_limits_are_stored(client, session):
    namespace, key = "n" * 128, "k" * 256
    url = f"/api/sessions/{session['id']}/plugin-data/teller/{namespace}/{key}"
    assert client.put(url, {"value": 1}, content_type="application/json").status_code == 200
    assert PluginData.objects.get(session_id=session["id"]).key == key
