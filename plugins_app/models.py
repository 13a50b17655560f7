"""Plugin data: per (session, plugin, namespace, key) JSON values, 256 KiB each (spec 004 §插件数据)."""
from __future__ import annotations

from django.db import models
from django.utils import timezone

PLUGIN_DATA_VALUE_MAX_BYTES = 256 * 1024


class PluginData(models.Model):
    """One plugin-data value. Namespaces starting with ``_`` are reserved for the framework
    (``_hidden.<ns>`` holds hidden world data; ``_dimensions``, ``_runtime_jobs`` ... the kernel's).
    ``version`` bumps on every write. Only turns/services_plugin_data.py (and the commit
    chain through it) writes rows."""

    session = models.ForeignKey("covel_sessions.Session", on_delete=models.CASCADE, related_name="plugin_data")
    plugin_id = models.CharField(max_length=128)
    namespace = models.CharField(max_length=128)
    key = models.CharField(max_length=256)
    value = models.JSONField(null=True)
    version = models.IntegerField(default=1)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["session", "plugin_id", "namespace", "key"], name="uniq_plugin_data_key")
        ]
        indexes = [models.Index(fields=["session", "plugin_id", "namespace"])]
