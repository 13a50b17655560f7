from django.contrib import admin

from . import models


@admin.register(models.MediaAsset)
class MediaAssetAdmin(admin.ModelAdmin):
    list_display = ("id", "session", "kind", "content_type", "size_bytes", "created_at")
    list_filter = ("kind", "content_type")
    search_fields = ("id", "sha256", "session__id")
