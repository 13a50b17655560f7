"""GET /api/ui-specs (spec 004 §配置信息, GET /api/ui-specs): the plugins' UI declarations by slot.

Lives with the sessions app because ``?sessionId=`` narrows it to the session's active plugins and
is session-scoped (404 session_not_found, then the owner check). The catalogue itself is
plugins_app/ui_specs.py; the view files it links to are served by plugins_app/views.py.
"""
from __future__ import annotations

from django.http import HttpRequest
from ninja import Router

from covel.openapi import PUBLIC, contract
from plugins_app.registry import plugin_registry
from plugins_app.ui_specs import ui_specs
from sessions.auth import session_get_authorized
from sessions.schemas import UiSpecsOut, UiSpecsQuery
from sessions.selectors import runnable_plugins

router = Router(tags=["ui"])


@router.get("/ui-specs")
@contract(ok=UiSpecsOut, query=UiSpecsQuery, security=PUBLIC,
          errors={401: "session_owner_required (with sessionId, demo/commercial tiers)",
                  404: "session_not_found (with sessionId)"})
def list_ui_specs(request: HttpRequest):
    """``{right, message, view, segment, left, diagnostics}``: every plugin's checked UI specs, or with
    ``?sessionId=`` only the session's active plugins (and only their diagnostics). Reads UI JSON,
    HTML and published files only; imports no plugin code and needs no code approval."""
    registry = plugin_registry()
    session_id = (request.GET.get("sessionId") or "").strip()
    if not session_id:
        return ui_specs(registry)
    session = session_get_authorized(request, session_id)
    runnable, _ = runnable_plugins(session, registry)
    return ui_specs(registry, runnable)
