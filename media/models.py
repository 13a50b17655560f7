"""Media assets; the bytes live under COVEL_HOME/media/, never inside this package."""
from __future__ import annotations

import uuid

from django.db import models


class MediaAsset(models.Model):
    """One stored media file: content type, size in bytes, sha256, relative storage path."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    session = models.ForeignKey(
        "covel_sessions.Session", on_delete=models.CASCADE, null=True, blank=True, related_name="media"
    )
    kind = models.CharField(max_length=32, default="image")
    content_type = models.CharField(max_length=128)
    size_bytes = models.BigIntegerField()
    sha256 = models.CharField(max_length=64)
    storage_path = models.CharField(max_length=512)
    created_at = models.DateTimeField(auto_now_add=True)
