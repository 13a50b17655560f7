"""Suspension services: list, resume, abandon and the expiry sweep (spec 004 §Suspend / Resume).

The engine saves suspensions with the turn that made them (turns.engine.suspend). Here:

- ``suspensions_list(session)``: the pending SuspensionSummary items, oldest first.
- ``suspension_resume(session, suspension_id, body, ...)`` -> (status, body): validates
  ``{data}`` against the row's resumeSchema (JSON Schema Draft 2020-12: 400 resume_schema_invalid /
  resume_data_invalid, nothing claimed), then under the session lock: 409 when already processed
  or being resumed, 202 approval-required for a community runtime without its code grants (the
  client decides and repeats the request), 409 suspension_outdated (``details.reason`` session-moved-on / plugin-updated /
  data-changed: the row is voided as an abandonment), a claim (status ``resuming``), the run and
  its commit. 200 ``{result: {status, runtimeId, pluginId, suspensionId, output}, events}``;
  500 ``Resume failed: <reason>`` or ``Resume commit failed: <reason>. ...`` release the claim.
- ``suspension_abandon(session, suspension_id)``: deletes the row; when it was the last one its
  logical turn waited on, the turn counts and the detached jobs it held are queued (spec 004
  §挂起与回合计数); its ctx.progress job ends ``cancelled``; a setup runtime's attempt counts as
  failed. Expiry (the sweep) and suspension_outdated void a row the same way
  (turns.engine.suspend.abandon_in_transaction).
- ``suspensions_sweep()``: at most every COVEL_SUSPENSION_SWEEP_SECONDS, abandons expired rows and
  releases ``resuming`` claims older than the longest resume (a process that died mid-resume).
  Runs before the list and resume routes (a new process sweeps on its first such request); a
  failure never fails the request. When an embedded (single-process) server starts, every claim
  is released at once (``suspension_claims_release_all``): no other process can be resuming.
"""
from __future__ import annotations

import logging
import threading
import time
from datetime import timedelta
from typing import Any

import jsonschema
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from covel.errors import ApiError
from sessions import approvals, locks
from sessions.grants import code_grant_checker
from turns.engine.commit import CommitFailed
from turns.engine.suspend import (
    STATUS_PENDING,
    STATUS_RESUMING,
    SuspensionOutdated,
    abandon_in_transaction,
    staleness_check,
    suspension_expired,
)
from turns.engine.resume import suspension_resume_run

logger = logging.getLogger(__name__)

CODE_RESUME_DATA_INVALID = "resume_data_invalid"
CODE_RESUME_SCHEMA_INVALID = "resume_schema_invalid"
CODE_SUSPENSION_OUTDATED = "suspension_outdated"
#: Most schema errors listed in a resume_data_invalid answer.
DATA_ERRORS_MAX = 20
OUTDATED_MESSAGES = {
    "session-moved-on": "This request is out of date: the story has moved on since it was asked.",
    "plugin-updated": "This request is out of date: the plugin that asked it was updated.",
    "data-changed": "This request is out of date: what it would change was changed in the meantime.",
}
_sweep_lock = threading.Lock()
_last_sweep = 0.0


class SuspensionNotFound(ApiError):
    """404: the session has no such suspension."""

    status = 404
    code = None


class SuspensionProcessed(ApiError):
    """409: the suspension was already resumed, replaced or is being resumed by another request."""

    status = 409
    code = None


def summary_of(row: Any) -> dict[str, Any]:
    """SuspensionSummary: the public fields only (the continuation stays on the server)."""
    return {"id": row.suspension_id, "sessionId": row.session_id, "turnId": row.turn_id, "runtimeId": row.runtime_id,
            "pluginId": row.plugin_id, "reason": (row.payload or {}).get("reason", ""), "resumeSchema": row.resume_schema,
            "createdAt": row.created_at.isoformat().replace("+00:00", "Z")}


def suspensions_list(session: Any) -> list[dict[str, Any]]:
    """GET /api/sessions/:id/suspensions: pending and being-resumed items, oldest first."""
    from turns.models import Suspension

    suspensions_sweep()
    rows = Suspension.objects.filter(session=session, status__in=(STATUS_PENDING, STATUS_RESUMING)).order_by("created_at", "id")
    return [summary_of(r) for r in rows]


def _row(session: Any, suspension_id: str) -> Any:
    from turns.models import Suspension

    row = Suspension.objects.filter(session=session, suspension_id=suspension_id).first()
    if row is None:
        raise SuspensionNotFound(message=f"Suspension not found: {suspension_id}")
    return row


def resume_data_check(schema: Any, data: Any) -> None:
    """Full JSON Schema validation of the player's answer. Raises 400 resume_schema_invalid (the
    schema is not an object or does not compile) or 400 resume_data_invalid with ``details.errors``
    ``[{path, message}]``."""
    if not isinstance(schema, dict):
        raise ApiError(400, CODE_RESUME_SCHEMA_INVALID, "The suspension's resumeSchema is not an object.")
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
        validator = jsonschema.Draft202012Validator(schema)
        errors = sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path))
    except (jsonschema.SchemaError, jsonschema.exceptions.UnknownType, TypeError, ValueError) as exc:
        raise ApiError(400, CODE_RESUME_SCHEMA_INVALID, f"The suspension's resumeSchema does not compile: {str(exc)[:300]}") from None
    if errors:
        details = [{"path": "/" + "/".join(str(p) for p in e.absolute_path), "message": e.message} for e in errors[:DATA_ERRORS_MAX]]
        raise ApiError(400, CODE_RESUME_DATA_INVALID, f"data does not match the resumeSchema: {errors[0].message}",
                       details={"errors": details})


def _outdated(session_id: str, row: Any, reason: str) -> ApiError:
    """Void ``row`` as an abandonment and build the 409."""
    from sessions.models import Session
    from turns.models import Suspension

    with transaction.atomic():
        locked = Session.objects.select_for_update().get(pk=session_id)
        fresh = Suspension.objects.filter(pk=row.pk).first()
        if fresh is not None:
            abandon_in_transaction(locked, fresh)
    return ApiError(409, CODE_SUSPENSION_OUTDATED, OUTDATED_MESSAGES[reason], details={"reason": reason})


def suspension_resume(session: Any, suspension_id: str, body: Any, *, provider_keys: dict[str, str] | None = None,
                      plugin_settings: dict[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
    """POST /api/sessions/:id/suspensions/:suspensionId/resume (see the module docstring)."""
    from plugins_app.registry import plugin_registry
    from turns.models import Suspension

    if not isinstance(body, dict) or set(body) - {"data"} or not isinstance(body.get("data"), dict):
        raise ApiError(400, None, 'The body must be {"data": {...}} (an object matching the suspension\'s resumeSchema).')
    suspensions_sweep()
    row = _row(session, suspension_id)
    if row.status != STATUS_PENDING:
        raise SuspensionProcessed(message="This suspension was already processed.")
    resume_data_check(row.resume_schema, body["data"])
    _code_gate(session, row)
    with locks.session_lock(session.pk):
        row = _row(session, suspension_id)
        if row.status != STATUS_PENDING:
            raise SuspensionProcessed(message="This suspension was already processed.")
        session.refresh_from_db()
        _code_gate(session, row)  # checked again under the lock (a grant may have been revoked)
        registry = plugin_registry()
        record = registry.get(row.plugin_id)
        version = getattr(getattr(record, "manifest", None), "version", None) if record is not None else None
        try:
            staleness_check(row, session, version)
        except SuspensionOutdated as exc:
            raise _outdated(session.pk, row, exc.reason) from None
        claimed = Suspension.objects.filter(pk=row.pk, status=STATUS_PENDING).update(status=STATUS_RESUMING, resolved_at=timezone.now())
        if not claimed:
            raise SuspensionProcessed(message="This suspension was already processed.")
        row.refresh_from_db()
        try:
            outcome = suspension_resume_run(session.pk, row, body["data"], provider_keys=provider_keys,
                                            plugin_settings=plugin_settings, plugin_registry=registry,
                                            code_grants=code_grant_checker(session.pk, registry=registry))
        except SuspensionOutdated as exc:
            raise _outdated(session.pk, row, exc.reason) from None
        except LookupError:
            _release(row)
            raise SuspensionNotFound(message=f"The runtime of this suspension is not active: {row.runtime_id}") from None
        except CommitFailed as exc:
            _release(row)
            raise ApiError(500, None, f"Resume commit failed: {exc.message}. The suspension remains unresolved and can be retried.") from None
        except Exception:
            _release(row)
            logger.exception("resume of %s failed", suspension_id)
            raise ApiError(500, None, "Resume failed: internal error") from None
        if outcome.status == "failed":
            _release(row)
            raise ApiError(500, None, f"Resume failed: {outcome.error.get('message')}")
    result = outcome.result
    out: dict[str, Any] = {"status": outcome.status, "runtimeId": row.runtime_id, "pluginId": row.plugin_id,
                           "suspensionId": row.suspension_id, "turnId": outcome.turn_id, "output": result.output}
    if outcome.status == "suspended":
        out["output"] = {"suspensionId": outcome.suspension_id}
    return 200, {"result": out, "events": outcome.events}


def _code_gate(session: Any, row: Any) -> None:
    """A community runtime resumes only with its code grants: 202 approval-required otherwise
    (``covel:plugin-server-code``, then ``runtime:<runtimeId>``; sessions.approvals)."""
    from plugins_app.registry import plugin_registry

    record = plugin_registry().get(row.plugin_id)
    if record is not None and record.needs_code_grant:
        approvals.code_gate(session, record, [row.runtime_id])


def _release(row: Any) -> None:
    """Give a failed resume's claim back (the suspension can be retried)."""
    from turns.models import Suspension

    Suspension.objects.filter(pk=row.pk, status=STATUS_RESUMING).update(status=STATUS_PENDING, resolved_at=None)


def suspension_abandon(session: Any, suspension_id: str) -> dict[str, Any]:
    """DELETE /api/sessions/:id/suspensions/:suspensionId: ``{ok: true, suspensionId}``; 404 when
    the session has no such pending suspension, 409 while another request resumes it."""
    from sessions.models import Session
    from turns.models import Suspension

    row = _row(session, suspension_id)
    if row.status not in (STATUS_PENDING,):
        if row.status == STATUS_RESUMING:
            raise SuspensionProcessed(message="This suspension is being resumed.")
        raise SuspensionNotFound(message=f"Suspension not found: {suspension_id}")
    with locks.session_lock(session.pk):
        with transaction.atomic():
            locked = Session.objects.select_for_update().get(pk=session.pk)
            fresh = Suspension.objects.filter(pk=row.pk, status=STATUS_PENDING).first()
            if fresh is None:
                raise SuspensionNotFound(message=f"Suspension not found: {suspension_id}")
            abandon_in_transaction(locked, fresh)
    return {"ok": True, "suspensionId": suspension_id}


def suspensions_sweep(*, force: bool = False) -> int:
    """Abandon expired suspensions and release stale ``resuming`` claims, everywhere. Rate-limited
    to once per COVEL_SUSPENSION_SWEEP_SECONDS per process unless ``force``; never raises. Returns
    how many rows it changed."""
    global _last_sweep
    from sessions.models import Session
    from turns.models import Suspension

    interval = float(getattr(settings, "COVEL_SUSPENSION_SWEEP_SECONDS", 60))
    with _sweep_lock:
        if not force and time.monotonic() - _last_sweep < interval:
            return 0
        _last_sweep = time.monotonic()
    changed = 0
    try:
        stale = timezone.now() - timedelta(seconds=float(getattr(settings, "COVEL_SUSPENSION_CLAIM_SECONDS", 600)))
        changed += Suspension.objects.filter(status=STATUS_RESUMING, resolved_at__lt=stale).update(status=STATUS_PENDING, resolved_at=None)
        for row in Suspension.objects.filter(status=STATUS_PENDING).order_by("created_at")[:500]:
            if suspension_expired(row):
                with transaction.atomic():
                    locked = Session.objects.select_for_update().get(pk=row.session_id)
                    fresh = Suspension.objects.filter(pk=row.pk, status=STATUS_PENDING).first()
                    if fresh is not None:
                        abandon_in_transaction(locked, fresh)
                        changed += 1
    except Exception:
        logger.warning("suspension sweep failed", exc_info=True)
    return changed


def suspension_claims_release_all() -> int:
    """Give back every ``resuming`` claim (spec 004: claims are released when the service starts).
    Only for the embedded shape, where this process is the only one that could hold a claim; a
    hosted process leaves them to the age rule of suspensions_sweep. Returns how many were released."""
    from turns.models import Suspension

    if settings.STORE_BACKEND == "pg":
        return 0
    released = Suspension.objects.filter(status=STATUS_RESUMING).update(status=STATUS_PENDING, resolved_at=None)
    if released:
        logger.info("released %d suspension claim(s) left by the previous run", released)
    return released
