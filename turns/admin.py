from django.contrib import admin

from . import models


class _ReadOnlyAdmin(admin.ModelAdmin):
    """Kernel-owned data: operators inspect it; only the commit chain writes it."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(models.Execution)
class ExecutionAdmin(_ReadOnlyAdmin):
    list_display = ("id", "session", "type", "status", "request_id", "claimed_by", "created_at", "finished_at")
    list_filter = ("status", "type")
    search_fields = ("id", "request_id", "session__id", "trace_id", "turn_id")
    ordering = ("-created_at",)  # newest first: a UUID order means nothing to an operator


@admin.register(models.TurnResult)
class TurnResultAdmin(_ReadOnlyAdmin):
    list_display = ("turn_id", "session", "origin", "committed", "abort_reason", "player_turn_index", "created_at")
    list_filter = ("committed", "origin")
    search_fields = ("turn_id", "session__id")
    ordering = ("-created_at",)


@admin.register(models.TraceEvent)
class TraceEventAdmin(_ReadOnlyAdmin):
    list_display = ("trace_id", "seq", "type", "plugin_id", "runtime_id", "session", "created_at")
    list_filter = ("type", "plugin_id")
    search_fields = ("trace_id", "turn_id", "session__id")


@admin.register(models.SessionEvent)
class SessionEventAdmin(_ReadOnlyAdmin):
    list_display = ("session", "seq", "topic", "type", "turn_id", "created_at")
    list_filter = ("topic", "type")
    search_fields = ("session__id", "turn_id")


@admin.register(models.RuntimeOutput)
class RuntimeOutputAdmin(_ReadOnlyAdmin):
    list_display = ("output_id", "session", "turn_id", "plugin_id", "runtime_id", "status", "created_at")
    list_filter = ("status", "plugin_id")
    search_fields = ("output_id", "turn_id", "session__id")
    ordering = ("-created_at",)


@admin.register(models.Suspension)
class SuspensionAdmin(_ReadOnlyAdmin):
    list_display = ("suspension_id", "session", "plugin_id", "runtime_id", "status", "created_at")
    list_filter = ("status",)
    search_fields = ("suspension_id", "session__id")


@admin.register(models.InteractionRecord)
class InteractionRecordAdmin(_ReadOnlyAdmin):
    list_display = ("interaction_id", "session", "turn_id", "type", "plugin_id", "status", "created_at")
    list_filter = ("type", "status")
    search_fields = ("interaction_id", "turn_id", "session__id")


@admin.register(models.ExecutionFrame)
class ExecutionFrameAdmin(_ReadOnlyAdmin):
    list_display = ("execution", "index", "type", "turn_id", "is_final", "timestamp")
    list_filter = ("type", "is_final")
    search_fields = ("execution__id", "turn_id")
