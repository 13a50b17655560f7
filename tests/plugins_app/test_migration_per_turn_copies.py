"""plugins_app 0002: the per-turn copies the builtin guide and world-ir plugins stopped keeping
(``guides/turn-<n>``, ``facts/turn-<n>``) are removed from existing sessions; nothing else is."""
from __future__ import annotations

import json

import pytest
from django.core.management import call_command

from plugins_app.models import PluginData

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_migration_drops_only_the_stopped_per_turn_copies(client):
    created = client.post("/api/sessions", data=json.dumps({"worldId": "hollow-reach-light"}), content_type="application/json")
    assert created.status_code == 201, created.content
    session_id = created.json()["id"]
    existing = set(PluginData.objects.filter(session_id=session_id).values_list("plugin_id", "namespace", "key"))
    call_command("migrate", "plugins_app", "0001", verbosity=0)
    try:
        rows = [("guide", "guides", "turn-7"), ("guide", "guides", "turn-8"), ("guide", "guides", "latest"),
                ("world-ir", "facts", "turn-8"), ("world-ir", "facts", "turn-8-notes"),
                ("scene-prompts", "scenes", "turn-8"), ("other", "guides", "turn-8"), ("guide", "notes", "turn-8")]
        for plugin_id, namespace, key in rows:
            PluginData.objects.create(session_id=session_id, plugin_id=plugin_id, namespace=namespace, key=key, value={"k": key})
    finally:
        call_command("migrate", "plugins_app", verbosity=0)
    kept = set(PluginData.objects.filter(session_id=session_id).values_list("plugin_id", "namespace", "key")) - existing
    assert kept == {("guide", "guides", "latest"), ("world-ir", "facts", "turn-8-notes"),
                    ("scene-prompts", "scenes", "turn-8"), ("other", "guides", "turn-8"), ("guide", "notes", "turn-8")}
