"""The builtin guide and world-ir plugins no longer keep per-turn copies in plugin data (issue 18):
guide's ``guides/turn-<n>`` duplicated each turn's ui message, world-ir's ``facts/turn-<n>`` its
runtime output (kept by the turn's result, runtime output and trace). Since they stopped writing
them, the last four of each session would stay behind for good; this removes them. ``guides/latest``
and every other plugin's rows are untouched. Migrating back restores nothing (the originals stay
where they were)."""
from __future__ import annotations

from django.db import migrations

#: (plugin id, namespace) of the per-turn copies the builtin plugins stopped keeping.
DROPPED = (("guide", "guides"), ("world-ir", "facts"))


def per_turn_copies_drop(apps, schema_editor) -> None:
    PluginData = apps.get_model("plugins_app", "PluginData")
    for plugin_id, namespace in DROPPED:
        PluginData.objects.filter(plugin_id=plugin_id, namespace=namespace, key__regex=r"^turn-[0-9]+$").delete()


class Migration(migrations.Migration):
    dependencies = [("plugins_app", "0001_initial")]
    operations = [migrations.RunPython(per_turn_copies_drop, migrations.RunPython.noop, elidable=True)]
