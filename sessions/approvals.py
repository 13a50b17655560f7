"""Approvals of community plugin code and actions: pending requests, decisions, revokes (the writes).

Spec 004 §RPC Approval 流程, §插件来源与 approval 行为, §社区插件授权, §社区插件待授权状态, revoke 边界;
spec 000 §第三方插件 server-code / plugin tool 审批边界. The reads (does a grant hold now?) are in
``sessions.grants``; both work on the ``Approval`` / ``ApprovalGeneration`` tables, never on process
memory (ARCHITECTURE "Things every instance must agree on"), which is stricter than the spec's
in-memory store: a decision made through one web process holds in every process, survives restarts
and a revoke ends it everywhere at once.

Flow: a request that would run community code (``/api/actions``, ``plugin-rpc``) asks for the first
missing grant with ``approval_request`` — an existing pending request with the same (generations,
plugin, action, payload) is reused — which raises ``ApprovalRequired`` (202, nothing written but
the pending row). The player decides with ``approval_decide``; the client repeats the request.
Builtin plugins never ask. Trusted sources satisfy server code and runtimes, never actions/events.
"""
from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any, NoReturn

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from covel.auth import is_operator, owner_checks_enabled
from covel.errors import SessionNotFound, Unauthorized
from plugins_app.code_loading import runtime_code_preload
from plugins_app.trust import (
    EVENT_ACTION_PREFIX, RUNTIME_ACTION_PREFIX, SERVER_CODE_ACTION, is_code_action, runtime_action,
)
from sessions.auth import session_owner_check
from sessions.errors import (
    ApprovalNotFound, ApprovalQueueFull, ApprovalRequired, ApprovalScopeChanged, InvalidRequest,
)
from sessions.grants import (
    approval_out, code_missing, current_rows, generations, grant_find, payload_hash, trusted_source_approved,
)
from sessions.models import Approval, ApprovalGeneration, Session
from sessions.selectors import runnable_plugins

#: An allow-once grant is good for one identical request within this many seconds (spec 004).
ONCE_GRANT_SECONDS = 60
#: Pending requests a session may hold (more → 429 queue_full).
PENDING_MAX_PER_SESSION = 64

DECISION_ALLOW = "allow"
DECISION_DENY = "deny"
AUTO_TRIGGERS = ("auto", "scheduled")
REQUEST_RETRY_RUNTIME = "retry_runtime"
REQUEST_RETRY_FAILED_RUNTIMES = "retry_failed_runtimes"


def _registry(registry=None):
    if registry is not None:
        return registry
    from plugins_app.registry import plugin_registry

    return plugin_registry()


def _plugin_name(record) -> str:
    name = record.manifest.display_name
    if isinstance(name, dict):
        name = name.get("en") or name.get("en-US") or next(iter(name.values()), None)
    return str(name or record.id)


def _description(record, action: str) -> str:
    if action == SERVER_CODE_ACTION:
        return f"Load the server code of the community plugin {_plugin_name(record)} into this server"
    if action.startswith(RUNTIME_ACTION_PREFIX):
        return f"Run the runtime {action[len(RUNTIME_ACTION_PREFIX):]} of {_plugin_name(record)}"
    if action.startswith(EVENT_ACTION_PREFIX):
        return f"Let {_plugin_name(record)} emit the event {action[len(EVENT_ACTION_PREFIX):]}"
    return f"Run the action {action} of {_plugin_name(record)}"


# ---------------------------------------------------------------------------------------------
# Asking
# ---------------------------------------------------------------------------------------------


def approval_request(session: Session, record, action: str, *, payload: Any = None) -> NoReturn:
    """Ask the player for ``action`` of the community plugin ``record``: reuse the pending request
    with the same generations, plugin, action and payload (code approvals ignore the payload), or
    create one. Always raises ApprovalRequired (202); 429 queue_full when the session already holds
    PENDING_MAX_PER_SESSION pending requests."""
    session_generation, plugin_generation = generations(session, record.id)
    digest = payload_hash({} if is_code_action(action) else payload)
    with transaction.atomic():
        pending = current_rows(session, record.id).filter(action=action, payload_hash=digest,
                                                          status=Approval.STATUS_PENDING).first()
        if pending is None:
            # Rows of an earlier incarnation of this id can never apply again.
            Approval.objects.filter(session_id=session.pk).exclude(incarnation=session.incarnation).delete()
            count = Approval.objects.filter(session_id=session.pk, status=Approval.STATUS_PENDING).count()
            if count >= PENDING_MAX_PER_SESSION:
                raise ApprovalQueueFull(PENDING_MAX_PER_SESSION)
            pending = Approval.objects.create(
                session_id=session.pk, incarnation=session.incarnation, session_generation=session_generation,
                plugin_generation=plugin_generation, plugin_id=record.id, action=action,
                payload=payload if payload is not None else {}, payload_hash=digest,
                trust_level=record.source, description=_description(record, action),
            )
    raise ApprovalRequired(approval_out(pending))


def code_gate(session: Session, record, runtime_ids: list[str] = (), *, payload: Any = None) -> None:
    """Raise ApprovalRequired for the first code grant ``record`` lacks (server code, then each
    ``runtime:<id>`` in order); return when all hold or the plugin is builtin."""
    missing = code_missing(session, record, list(runtime_ids))
    if missing is not None:
        approval_request(session, record, missing, payload=payload)


def action_grant(session: Session, record, action: str, *, payload: Any = None) -> Approval | None:
    """The grant an ordinary action (or ``event:<topic>``) of a community plugin runs under: a
    session grant, or an allow-once grant for this exact payload (consume it with
    ``once_grant_consume`` right before running). Builtin plugins: None. Raises ApprovalRequired
    when there is none (trusted sources do not count here)."""
    if not record.needs_code_grant:
        return None
    granted = grant_find(session, record.id, action, payload)
    if granted is None:
        approval_request(session, record, action, payload=payload)
    return granted


def once_grant_consume(session: Session, record, granted: Approval | None, *, payload: Any = None) -> None:
    """Use up an allow-once grant (atomically: of two identical requests only one runs); a session
    grant or None is left alone. Raises ApprovalRequired when the once grant was used meanwhile."""
    if granted is None or granted.scope != Approval.SCOPE_ONCE:
        return
    used = Approval.objects.filter(pk=granted.pk, status=Approval.STATUS_ALLOWED, expires_at__gt=timezone.now()).update(
        status=Approval.STATUS_CONSUMED)
    if not used:
        approval_request(session, record, granted.action, payload=payload)


def _is_auto(runtime) -> bool:
    return runtime.trigger.type in AUTO_TRIGGERS and runtime.stage is not None and not runtime.is_subagent_only


def actions_gate(session: Session, *, request_type: str, payload: dict[str, Any], registry=None) -> None:
    """POST /api/actions: before any stream or write, every community plugin the request would run
    must hold its code grants (spec 004 §社区插件授权). Checked: the runnable plugins' auto runtimes
    (setup included) and subagent providers; for retry_runtime / retry_failed_runtimes only the
    targets and subagent providers. Raises ApprovalRequired for the first missing grant, one at a time."""
    registry = _registry(registry)
    runnable, _ = runnable_plugins(session, registry)
    targets: set[str] | None = None
    if request_type == REQUEST_RETRY_RUNTIME:
        targets = {payload.get("runtimeId")}
    elif request_type == REQUEST_RETRY_FAILED_RUNTIMES:
        targets = set(payload.get("runtimeIds") or [])
    for plugin_id in runnable:
        record = registry.get(plugin_id)
        if record is None or not record.needs_code_grant:
            continue
        ids = [r.id for r in record.manifest.runtimes
               if r.is_subagent_only or (r.id in targets if targets is not None else _is_auto(r))]
        if ids:
            code_gate(session, record, ids, payload=payload)


# ---------------------------------------------------------------------------------------------
# Revoking
# ---------------------------------------------------------------------------------------------


def generation_rotate(session: Session, plugin_id: str = ApprovalGeneration.SESSION_WIDE) -> None:
    """Increment the session's (``plugin_id`` "") or one plugin's grant generation. Call inside the
    transaction that holds the session row lock (session_plugin_set, approvals_revoke)."""
    row, _ = ApprovalGeneration.objects.get_or_create(session=session, plugin_id=plugin_id)
    ApprovalGeneration.objects.filter(pk=row.pk).update(generation=F("generation") + 1)


def _grants_in_scope(session: Session, plugin_id: str | None) -> list[Approval]:
    now = timezone.now()
    rows = Approval.objects.filter(session_id=session.pk, incarnation=session.incarnation,
                                   status__in=(Approval.STATUS_ALLOWED, Approval.STATUS_PENDING))
    if plugin_id is not None:
        rows = rows.filter(plugin_id=plugin_id)
    out = []
    for approval in rows:
        if generations(session, approval.plugin_id) != (approval.session_generation, approval.plugin_generation):
            continue
        if approval.status == Approval.STATUS_ALLOWED and approval.scope == Approval.SCOPE_ONCE and \
                (approval.expires_at is None or approval.expires_at <= now):
            continue
        out.append(approval)
    return out


def approvals_revoke(session_id: str, *, plugin_id: str | None = None) -> int:
    """DELETE /api/sessions/:id/approvals[?pluginId=]: under the session row lock, rotate the
    session's (or the plugin's) persisted grant generation and retire its grants and pending
    requests, so every process refuses them at once; old approvalIds then answer 409
    approval_scope_changed. Trusted-source policy is not affected. Returns ``cleared``: the session
    and once grants that held (pending requests drop out of the list, not counted). 404 session_not_found."""
    with transaction.atomic():
        session = Session.objects.select_for_update().filter(pk=session_id).first()
        if session is None:
            raise SessionNotFound(session_id)
        retired = [a for a in _grants_in_scope(session, plugin_id) if a.status == Approval.STATUS_ALLOWED]
        Approval.objects.filter(pk__in=[a.pk for a in retired]).update(status=Approval.STATUS_STALE)
        # Pending rows stay as they are: under the old generation they are no longer listed, and a
        # decision on one answers 409 approval_scope_changed (spec 004 revoke 边界).
        generation_rotate(session, plugin_id if plugin_id is not None else ApprovalGeneration.SESSION_WIDE)
    return len(retired)


def plugin_grants_revoke(session: Session, plugin_id: str) -> None:
    """Disabling a plugin revokes its grants (spec 004 DELETE /api/sessions/:id/plugins/:pluginId);
    call inside the transaction holding the session row lock."""
    retired = [a for a in _grants_in_scope(session, plugin_id) if a.status == Approval.STATUS_ALLOWED]
    Approval.objects.filter(pk__in=[a.pk for a in retired]).update(status=Approval.STATUS_STALE)
    generation_rotate(session, plugin_id)


# ---------------------------------------------------------------------------------------------
# Deciding
# ---------------------------------------------------------------------------------------------


def _decision_parse(body: Any, action: str) -> tuple[str, str | None]:
    if not isinstance(body, dict):
        raise InvalidRequest(code="invalid_request_body", message="body must be { decision, scope? }")
    decision = body.get("decision")
    if decision not in (DECISION_ALLOW, DECISION_DENY):
        raise InvalidRequest(code="invalid_decision", message='decision must be "allow" or "deny"')
    scope = body.get("scope")
    if scope is not None and scope not in (Approval.SCOPE_ONCE, Approval.SCOPE_SESSION):
        raise InvalidRequest(code="invalid_scope", message='scope must be "once" or "session"')
    if decision == DECISION_DENY:
        return decision, None
    scope = scope or Approval.SCOPE_ONCE
    if is_code_action(action) and scope != Approval.SCOPE_SESSION:
        raise InvalidRequest(code="invalid_scope",
                             message=f'{action} loads long-lived code: only scope "session" is accepted')
    return decision, scope


def _in_scope(session: Session | None, approval: Approval, registry) -> bool:
    if session is None or session.deletion_state or session.incarnation != approval.incarnation:
        return False
    if generations(session, approval.plugin_id) != (approval.session_generation, approval.plugin_generation):
        return False
    runnable, _ = runnable_plugins(session, registry)
    return approval.plugin_id in runnable


def approval_decide(request, approval_id: str, body: Any, *, registry=None) -> dict[str, Any]:
    """POST /api/approvals/:approvalId/decision ``{decision: allow|deny, scope?: once|session}``.

    Checks, in order: 404 approval_not_found (unknown or already decided), 404 session_not_found,
    401 session_owner_required (the session's owner or the operator), 401 operator_token_required
    (demo/commercial: community approvals need the operator token), 400 invalid_decision /
    invalid_scope (scope defaults to once; server-code and runtime approvals accept only session),
    409 approval_scope_changed (revoked, plugin disabled, session deleting or re-created). A failed
    check consumes nothing. allow once: one identical request within 60 s; allow session: until
    revoked; deny: nothing runs. After allowing server code or a runtime the plugin's granted code
    is imported in this process; modules that fail are listed in ``runtimeLoadErrors`` (the grant
    stands). Returns ``{ok, decision, scope?, pending, runtimeLoadErrors?}``.
    """
    registry = _registry(registry)
    try:
        key = uuid.UUID(str(approval_id))
    except ValueError:
        raise ApprovalNotFound(approval_id) from None
    approval = Approval.objects.filter(pk=key).first()
    if approval is None or approval.status != Approval.STATUS_PENDING:
        raise ApprovalNotFound(approval_id)
    session = Session.objects.filter(pk=approval.session_id).first()
    if session is None:
        raise SessionNotFound(approval.session_id)
    session_owner_check(request, session)
    if owner_checks_enabled() and not is_operator(request):
        raise Unauthorized(code="operator_token_required", message="Community plugin approvals need the operator token")
    decision, scope = _decision_parse(body, approval.action)
    is_stale = False
    with transaction.atomic():
        session = Session.objects.select_for_update().filter(pk=approval.session_id).first()
        approval = Approval.objects.select_for_update().filter(pk=key).first()
        if approval is None or approval.status != Approval.STATUS_PENDING:
            raise ApprovalNotFound(approval_id)
        if not _in_scope(session, approval, registry):
            approval.status = Approval.STATUS_STALE
            approval.save(update_fields=["status"])
            is_stale = True
        else:
            now = timezone.now()
            approval.decided_at = now
            if decision == DECISION_ALLOW:
                approval.status, approval.scope = Approval.STATUS_ALLOWED, scope
                approval.expires_at = now + timedelta(seconds=ONCE_GRANT_SECONDS) if scope == Approval.SCOPE_ONCE else None
            else:
                approval.status = Approval.STATUS_DENIED
            approval.save(update_fields=["status", "scope", "decided_at", "expires_at"])
    if is_stale:
        raise ApprovalScopeChanged()
    out: dict[str, Any] = {"ok": True, "decision": decision, "pending": approval_out(approval)}
    if decision == DECISION_ALLOW:
        out["scope"] = scope
        if is_code_action(approval.action):
            errors = _granted_code_load(session, registry.get(approval.plugin_id), approval.action, registry)
            if errors:
                out["runtimeLoadErrors"] = errors
    return out


def _granted_code_load(session: Session, record, action: str, registry) -> list[dict[str, str]]:
    """Import what the session may now run of ``record`` (spec 004: allow 之后，服务端立即为这个会话加载
    该插件已获授权的 runtime): the entry once server code is granted, and the handler/guard modules of
    every runtime granted (server code: all granted so far; runtime:<id>: that one)."""
    if record is None or code_missing(session, record) is not None:
        return []  # a runtime grant before the server-code grant loads nothing yet
    if action == SERVER_CODE_ACTION:
        runtimes = [r for r in record.manifest.runtimes
                    if trusted_source_approved(record) or grant_find(session, record.id, runtime_action(r.id)) is not None]
    else:
        runtimes = [r for r in record.manifest.runtimes if runtime_action(r.id) == action]
    if record.is_code_pending:
        record = registry.entry_ensure(record.id)
    if not record.is_loaded:
        return [{"runtimeId": r.id, "error": record.error or "the plugin entry failed to load"} for r in runtimes]
    errors = []
    for runtime in runtimes:
        error = runtime_code_preload(record.manifest.root, runtime)
        if error is not None:
            errors.append({"runtimeId": runtime.id, "error": error})
    return errors
