from django.contrib import admin

from . import models


@admin.register(models.PluginData)
class PluginDataAdmin(admin.ModelAdmin):
    list_display = ("session", "plugin_id", "namespace", "key", "version", "updated_at")
    list_filter = ("plugin_id", "namespace")
    search_fields = ("session__id", "plugin_id", "namespace", "key")
    readonly_fields = ("version", "updated_at")
