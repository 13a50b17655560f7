"""Documented shapes of the plugin platform routes (turns/api_plugins.py; spec 004
PluginDiagnosticsSnapshot, resume-fault, POST /api/plugins/:id/reload). Description only: the
routes build their bodies in sessions.plugin_diagnostics / sessions.selectors / sessions.plugin_reload."""
from __future__ import annotations

from typing import Any, Literal

from covel.openapi import Wire, WireIn


class DiagnosticsQuery(WireIn):
    plugin_id: str | None = None


class PluginRegistrations(Wire):
    tools: list[str]
    hooks: list[dict[str, str]]
    actions: list[str]
    services: list[dict[str, str]]
    extensions: list[dict[str, Any]]


class PluginDiagnosticsItem(Wire):
    plugin_id: str
    source: str
    active: bool
    host_state: str
    session_state: Literal["active", "inactive", "approval-required", "rejected"]
    server_code_approved: bool
    runtime_ids: list[str]
    registrations: PluginRegistrations
    commands: list[dict[str, Any]]
    auto_added: bool | None = None
    rejection: dict[str, Any] | None = None
    approval_required: bool | None = None
    paused: dict[str, Any] | None = None
    error: str | None = None
    registration_error: dict[str, Any] | None = None


class PluginCall(Wire):
    call_id: str
    caller_plugin_id: str
    provider_plugin_id: str
    name: str
    contract: str
    completed_at: str
    duration_ms: int
    outcome: Literal["success", "timeout", "cancelled", "error"]
    parent_call_id: str | None = None
    turn_id: str | None = None
    runtime_id: str | None = None
    error_code: str | None = None
    extension: dict[str, Any] | None = None


class DiagnosticsHistory(Wire):
    scope: Literal["process"]
    limit: int


class PluginDiagnosticsOut(Wire):
    """GET /api/sessions/:id/plugin-diagnostics."""

    session_id: str
    captured_at: str
    plugins: list[PluginDiagnosticsItem]
    calls: list[PluginCall]
    extension_calls: list[dict[str, Any]]
    history: DiagnosticsHistory


class SessionPluginsOut(Wire):
    """The GET /api/sessions/:id/plugins view (resume-fault answers it)."""

    items: list[dict[str, Any]]
    commands: list[dict[str, Any]]
    unavailable: list[dict[str, Any]]


class PluginReloadIn(WireIn):
    session_id: str | None = None


class PluginReloadOut(Wire):
    ok: bool
    plugin_id: str
    generation: str
