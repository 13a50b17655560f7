"""GET /api/sessions/:id/plugin-diagnostics: a read-only snapshot of the plugins' registrations and of
the session's recent calls into plugin code (spec 004 §GET /api/sessions/:id/plugin-diagnostics,
PluginDiagnosticsSnapshot). Reading it never imports an entry or runs plugin code.

``plugins[]`` uses the same read-only resolution as GET /api/sessions/:id/plugins
(``sessions.selectors.session_plugins``): ``sessionState`` is ``active | inactive |
approval-required | rejected`` (``rejected``: chosen but unavailable here), ``serverCodeApproved``
is computed from the session's live grants. ``registrations`` lists what the process actually has
registered for the plugin — only for a plugin active in the session, approved and not in hostState
``error``; empty otherwise (a loaded entry is not permission for this session to run it).
``error`` is a fixed text; ``registrationError`` ``{code: "plugin_registration_invalid",
registration: {kind, index?}}`` comes only from the host's own registration checks
(``contribution-not-implemented`` / ``registration-undeclared`` issues), never from an exception
text. ``calls`` / ``extensionCalls`` / ``history`` come from ``plugins_app.diagnostics``.
"""
from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Any

from plugins_app.diagnostics import SESSION_CALLS, calls_for, extension_calls
from plugins_app.errors import PluginNotFound
from plugins_app.registry import CODE_CONTRIBUTION_NOT_IMPLEMENTED, CODE_REGISTRATION_UNDECLARED, HOST_ERROR
from sessions.models import Session
from sessions.selectors import session_plugins

STATE_ACTIVE, STATE_INACTIVE, STATE_APPROVAL, STATE_REJECTED = "active", "inactive", "approval-required", "rejected"
CODE_REGISTRATION_INVALID = "plugin_registration_invalid"
ERROR_LOAD_FAILED = "The plugin failed to load; see the server log and GET /api/plugins/:id for its issues."
_REGISTRATION_FIELD = re.compile(r"^contributes\.(tools|actions|forms|services|hooks)(?:\.(\d+))?$")


def _session_state(item: dict[str, Any]) -> str:
    state = item.get("sessionState")
    if state == "unavailable":
        return STATE_REJECTED
    return state if state in (STATE_ACTIVE, STATE_APPROVAL) else STATE_INACTIVE


def _registrations(record) -> dict[str, Any]:
    regs = record.registrations
    hooks = [{"id": f"{record.id}:{event}:{index}", "event": event}
             for event, items in regs.hooks.items() for index, _ in enumerate(items)]
    services = [{"name": str(r.options.get("name") or contract), "contract": contract} for contract, r in regs.services.items()]
    extensions = []
    declared = {e.get("id"): e for e in record.manifest.contributes.extensions if isinstance(e, dict)}
    for extension_id, r in (getattr(regs, "extensions", None) or {}).items():
        item = {"point": r.options.get("point") or declared.get(extension_id, {}).get("point"), "id": extension_id}
        for key in ("order", "slot"):
            value = declared.get(extension_id, {}).get(key)
            if value is not None:
                item[key] = value
        extensions.append(item)
    return {"tools": list(regs.tools), "hooks": hooks, "actions": list(regs.rpcs), "services": services,
            "extensions": extensions}


def _empty_registrations() -> dict[str, Any]:
    return {"tools": [], "hooks": [], "actions": [], "services": [], "extensions": []}


def _registration_error(record) -> dict[str, Any] | None:
    for issue in record.issues:
        if issue.code not in (CODE_CONTRIBUTION_NOT_IMPLEMENTED, CODE_REGISTRATION_UNDECLARED):
            continue
        match = _REGISTRATION_FIELD.match(issue.field or "")
        registration: dict[str, Any] = {"kind": match.group(1) if match else "undeclared"}
        if match and match.group(2) is not None:
            registration["index"] = int(match.group(2))
        return {"code": CODE_REGISTRATION_INVALID, "registration": registration}
    return None


def plugin_diagnostics(session: Session, registry, *, plugin_id: str | None = None) -> dict[str, Any]:
    """The PluginDiagnosticsSnapshot of ``session`` (module docstring): ``{sessionId, capturedAt,
    plugins[], calls[], extensionCalls[], history: {scope: "process", limit: 100}}``.
    plugin_id: only that package (exact id) and the calls where it is caller or provider; 404
    plugin_not_found when no such plugin is installed."""
    if plugin_id is not None and registry.get(plugin_id) is None:
        raise PluginNotFound(plugin_id)
    view = session_plugins(session, registry)
    rows = []
    for item in view["items"]:
        if plugin_id is not None and item["id"] != plugin_id:
            continue
        record = registry.get(item["id"])
        state = _session_state(item)
        shows = state == STATE_ACTIVE and item.get("serverCodeApproved") and record.host_state != HOST_ERROR \
            and not item.get("paused")
        registrations = _registrations(record) if shows else _empty_registrations()
        row: dict[str, Any] = {
            "pluginId": record.id, "source": record.source, "active": bool(item.get("active")),
            "hostState": record.host_state, "sessionState": state,
            "serverCodeApproved": bool(item.get("serverCodeApproved")),
            "runtimeIds": [r.id for r in record.manifest.runtimes], "registrations": registrations,
            "commands": [{"name": c.get("name"), "action": c.get("action"), "registered": c.get("action") in registrations["actions"]}
                         for c in record.manifest.contributes.commands if isinstance(c, dict)],
        }
        for key in ("autoAdded", "rejection", "approvalRequired", "paused"):
            if item.get(key):
                row[key] = item[key]
        if record.host_state == HOST_ERROR:
            row["error"] = ERROR_LOAD_FAILED
        registration_error = _registration_error(record)
        if registration_error is not None:
            row["registrationError"] = registration_error
        rows.append(row)
    calls = calls_for(session.pk, session.incarnation, plugin_id=plugin_id)
    return {
        "sessionId": session.pk,
        "capturedAt": datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "plugins": rows, "calls": calls, "extensionCalls": extension_calls(calls),
        "history": {"scope": "process", "limit": SESSION_CALLS},
    }
