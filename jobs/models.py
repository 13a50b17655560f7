"""Detached runtime jobs, claimed by workers under renewable Redis leases with fencing tokens."""
from __future__ import annotations

import uuid

from django.db import models


class RuntimeJob(models.Model):
    """A runtime run outside the player's turn. ``status`` (spec 004): queued → claimed → running →
    committing → succeeded | failed, or timed_out | cancelled | stale | orphaned (jobs.schemas).
    ``fencing_token`` grows with every claim; a commit carrying an older token is refused by the
    database write. ``error``: ``{"reason", "message"?}``. Only jobs/services.py writes it."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    session = models.ForeignKey("covel_sessions.Session", on_delete=models.CASCADE, related_name="runtime_jobs")
    plugin_id = models.CharField(max_length=128)
    runtime_id = models.CharField(max_length=160)
    status = models.CharField(max_length=16, default="queued", db_index=True)
    fencing_token = models.BigIntegerField(default=0)
    lease_owner = models.CharField(max_length=128, blank=True, default="")
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    attempts = models.IntegerField(default=0)
    payload = models.JSONField(default=dict)
    result = models.JSONField(null=True, blank=True)
    error = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)


class ServerSetting(models.Model):
    """A saved server setting (spec 004 "Server settings", PUT /api/config/server-settings).
    ``key`` is a registry key such as ``diagnostics.traceRetention``; a deleted value has no row."""

    key = models.CharField(primary_key=True, max_length=128)
    value = models.JSONField()
    updated_at = models.DateTimeField(auto_now=True)


class WorldGeneration(models.Model):
    """One POST /api/ai/generate-world run, executed by the ``worldgen.generate_world`` task.

    ``status``: queued → running → done | failed. ``request``: the validated request body (camelCase).
    ``frames``: the SSE frames written so far, in order (``progress`` …, then one ``done`` or
    ``error``); the web side relays them. Only jobs/worldgen.py writes this table.
    """

    STATUS_QUEUED = "queued"
    STATUS_RUNNING = "running"
    STATUS_DONE = "done"
    STATUS_FAILED = "failed"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    status = models.CharField(max_length=16, default=STATUS_QUEUED, db_index=True)
    request = models.JSONField(default=dict)
    frames = models.JSONField(default=list)
    world_id = models.CharField(max_length=128, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
