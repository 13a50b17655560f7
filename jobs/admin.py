from django.contrib import admin

from . import models


@admin.register(models.RuntimeJob)
class RuntimeJobAdmin(admin.ModelAdmin):
    list_display = ("id", "session", "plugin_id", "runtime_id", "status", "attempts", "lease_owner", "lease_expires_at")
    list_filter = ("status", "plugin_id")
    search_fields = ("id", "session__id", "runtime_id")
    readonly_fields = ("fencing_token", "lease_owner", "lease_expires_at", "attempts")


@admin.register(models.WorldGeneration)
class WorldGenerationAdmin(admin.ModelAdmin):
    """World-generation runs (queue ``worldgen``): status and the frames relayed to the client."""

    list_display = ("id", "status", "world_id", "created_at", "updated_at")
    list_filter = ("status",)
    search_fields = ("id", "world_id")
    readonly_fields = ("status", "request", "frames", "world_id", "created_at", "updated_at")

    def has_add_permission(self, request):
        return False


@admin.register(models.ServerSetting)
class ServerSettingAdmin(admin.ModelAdmin):
    list_display = ("key", "updated_at")
    search_fields = ("key",)
