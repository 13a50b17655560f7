"""Dev hot reload of one community plugin (spec 004 POST /api/plugins/:id/reload, 开发热重载).

Only when COVEL_PLUGIN_RELOAD_ENABLED (default: COVEL_DEBUG) and only for community packages;
builtin plugins and production servers need a restart. The package is read from disk again and
published as a new generation of this process's registry (``PluginRegistry.plugin_reload``); other
processes (web, workers) keep theirs until they restart or reload themselves. Its entry module is
imported again only when this process had imported it before — that runs plugin code, so the
session named in the request must hold the plugin's server-code grant now (or the package's install
source is trusted). A package whose entry this process never imported is re-read without running
any code: its entry waits for a grant as after a start.
"""
from __future__ import annotations

from typing import Any

from django.conf import settings

from covel.errors import ApiError, SessionNotFound
from plugins_app.discovery import SOURCE_BUILTIN
from plugins_app.errors import PluginNotFound, PluginReloadDisabled
from plugins_app.registry import HOST_LOADED, plugin_registry
from sessions.grants import code_missing, trusted_source_approved
from sessions.models import Session

CODE_SERVER_CODE_NOT_APPROVED = "server_code_not_approved"


def plugin_reload(plugin_id: str, *, session_id: str | None = None) -> dict[str, Any]:
    """Reload ``plugin_id`` in this process; returns ``{ok: true, pluginId, generation}``
    (``generation``: ``"<pluginId>@<n>"``, n counting this process's reloads of it).

    Raises 403 plugin_reload_disabled (feature off, or a builtin plugin), 404 plugin_not_found,
    404 session_not_found (``session_id`` names no session), 403 server_code_not_approved (the entry
    would run and the session holds no server-code grant, or no session was named for a package
    that needs one), 409 plugin_reload_failed (the package no longer loads; the old generation stays).
    """
    if not settings.COVEL_PLUGIN_RELOAD_ENABLED:
        raise PluginReloadDisabled()
    registry = plugin_registry()
    record = registry.get(plugin_id)
    if record is None:
        raise PluginNotFound(plugin_id)
    if record.source == SOURCE_BUILTIN:
        raise PluginReloadDisabled("Builtin plugins change only with a server restart")
    session = None
    if session_id is not None:
        session = Session.objects.filter(pk=session_id, deletion_state="").first()
        if session is None:
            raise SessionNotFound(session_id)
    runs_code = record.host_state == HOST_LOADED and bool(record.manifest.entry)
    if runs_code:
        granted = code_missing(session, record) is None if session is not None else trusted_source_approved(record)
        if not granted:
            raise ApiError(403, CODE_SERVER_CODE_NOT_APPROVED,
                           f"Reloading {plugin_id} runs its server code: name a session that holds its server-code grant")
    fresh = registry.plugin_reload(plugin_id, import_entry=runs_code)
    return {"ok": True, "pluginId": plugin_id, "generation": f"{plugin_id}@{fresh.reload_generation}"}
