"""Reads of a session's approvals: which community code and actions are granted right now.

Spec 004 §RPC Approval 流程, §插件来源与 approval 行为, §社区插件授权, revoke 边界; spec 000 §第三方插件
server-code 审批边界. Every answer is read from the database when asked (no process cache), so a
decision made through one web process holds in every web process and worker at once, and a revoke
(a generation rotation) ends a grant everywhere at once.

A grant of ``action`` for ``plugin`` holds in ``session`` when an ``Approval`` row is ``allowed``
with the session's current incarnation, session generation and plugin generation, and either scope
``session``, or scope ``once`` unexpired (60 s) and unconsumed with the same payload (key order
ignored). Trusted sources (``trust.sources`` + a verified install receipt) satisfy
``covel:plugin-server-code`` and ``runtime:*`` only. Builtin plugins need no grant.

The writes (pending requests, decisions, revokes) are in ``sessions.approvals``.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any, Callable

from django.utils import timezone

from covel.times import iso
from plugins_app.trust import SERVER_CODE_ACTION, plugin_trust, runtime_action
from sessions.models import Approval, ApprovalGeneration, Session

GRANTED_BY_SESSION = "session"
GRANTED_BY_TRUSTED_SOURCE = "trusted-source"


def payload_hash(payload: Any) -> str:
    """SHA-256 of the payload's canonical JSON (sorted keys): equal payloads hash equal whatever their key order."""
    text = json.dumps(payload if payload is not None else {}, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def generations(session: Session, plugin_id: str) -> tuple[int, int]:
    """(session generation, plugin generation) as persisted now (0 when never rotated)."""
    rows = dict(ApprovalGeneration.objects.filter(session_id=session.pk, plugin_id__in=[ApprovalGeneration.SESSION_WIDE, plugin_id])
                .values_list("plugin_id", "generation"))
    return rows.get(ApprovalGeneration.SESSION_WIDE, 0), rows.get(plugin_id, 0) if plugin_id else 0


def current_rows(session: Session, plugin_id: str):
    """Approval rows of ``plugin_id`` made under the session's current incarnation and generations."""
    session_generation, plugin_generation = generations(session, plugin_id)
    return Approval.objects.filter(session_id=session.pk, incarnation=session.incarnation, plugin_id=plugin_id,
                                   session_generation=session_generation, plugin_generation=plugin_generation)


def grant_find(session: Session, plugin_id: str, action: str, payload: Any = None) -> Approval | None:
    """The grant of ``action`` that holds now: a session-scope grant first, else an unexpired,
    unconsumed once grant for this exact payload. None when there is none."""
    rows = current_rows(session, plugin_id).filter(action=action, status=Approval.STATUS_ALLOWED)
    granted = rows.filter(scope=Approval.SCOPE_SESSION).first()
    if granted is not None:
        return granted
    return (rows.filter(scope=Approval.SCOPE_ONCE, payload_hash=payload_hash(payload), expires_at__gt=timezone.now())
            .order_by("decided_at").first())


def trusted_source_approved(record) -> bool:
    """The package's install source is in trust.sources and its files are verified (spec 004 可信来源)."""
    return bool(record is not None and record.needs_code_grant and plugin_trust(record.manifest.root)["autoApproved"])


def code_granted_by(session: Session, record, action: str = SERVER_CODE_ACTION) -> str | None:
    """How a code action (server code or ``runtime:<id>``) of the community plugin ``record`` is
    granted in ``session``: ``"session"`` (a player's grant), ``"trusted-source"`` or None
    (serverCodeApprovedBy, spec 004 §会话插件管理). Builtin plugins need no grant (``code_missing``)."""
    if grant_find(session, record.id, action) is not None:
        return GRANTED_BY_SESSION
    if trusted_source_approved(record):
        return GRANTED_BY_TRUSTED_SOURCE
    return None


def code_missing(session: Session, record, runtime_ids: list[str] = ()) -> str | None:
    """The first code approval ``record`` still lacks in ``session``: ``covel:plugin-server-code``,
    then ``runtime:<id>`` in the order given; None when all hold (or the plugin is builtin)."""
    if record is None or not record.needs_code_grant:
        return None
    if trusted_source_approved(record):
        return None
    if grant_find(session, record.id, SERVER_CODE_ACTION) is None:
        return SERVER_CODE_ACTION
    for runtime_id in runtime_ids:
        if grant_find(session, record.id, runtime_action(runtime_id)) is None:
            return runtime_action(runtime_id)
    return None


def code_grant_checker(session_id: str, *, registry=None) -> Callable[[str, "str | None"], "str | None"]:
    """The grant checker the turn engine asks right before community code loads or runs
    (``turns.engine.env.CodeGrants``): ``(plugin_id, runtime_id | None) -> missing key | None``.
    Reads the session and its grants afresh on every call; a deleted session grants nothing."""

    def check(plugin_id: str, runtime_id: str | None) -> str | None:
        from plugins_app.registry import plugin_registry

        session = Session.objects.filter(pk=session_id).first()
        if session is None or session.deletion_state:
            return SERVER_CODE_ACTION
        record = (registry or plugin_registry()).get(plugin_id)
        if record is None:
            return SERVER_CODE_ACTION
        return code_missing(session, record, [runtime_id] if runtime_id else [])

    return check


def approval_out(approval: Approval) -> dict[str, Any]:
    """The pending approval as the client sees it (spec 004 202 body ``pending``)."""
    return {"approvalId": str(approval.id), "sessionId": approval.session_id, "pluginId": approval.plugin_id,
            "action": approval.action, "payload": approval.payload, "trustLevel": approval.trust_level,
            "requestedAt": iso(approval.requested_at), "description": approval.description}


def approvals_pending(session: Session) -> list[dict[str, Any]]:
    """GET /api/sessions/:id/approvals items: the session's pending requests still in scope, oldest first."""
    rows = Approval.objects.filter(session_id=session.pk, incarnation=session.incarnation, status=Approval.STATUS_PENDING)
    out = []
    for approval in rows.order_by("requested_at", "id"):
        if generations(session, approval.plugin_id) == (approval.session_generation, approval.plugin_generation):
            out.append(approval_out(approval))
    return out


def session_plugin_approval(session: Session, record, *, is_selected: bool) -> dict[str, Any]:
    """The approval fields of one GET /api/sessions/:id/plugins item (spec 004 §会话插件管理,
    §社区插件待授权状态): serverCodeApproved, serverCodeApprovedBy?, approvalRequired?."""
    if not record.needs_code_grant:
        return {"serverCodeApproved": True}
    by = code_granted_by(session, record)
    out: dict[str, Any] = {"serverCodeApproved": by is not None}
    if by is not None:
        out["serverCodeApprovedBy"] = by
    elif is_selected and needs_code(record):
        out["approvalRequired"] = True
    return out


def needs_code(record) -> bool:
    """A community package with anything to approve: an entry module or runtimes."""
    return bool(record.manifest.entry or record.manifest.runtimes)


def plugins_code_granted(session: Session, registry, plugin_ids: list[str]) -> list[str]:
    """The plugins of ``plugin_ids`` (order kept) whose code may run in ``session``: builtins, and
    community packages whose server code is granted (by the session or a trusted source). A granted
    community entry not imported in this process yet is loaded here (``entry_ensure``), after the
    check, as the registry requires; an entry that fails to load is left out."""
    out: list[str] = []
    for plugin_id in plugin_ids:
        record = registry.get(plugin_id)
        if record is None or code_missing(session, record) is not None:
            continue
        if record.is_code_pending:
            record = registry.entry_ensure(plugin_id)
            if record is None or not record.is_loaded or record.is_code_pending:
                continue
        out.append(plugin_id)
    return out
