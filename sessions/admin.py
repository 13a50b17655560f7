from django.contrib import admin
from django.urls import NoReverseMatch, reverse
from django.utils.html import format_html, format_html_join

from . import models


class _ReadOnlyAdmin(admin.ModelAdmin):
    """Kernel-owned data: operators inspect it; only the commit chain writes it."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(models.World)
class WorldAdmin(admin.ModelAdmin):
    list_display = ("id", "name", "state", "created_at", "updated_at")
    list_filter = ("state",)
    search_fields = ("id", "name")


@admin.register(models.Session)
class SessionAdmin(admin.ModelAdmin):
    list_display = ("id", "world_id", "status", "phase", "completed_player_turns", "locale", "created_at")
    list_filter = ("status", "phase", "locale", "world_id")
    search_fields = ("id", "world_id", "title")
    exclude = ("owner_token_hash", "incarnation")
    readonly_fields = ("related", "event_epoch", "event_seq", "deletion_state", "deletion_started_at", "phase",
                       "setup_runtimes", "completed_player_turns", "created_at", "updated_at")
    ordering = ("-created_at",)
    # (admin changelist URL name, label, filter field): what an operator follows from a session.
    RELATED = (
        ("admin:turns_turnresult_changelist", "turns", "session"),
        ("admin:turns_execution_changelist", "executions", "session"),
        ("admin:jobs_runtimejob_changelist", "runtime jobs", "session"),
        ("admin:turns_runtimeoutput_changelist", "runtime outputs", "session"),
        ("admin:turns_traceevent_changelist", "trace events", "session"),
        ("admin:covel_sessions_snapshot_changelist", "snapshots", "session"),
        ("admin:covel_sessions_chatmessage_changelist", "messages", "session"),
    )

    def has_add_permission(self, request):
        return False  # sessions are created through POST /api/sessions (owner token, world resolution)

    @admin.display(description="related records")
    def related(self, session):
        links = []
        for name, label, field in self.RELATED:
            try:
                links.append(format_html('<a href="{}?{}={}">{}</a>', reverse(name), field, session.pk, label))
            except NoReverseMatch:  # an app whose admin is not installed
                continue
        return format_html_join(" · ", "{}", ((link,) for link in links))


@admin.register(models.Character)
class CharacterAdmin(_ReadOnlyAdmin):
    list_display = ("character_id", "name", "type", "session", "version", "updated_at")
    list_filter = ("type",)
    search_fields = ("character_id", "name", "session__id")


@admin.register(models.ChatMessage)
class ChatMessageAdmin(_ReadOnlyAdmin):
    list_display = ("message_id", "session", "role", "kind", "turn_id", "created_at")
    list_filter = ("role", "kind")
    search_fields = ("message_id", "session__id", "content")


@admin.register(models.TurnMessage)
class TurnMessageAdmin(_ReadOnlyAdmin):
    list_display = ("session", "turn_id", "runtime_id", "role", "created_at")
    list_filter = ("role",)
    search_fields = ("session__id", "turn_id", "runtime_id")


@admin.register(models.LorebookEntry)
class LorebookEntryAdmin(admin.ModelAdmin):
    list_display = ("entry_id", "title", "owner", "plugin_id", "enabled", "strategy", "insertion_order", "session")
    list_filter = ("owner", "enabled", "strategy")
    search_fields = ("entry_id", "title", "content", "session__id")


@admin.register(models.DimensionValue)
class DimensionValueAdmin(_ReadOnlyAdmin):
    list_display = ("dimension_id", "session", "version", "updated_at")
    search_fields = ("dimension_id", "session__id")


@admin.register(models.CharacterSchema)
class CharacterSchemaAdmin(_ReadOnlyAdmin):
    list_display = ("session", "updated_at")


@admin.register(models.Snapshot)
class SnapshotAdmin(_ReadOnlyAdmin):
    list_display = ("snapshot_id", "session", "label", "completed_player_turns", "created_at")
    search_fields = ("snapshot_id", "label", "session__id")


@admin.register(models.Approval)
class ApprovalAdmin(_ReadOnlyAdmin):
    # The incarnation nonce is private (sessions.models.Session); it is not shown here either.
    list_display = ("id", "session_id", "plugin_id", "action", "status", "scope", "requested_at", "decided_at")
    list_filter = ("status", "scope")
    search_fields = ("session_id", "plugin_id", "action")
    exclude = ("incarnation",)
