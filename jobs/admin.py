"""Django admin for operators: runtime jobs they can act on (retry, cancel — through the same services
as the REST endpoints, so leases, fencing and job-status events hold), a jobs overview page, world
generations and server settings. Rows only the engine creates cannot be added or edited here."""
from __future__ import annotations

from datetime import timedelta

from django.contrib import admin, messages
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html

from covel.errors import ApiError

from . import models
from . import selectors
from . import services



class _AgeFilter(admin.SimpleListFilter):
    title = "age"
    parameter_name = "age"
    BOUNDS = {"1h": timedelta(hours=1), "1d": timedelta(days=1), "7d": timedelta(days=7)}

    def lookups(self, request, model_admin):
        return [("1h", "last hour"), ("1d", "last day"), ("7d", "last week"), ("older", "older than a week")]

    def queryset(self, request, queryset):
        value = self.value()
        if value in self.BOUNDS:
            return queryset.filter(created_at__gte=timezone.now() - self.BOUNDS[value])
        if value == "older":
            return queryset.filter(created_at__lt=timezone.now() - self.BOUNDS["7d"])
        return queryset


@admin.register(models.RuntimeJob)
class RuntimeJobAdmin(admin.ModelAdmin):
    """Runtime jobs (spec 004 §Staged Runtime 后台作业): read-only records with Retry and Cancel."""

    list_display = ("id", "session_link", "plugin_id", "runtime_id", "status", "reason", "attempts", "lease_owner",
                    "created_at", "updated_at")
    list_filter = ("status", "plugin_id", _AgeFilter)
    search_fields = ("id", "session__id", "runtime_id", "plugin_id")
    ordering = ("-created_at",)
    list_select_related = ("session",)
    actions = ("retry_jobs", "cancel_jobs")
    readonly_fields = ("id", "session_link", "plugin_id", "runtime_id", "status", "fencing_token", "lease_owner",
                       "lease_expires_at", "attempts", "payload", "result", "error", "created_at", "updated_at")
    exclude = ("session",)
    change_list_template = "admin/jobs/runtimejob/change_list.html"

    def has_add_permission(self, request):
        return False  # jobs come from turns, plugin RPC and retries, never from a form

    def has_change_permission(self, request, obj=None):
        # The change form is a read-only record (Django shows it with view permission only).
        return False

    @admin.display(description="session", ordering="session__id")
    def session_link(self, job):
        url = reverse("admin:covel_sessions_session_change", args=[job.session_id])
        return format_html('<a href="{}">{}</a>', url, job.session_id)

    @admin.display(description="reason")
    def reason(self, job):
        return (job.error or {}).get("reason", "") if isinstance(job.error, dict) else ""

    def _each(self, request, queryset, act, done_label: str) -> None:
        done, refused = 0, []
        for job in queryset.select_related("session"):
            try:
                act(job)
                done += 1
            except ApiError as exc:
                refused.append(f"{job.id}: {exc.message}")
        if done:
            self.message_user(request, f"{done} job(s) {done_label}.", messages.SUCCESS)
        for line in refused:
            self.message_user(request, line, messages.WARNING)

    @admin.action(description="Retry selected jobs (failed, timed out, cancelled, stale or orphaned)")
    def retry_jobs(self, request, queryset):
        self._each(request, queryset, lambda job: services.runtime_job_retry(session=job.session, job_id=str(job.id)),
                   "re-queued as new jobs")

    @admin.action(description="Cancel selected jobs (queued, claimed or running)")
    def cancel_jobs(self, request, queryset):
        self._each(request, queryset, lambda job: services.runtime_job_cancel(session_id=job.session_id,
                                                                             job_id=str(job.id)), "cancelled")

    def get_urls(self):
        return [path("overview/", self.admin_site.admin_view(self.overview_view), name="jobs_runtimejob_overview"),
                *super().get_urls()]

    def overview_view(self, request):
        """Per queue: counts by status and the oldest queued item's age (jobs.selectors.background_overview);
        the workers consuming each queue (covel.workers, cached briefly) and holding job leases now."""
        from covel.workers import queue_consumers

        overview = selectors.background_overview()
        queues = overview["queues"]

        def age(queue):
            seconds = queues[queue]["oldestQueuedSeconds"]
            return int(seconds) if seconds is not None else None

        consumers = queue_consumers()
        context = {
            **self.admin_site.each_context(request),
            "title": "Background work overview",
            "job_counts": sorted(queues["jobs"]["counts"].items()),
            "oldest_queued_seconds": age("jobs"),
            "execution_counts": sorted(queues["turns"]["counts"].items()),
            "oldest_queued_execution_seconds": age("turns"),
            "generation_counts": sorted(queues["worldgen"]["counts"].items()),
            "oldest_queued_generation_seconds": age("worldgen"),
            "consumers": sorted(consumers.queues.items()),
            "consumers_error": consumers.error,
            "workers": overview["leaseHolders"],
            "opts": self.model._meta,
        }
        return TemplateResponse(request, "admin/jobs/overview.html", context)


@admin.register(models.WorldGeneration)
class WorldGenerationAdmin(admin.ModelAdmin):
    """World-generation runs (queue ``worldgen``): status and the frames relayed to the client."""

    list_display = ("id", "status", "world_id", "created_at", "updated_at")
    list_filter = ("status",)
    search_fields = ("id", "world_id")
    ordering = ("-created_at",)
    readonly_fields = ("status", "request", "frames", "world_id", "created_at", "updated_at")

    def has_add_permission(self, request):
        return False


@admin.register(models.ServerSetting)
class ServerSettingAdmin(admin.ModelAdmin):
    list_display = ("key", "updated_at")
    search_fields = ("key",)
