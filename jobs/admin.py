from django.contrib import admin

from . import models


@admin.register(models.RuntimeJob)
class RuntimeJobAdmin(admin.ModelAdmin):
    list_display = ("id", "session", "plugin_id", "runtime_id", "status", "attempts", "lease_owner", "lease_expires_at")
    list_filter = ("status", "plugin_id")
    search_fields = ("id", "session__id", "runtime_id")
    readonly_fields = ("fencing_token", "lease_owner", "lease_expires_at", "attempts")
