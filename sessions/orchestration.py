"""A session's orchestration settings (spec 004 §会话编排设置): which turn policy runs the cast, and
the actor and sub-agent quotas. One concern with one read and one write, like sessions/approvals.py.

Stored in ``metadata.orchestration`` as ``{turnPolicy?: {pluginId, name}, maxActors, maxSubagentCalls}``;
it travels with snapshots and forks (turns.snapshots CAPTURED_METADATA). Reading enumerates the
``turn-policy@1`` services the session's active, granted plugins registered, without running any
service or importing unapproved code. Choosing a policy never activates or approves a plugin; an
edit affects the next execution.
"""
from __future__ import annotations

from typing import Any

from django.db import transaction

from covel.errors import SessionNotFound
from plugins_app.manifest_build import service_tool_name
from plugins_app.registry import plugin_registry
from sessions import locks
from sessions.errors import InvalidRequest, SessionDeleting, SessionEnded
from sessions.faults import plugins_paused
from sessions.grants import code_missing
from sessions.models import Session
from sessions.selectors import runnable_plugins

ORCHESTRATION_KEY = "orchestration"
TURN_POLICY_CONTRACT = "turn-policy@1"
FIELDS = ("turnPolicy", "maxActors", "maxSubagentCalls")
MAX_ACTORS_DEFAULT, MAX_ACTORS_MAX = 4, 16
MAX_SUBAGENT_CALLS_DEFAULT, MAX_SUBAGENT_CALLS_MAX = 16, 64
POLICY_AVAILABLE, POLICY_PAUSED, POLICY_UNAVAILABLE = "available", "paused", "unavailable"
STATUS_SELECTED, STATUS_UNIQUE, STATUS_MISSING, STATUS_AMBIGUOUS, STATUS_PAUSED = (
    "selected", "unique", "missing", "ambiguous", "paused")
INVALID_ORCHESTRATION = "invalid_orchestration"


def _count(value: Any, maximum: int) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= maximum:
        return None
    return value


def _policy_ref(value: Any) -> dict[str, str] | None:
    if not isinstance(value, dict) or set(value) != {"pluginId", "name"}:
        return None
    if not all(isinstance(value[k], str) and value[k] for k in ("pluginId", "name")):
        return None
    return {"pluginId": value["pluginId"], "name": value["name"]}


def orchestration_settings(session: Session) -> dict[str, Any]:
    """The normalized ``metadata.orchestration``: defaults for absent or malformed quotas; a saved
    ``turnPolicy`` is kept whether or not it is still available."""
    return orchestration_from_metadata(session.metadata)


def orchestration_from_metadata(metadata: dict[str, Any] | None) -> dict[str, Any]:
    """orchestration_settings over a session's metadata dict (the turn engine reads its snapshot's):
    ``{turnPolicy?: {pluginId, name}, maxActors, maxSubagentCalls}``."""
    raw = (metadata or {}).get(ORCHESTRATION_KEY)
    raw = raw if isinstance(raw, dict) else {}
    out: dict[str, Any] = {}
    policy = _policy_ref(raw.get("turnPolicy"))
    if policy is not None:
        out["turnPolicy"] = policy
    actors = _count(raw.get("maxActors"), MAX_ACTORS_MAX)
    calls = _count(raw.get("maxSubagentCalls"), MAX_SUBAGENT_CALLS_MAX)
    out["maxActors"] = MAX_ACTORS_DEFAULT if actors is None else actors
    out["maxSubagentCalls"] = MAX_SUBAGENT_CALLS_DEFAULT if calls is None else calls
    return out


def turn_policies(session: Session, registry) -> list[dict[str, Any]]:
    """``[{pluginId, name, label, status}]``: the turn-policy services of the session's active plugins
    whose code is granted (builtins need no grant). A loaded entry lists what it registered (name and
    label from the registration's options, else the contract's tool name); a granted community entry
    not imported in this process yet lists what it declares. Paused plugins (sessions.faults) are
    ``paused``. Never imports or runs plugin code."""
    runnable, _ = runnable_plugins(session, registry)
    paused = plugins_paused(session.metadata)
    out: list[dict[str, Any]] = []
    for plugin_id in runnable:
        record = registry.get(plugin_id)
        if record is None or code_missing(session, record) is not None:
            continue
        if record.is_code_pending:
            options: dict[str, Any] | None = {} if TURN_POLICY_CONTRACT in record.manifest.contributes.services else None
        else:
            registration = record.registrations.services.get(TURN_POLICY_CONTRACT)
            options = dict(registration.options) if registration is not None else None
        if options is None:
            continue
        name = options.get("name") if isinstance(options.get("name"), str) and options.get("name") else service_tool_name(TURN_POLICY_CONTRACT)
        label = options.get("label") if isinstance(options.get("label"), (str, dict)) else name
        out.append({"pluginId": plugin_id, "name": name, "label": label,
                    "status": POLICY_PAUSED if plugin_id in paused else POLICY_AVAILABLE})
    return out


def orchestration_get(session: Session, registry=None) -> dict[str, Any]:
    """GET /api/sessions/:id/orchestration: ``{settings, policies, status}``.

    A saved selection no policy matches is listed as ``unavailable``. status: ``selected`` (the
    saved policy is available), ``paused`` (it is paused), ``missing`` (it is gone, or nothing is
    saved and no policy exists), ``unique`` (nothing saved, exactly one policy), ``ambiguous``
    (nothing saved, several).
    """
    settings_out = orchestration_settings(session)
    policies = turn_policies(session, registry or plugin_registry())
    chosen = settings_out.get("turnPolicy")
    if chosen is None:
        usable = [p for p in policies if p["status"] == POLICY_AVAILABLE]
        status = STATUS_UNIQUE if len(usable) == 1 else STATUS_MISSING if not usable else STATUS_AMBIGUOUS
    else:
        match = next((p for p in policies if (p["pluginId"], p["name"]) == (chosen["pluginId"], chosen["name"])), None)
        if match is None:
            policies.append({**chosen, "label": chosen["name"], "status": POLICY_UNAVAILABLE})
            status = STATUS_MISSING
        else:
            status = STATUS_SELECTED if match["status"] == POLICY_AVAILABLE else STATUS_PAUSED
    return {"settings": settings_out, "policies": policies, "status": status}


def _invalid(message: str, **details: Any) -> InvalidRequest:
    return InvalidRequest(code=INVALID_ORCHESTRATION, message=message, details=details or None)


def orchestration_patch_check(patch: Any) -> dict[str, Any]:
    """The accepted fields of a PATCH body, or 400 invalid_orchestration: an object with only
    turnPolicy (``{pluginId, name}`` or null), maxActors (integer 0-16), maxSubagentCalls (0-64)."""
    if not isinstance(patch, dict):
        raise _invalid("body must be an object")
    unknown = sorted(set(patch) - set(FIELDS))
    if unknown:
        raise _invalid(f"unknown field(s): {', '.join(unknown)}; only {', '.join(FIELDS)} can be set", unknown=unknown)
    if "maxActors" in patch and _count(patch["maxActors"], MAX_ACTORS_MAX) is None:
        raise _invalid(f"maxActors must be an integer 0-{MAX_ACTORS_MAX}", field="maxActors")
    if "maxSubagentCalls" in patch and _count(patch["maxSubagentCalls"], MAX_SUBAGENT_CALLS_MAX) is None:
        raise _invalid(f"maxSubagentCalls must be an integer 0-{MAX_SUBAGENT_CALLS_MAX}", field="maxSubagentCalls")
    if "turnPolicy" in patch and patch["turnPolicy"] is not None and _policy_ref(patch["turnPolicy"]) is None:
        raise _invalid("turnPolicy must be null or {pluginId, name}", field="turnPolicy")
    return dict(patch)


def orchestration_update(session_id: str, patch: Any) -> dict[str, Any]:
    """PATCH /api/sessions/:id/orchestration: merge the given fields into ``metadata.orchestration``
    field by field (absent fields unchanged, ``turnPolicy: null`` clears the choice, the rest of
    metadata kept). Returns the new GET body.

    Runs under the session's execution lock and row lock, so it lands between executions (503
    session_busy when the lock is not acquired in time). 400 invalid_orchestration for a body
    orchestration_patch_check refuses or a new turnPolicy that is none of the session's policies
    (changing only the quotas keeps a saved selection that has become unavailable); 409
    session_deleting / session_ended. Nothing is written on error.
    """
    patch = orchestration_patch_check(patch)
    registry = plugin_registry()
    with locks.session_lock(session_id), transaction.atomic():
        session = Session.objects.select_for_update().filter(pk=session_id).first()
        if session is None:
            raise SessionNotFound(session_id)
        if session.deletion_state == Session.DELETION_DELETING:
            raise SessionDeleting()
        if session.status == Session.STATUS_ENDED:
            raise SessionEnded()
        if patch.get("turnPolicy") is not None:
            wanted = _policy_ref(patch["turnPolicy"])
            known = {(p["pluginId"], p["name"]) for p in turn_policies(session, registry)}
            if (wanted["pluginId"], wanted["name"]) not in known:
                raise _invalid(f"{wanted['pluginId']}:{wanted['name']} is not a turn policy of this session", field="turnPolicy")
        meta = dict(session.metadata or {})
        saved = dict(meta.get(ORCHESTRATION_KEY) or {}) if isinstance(meta.get(ORCHESTRATION_KEY), dict) else {}
        for name in FIELDS:
            if name not in patch:
                continue
            if name == "turnPolicy" and patch[name] is None:
                saved.pop(name, None)
            else:
                saved[name] = _policy_ref(patch[name]) if name == "turnPolicy" else patch[name]
        meta[ORCHESTRATION_KEY] = saved
        session.metadata = meta
        session.save(update_fields=["metadata", "updated_at"])
    return orchestration_get(session, registry)
