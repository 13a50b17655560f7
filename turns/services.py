"""Action requests and executions: validation, the execution row, the worker run, status, reaping.

The web process validates a POST /api/actions request completely (nothing is written when a check
fails), writes the Execution row and enqueues ``turns.run_execution`` on commit. A worker claims
the row, takes the session lock, repeats the checks inside it, hands the execution to the engine
(``turns.engine.run.execution_run``) with an ``ExecutionSink`` and then records the outcome and
the stream's one ``execution.completed`` (spec 004 §Actions（SSE 桥接）, §Turn 执行).

Lost task messages (README "Faults"): when the broker refuses the task at request time, the row is
withdrawn and the request answers 503 ``service_unavailable`` (nothing recorded, the same
requestId may be sent again). A message lost after it was accepted (a Redis restart empties the
queue; a worker killed with it prefetched) is sent once more by ``executions_resend`` (beat) after
COVEL_EXECUTION_RESEND_AFTER_SECONDS; the claim makes the second delivery of a message that was
not lost after all a no-op.

Operators (README "The hosted shape"): a queued execution that no worker claimed within
COVEL_EXECUTION_PICKUP_SECONDS while no worker consumes the ``turns`` queue (covel.workers) is
ended like an interrupted one, with ``error.occurred`` code ``no_worker_available`` (nothing ran;
the execution is retryable). A worker in warm shutdown puts an execution it claimed but has not
started (still waiting for the session lock) back in the queue for the next worker; a started
turn finishes within the shutdown's grace period. Outcomes and stage latencies go to
covel.metrics.
"""
from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import jsonschema
from django.conf import settings
from django.db import IntegrityError, close_old_connections, connections, transaction
from django.db.models import Max
from django.db.models.functions import Coalesce
from django.utils import timezone
from pydantic import ValidationError

from covel import metrics, workers
from covel.credentials import credentials_offer, credentials_scope
from covel.errors import ApiError, SessionBusy
from covel.taskqueue import TASK_RUN_EXECUTION, task_send
from sessions import approvals, locks
from sessions.grants import code_grant_checker
from turns import control, errors, selectors
from turns.errors import ActionRejected, ExecutionRejected
from turns.models import Execution, ExecutionFrame
from turns.schemas import PAYLOAD_MODELS, ActionRequestIn
from covel.times import wire_timestamp
from turns.sse import ExecutionSink
from turns.engine.ports import runtime_jobs_settle_wait as settle_wait
from turns.engine.snapshot import session_and_snapshot_load

logger = logging.getLogger("covel.turns")

ORIGIN_PLAYER = "player"
ORIGIN_CONTINUATION = "continuation"
ABORTED_BY_PLAYER = "aborted-by-player"
SESSION_BUSY_MESSAGE = "Session is busy, please retry"
INTERRUPTED_CODE = "execution_interrupted"
NO_WORKER_CODE = "no_worker_available"
TURNS_QUEUE = "turns"
SERVICE_UNAVAILABLE_CODE = "service_unavailable"
#: Execution payload key of the request's X-Plugin-User-Settings (set by the server only).
PLUGIN_SETTINGS_KEY = "_pluginUserSettings"

# Seconds between worker heartbeats, and the silence after which a running execution whose
# session lock is free counts as interrupted (its worker died). Queued executions get longer:
# they may legitimately wait behind other sessions' turns on a busy queue.
HEARTBEAT_SECONDS = float(settings.COVEL_EXECUTION_HEARTBEAT_SECONDS)
STALE_SECONDS = float(settings.COVEL_EXECUTION_STALE_SECONDS)
QUEUED_STALE_SECONDS = float(settings.COVEL_EXECUTION_QUEUED_STALE_SECONDS)


class TaskQueueUnavailable(ApiError):
    """503 service_unavailable: the task queue (Redis) refused the turn's task; nothing was recorded
    and the same request may be sent again."""

    status = 503
    code = SERVICE_UNAVAILABLE_CODE

    def __init__(self) -> None:
        super().__init__(message="The task queue is unavailable; nothing was recorded, retry shortly",
                         details={"retryable": True})


def _queue_errors() -> tuple[type[BaseException], ...]:
    """What sending a task or keeping provider keys raises when Redis is down or unreachable."""
    import kombu.exceptions
    import redis

    return (kombu.exceptions.OperationalError, redis.RedisError, ConnectionError, TimeoutError)

_INTERACTION_DEFAULT_KIND = {"choice": "say", "form": "act", "confirmation": "act"}


@dataclass
class ActionRequest:
    """A parsed POST /api/actions body: ``payload`` validated for its ``type`` (wire dict, no None keys)."""

    request_id: str
    type: str
    session_id: str
    model: str | None
    payload: dict[str, Any]
    request_hash: str


def action_request_parse(body: Any) -> ActionRequest:
    """Validate the request body against the schema (check 1 of spec 004 §submit_actions).

    Raises ActionRejected (400 invalid_action_request, ``details.issues``) for: a non-object body,
    an unknown top-level or payload field (``locale`` included), an unknown ``type``, a missing
    payload, unsafe or over-long identifiers, 0 or more than 8 actions, more than 100,000
    characters of action text, ``source`` on an action.
    """
    if not isinstance(body, dict):
        raise ActionRejected(errors.INVALID_ACTION_REQUEST, "Request body must be a JSON object")
    try:
        top = ActionRequestIn.model_validate(body)
        payload_model = PAYLOAD_MODELS[top.type]
        payload = payload_model.model_validate(top.payload)
    except ValidationError as exc:
        issues = [
            {"path": [str(p) for p in err.get("loc", ())], "message": err.get("msg", "")}
            for err in exc.errors(include_url=False)
        ]
        where = issues[0] if issues else {"path": [], "message": "invalid"}
        prefix = ["payload"] if "top" in locals() else []
        for issue in issues:
            issue["path"] = prefix + issue["path"]
        message = f"Invalid action request: {'.'.join(where['path']) or 'body'}: {where['message']}"
        raise ActionRejected(errors.INVALID_ACTION_REQUEST, message, {"issues": issues}) from None
    canonical = json.dumps(
        {"type": top.type, "model": top.model, "payload": body.get("payload")}, sort_keys=True, ensure_ascii=False
    )
    return ActionRequest(
        request_id=top.requestId,
        type=top.type,
        session_id=top.sessionId,
        model=top.model,
        payload=payload.model_dump(mode="json", exclude_none=True),
        request_hash=hashlib.sha256(canonical.encode("utf-8")).hexdigest(),
    )


def session_guard(session, request_type: str) -> None:
    """Session-level admission: active, not being deleted; start_session needs active plugins.

    Raises ActionRejected 409 session_deleting / 409 session_not_active / 400 no_active_plugins.
    """
    if session.deletion_state:
        raise ActionRejected(errors.SESSION_DELETING, "Session is being deleted")
    if session.status != "active":
        raise ActionRejected(errors.SESSION_NOT_ACTIVE, f"Session is {session.status}, not active")
    if request_type == "start_session" and not session.active_plugins:
        raise ActionRejected(
            errors.NO_ACTIVE_PLUGINS,
            "Session has no active plugins. Choose plugins when creating the session.",
        )


def actions_check(session, actions: list[dict[str, Any]], *,
                  player_character_ids: list[str] | None = None) -> list[dict[str, Any]]:
    """Checks 2–8 of spec 004 §submit_actions for each action in order; returns resolved actions.

    Resolved: ``seatId`` filled (the main seat when omitted) and, for kinds played as a character,
    ``actorId`` filled with the seat's current character when omitted (absent if it has none);
    ``source`` is "player". The first failing check raises ActionRejected with its code:
    404 seat_not_found, 409 seat_not_human, 409 unknown_action_kind, 409 action_kind_not_allowed,
    409 actor_not_bound, 400 invalid_action, 400 invalid_action_fields; an answer to a form whose
    plugin validator cannot run: 400 form_provider_inactive / form_provider_unavailable /
    form_validator_undeclared (spec 004 §玩家交互). Reads only. ``player_character_ids``: the
    session's ``type: player`` character ids in creation order, when the caller has them (the
    worker's session snapshot), so seat bindings cost no query.
    """
    catalogue = selectors.action_kinds_catalogue(session)
    resolved: list[dict[str, Any]] = []
    answered_turns: set[str] = set()
    for position, action in enumerate(actions):
        where = f"actions[{position}]"
        seat = selectors.seat_find(session, action.get("seatId"))
        if seat is None:
            missing = action.get("seatId")
            raise ActionRejected(
                errors.SEAT_NOT_FOUND,
                f"{where}: seat not found: {missing}" if missing else f"{where}: the session has no main seat",
            )
        seat_id = seat.get("id", "")
        if seat.get("controller", "human") != "human":
            raise ActionRejected(errors.SEAT_NOT_HUMAN, f"{where}: seat {seat_id} is not controlled by a human")
        kind_name = action["kind"]
        kind = catalogue.kind(kind_name)
        if kind is None:
            raise ActionRejected(errors.UNKNOWN_ACTION_KIND, f"{where}: unknown action kind: {kind_name}")
        if kind_name not in catalogue.allowed(seat_id):
            raise ActionRejected(
                errors.ACTION_KIND_NOT_ALLOWED, f"{where}: seat {seat_id} may not submit {kind_name}"
            )
        actor_id = action.get("actorId")
        if actor_id is not None:
            if not kind["actor"]:
                raise ActionRejected(errors.ACTOR_NOT_BOUND, f"{where}: {kind_name} is not played as a character")
            if actor_id not in selectors.seat_character_ids(session, seat, player_character_ids=player_character_ids):
                raise ActionRejected(errors.ACTOR_NOT_BOUND, f"{where}: character {actor_id} is not bound to seat {seat_id}")
        elif kind["actor"]:
            actor_id = selectors.seat_current_character_id(session, seat, player_character_ids=player_character_ids)
        interaction = action.get("interaction")
        text = action.get("text")
        if interaction is not None:
            _interaction_action_check(session, where, kind_name, text, interaction)
            answered_turns.add(interaction["turnId"])
            if len(answered_turns) > 1:
                raise ActionRejected(errors.INVALID_ACTION, f"{where}: all answers must belong to the same turn")
        else:
            _text_check(where, kind, text)
        fields = action.get("fields")
        if interaction is None:
            _fields_check(where, kind, fields)
        out: dict[str, Any] = {"kind": kind_name, "seatId": seat_id, "source": "player"}
        if actor_id:
            out["actorId"] = actor_id
        for key in ("text", "fields", "interaction"):
            if action.get(key) is not None:
                out[key] = action[key]
        resolved.append(out)
    return resolved


def _text_check(where: str, kind: dict[str, Any], text: str | None) -> None:
    has_text = text is not None and text.strip() != ""
    if kind["text"] == "required" and not has_text:
        raise ActionRejected(errors.INVALID_ACTION, f"{where}: {kind['kind']} needs text")
    if kind["text"] == "none" and text is not None and text != "":
        raise ActionRejected(errors.INVALID_ACTION, f"{where}: {kind['kind']} takes no text")
    if kind["kind"] == "command" and not text.lstrip().startswith("/"):
        raise ActionRejected(errors.INVALID_ACTION, f"{where}: a command starts with /")


def _interaction_action_check(session, where: str, kind_name: str, text: str | None, interaction: dict) -> None:
    from turns.models import InteractionRecord

    if text is not None:
        raise ActionRejected(errors.INVALID_ACTION, f"{where}: an interaction answer carries no text")
    record = InteractionRecord.objects.filter(
        session_id=session.pk, turn_id=interaction["turnId"], interaction_id=interaction["interactionId"]
    ).first()
    if record is None:
        # Unknown interactions are refused by the interaction submission inside the lock
        # (invalid_interaction_submission, spec 004 §玩家交互).
        return
    spec = record.spec or {}
    declared = spec.get("actionKind") or _INTERACTION_DEFAULT_KIND.get(record.type, "act")
    if kind_name != declared:
        raise ActionRejected(errors.INVALID_ACTION, f"{where}: this interaction is answered with {declared}")
    provider = _form_provider(record)
    if provider is not None:
        from turns.engine.interactions import form_provider_problem

        problem = form_provider_problem(plugin_id=provider[0], name=provider[1], is_active=_plugin_enabled(session, provider[0]),
                                        record=_plugin_runnable(session, provider[0]))
        if problem is not None:
            raise ActionRejected(problem[0], f"{where}: {problem[1]}")


def _form_provider(record) -> tuple[str, str] | None:
    """(source plugin id, validator name) of a committed form that names a plugin validator, else None.
    The source comes from the committed interaction only (spec 004 §玩家交互: 客户端不能指定)."""
    spec = record.spec if isinstance(record.spec, dict) else {}
    validation = spec.get("validation")
    if record.type != "form" or not isinstance(validation, dict) or not isinstance(validation.get("name"), str):
        return None
    return str(spec.get("sourcePluginId") or record.plugin_id), validation["name"]


def _plugin_enabled(session, plugin_id: str) -> bool:
    from sessions.faults import plugins_paused

    return plugin_id in (session.active_plugins or []) and plugin_id not in plugins_paused(session.metadata)


def _plugin_runnable(session, plugin_id: str):
    """The registry record of ``plugin_id`` when the session can run it now, else None."""
    from plugins_app.registry import plugin_registry
    from sessions.selectors import runnable_plugins

    registry = plugin_registry()
    runnable, _ = runnable_plugins(session, registry)
    record = registry.get(plugin_id) if plugin_id in runnable else None
    return record if record is not None and record.is_loaded else None


def _form_providers_gate(session, payload: dict[str, Any]) -> None:
    """202 approval-required before the stream when an answered form's validator belongs to a
    community plugin whose server code the session has not granted (spec 004 §玩家交互 需要授权时;
    checked before "already answered"). One plugin at a time, like every approval."""
    from turns.models import InteractionRecord

    for action in payload.get("actions") or []:
        ref = action.get("interaction") if isinstance(action, dict) else None
        if not isinstance(ref, dict):
            continue
        record = InteractionRecord.objects.filter(session_id=session.pk, turn_id=ref.get("turnId"),
                                                  interaction_id=ref.get("interactionId")).first()
        provider = _form_provider(record) if record is not None else None
        plugin = _plugin_runnable(session, provider[0]) if provider is not None else None
        if plugin is not None and plugin.needs_code_grant:
            approvals.code_gate(session, plugin, [], payload=payload)


def _fields_check(where: str, kind: dict[str, Any], fields: dict[str, Any] | None) -> None:
    schema = kind.get("fieldsSchema")
    if kind["source"] == "framework" or schema is None:
        if fields is not None:
            raise ActionRejected(errors.INVALID_ACTION_FIELDS, f"{where}: {kind['kind']} takes no fields")
        return
    validator_cls = jsonschema.validators.validator_for(schema)
    issues = [
        {"path": [str(p) for p in err.absolute_path], "message": err.message}
        for err in validator_cls(schema).iter_errors(fields if fields is not None else {})
    ]
    if issues:
        raise ActionRejected(
            errors.INVALID_ACTION_FIELDS, f"{where}: fields do not match {kind['kind']}: {issues[0]['message']}",
            {"issues": issues},
        )


def action_request_admit(session, request: ActionRequest, *, player_character_ids: list[str] | None = None) -> dict[str, Any]:
    """Every check a request must pass before (and again inside) the session lock; returns the
    payload to store, with submit_actions' actions resolved (see ``actions_check``;
    ``player_character_ids`` when the caller read them with the session)."""
    session_guard(session, request.type)
    payload = dict(request.payload)
    if request.type == "submit_actions":
        payload["actions"] = actions_check(session, payload["actions"], player_character_ids=player_character_ids)
    return payload


def execution_request(*, session, request: ActionRequest, provider_keys: dict[str, str] | None = None,
                      plugin_settings: dict[str, dict[str, Any]] | None = None,
                      model_routing: dict[str, Any] | None = None,
                      player_character_ids: list[str] | None = None) -> tuple[Execution, bool]:
    """Admit ``request`` and write its Execution row; returns (execution, created).

    player_character_ids: the session's player characters as the caller read them with the
    session (sessions.auth.session_and_players_get_authorized); None: read here when needed.

    plugin_settings: the decoded ``X-Plugin-User-Settings`` (``{pluginId: {key: value}}``), kept with
    the execution (payload key ``_pluginUserSettings``, never client-settable) so the worker merges
    them into the turn (spec 004 §请求头).

    provider_keys: the decoded ``X-Provider-Keys``; kept in memory (or transiently in Redis) for
    the worker until it claims the execution, never in the database (``turns.control``). A
    replayed request (created=False) does not store them again.
    model_routing: ``{"slotConfig"?: <X-Slot-Config JSON>, "relay"?: <X-Model-Relay channel>}``,
    kept with the keys the same way (turns.control) and applied to the turn's model calls.

    A repeated requestId on the session never runs twice: with the same body it returns the
    existing execution (created=False; its stream is replayed from the stored frames), with a
    different body it raises ActionRejected 409 request_id_conflict. Checks fail before anything
    is written. The worker task is enqueued only after the row committed.
    A community plugin the request would run without its code grants gets 202 approval-required
    (sessions.errors.ApprovalRequired) here, before any write (spec 004 §社区插件授权); the client
    repeats the request with the same requestId once the player decided.
    """
    existing = Execution.objects.filter(session_id=session.pk, request_id=request.request_id).first()
    if existing is not None:
        return _same_request(existing, request), False
    payload = action_request_admit(session, request, player_character_ids=player_character_ids)
    approvals.actions_gate(session, request_type=request.type, payload=payload)
    if request.type == "submit_actions":
        _form_providers_gate(session, payload)
    payload.pop(PLUGIN_SETTINGS_KEY, None)
    if plugin_settings:
        payload[PLUGIN_SETTINGS_KEY] = plugin_settings
    send_failures: list[BaseException] = []
    execution_id = uuid.uuid4()
    try:
        # Kept before the row exists, so the worker that claims it finds them (its task is sent
        # only once the row is written).
        control.provider_keys_put(str(execution_id), provider_keys or {}, routing=model_routing)
    except _queue_errors() as exc:  # provider keys could not be kept: nothing recorded
        logger.warning("execution request %s: Redis unavailable (%s); 503", request.request_id, exc.__class__.__name__)
        raise TaskQueueUnavailable() from exc
    try:
        # One INSERT, in autocommit unless the caller holds a transaction (issue 18: no transaction
        # of its own around a single statement); the (session, requestId) constraint refuses a twin.
        execution = Execution.objects.create(
            id=execution_id,
            session_id=session.pk,
            request_id=request.request_id,
            type=request.type,
            payload=payload,
            model=request.model or "",
            trace_id=uuid.uuid4().hex,
            turn_id=str(uuid.uuid4()),
            origin=ORIGIN_PLAYER,
            input_message_id=payload.get("inputMessageId", "") if request.type == "submit_actions" else "",
            request_hash=request.request_hash,
        )
    except IntegrityError:
        _provider_keys_drop(str(execution_id))
        existing = Execution.objects.filter(session_id=session.pk, request_id=request.request_id).first()
        if existing is None:
            raise
        return _same_request(existing, request), False
    except Exception:
        _provider_keys_drop(str(execution_id))
        raise
    # Sent once the row is committed (at once in autocommit).
    transaction.on_commit(functools.partial(_execution_send, str(execution.id), send_failures))
    if send_failures:
        _execution_withdraw(execution, send_failures[0])
    # Background jobs of the session still waiting for credentials may use this request's.
    credentials_offer(str(session.pk), provider_keys, model_routing)
    return execution, True


def _provider_keys_drop(execution_id: str) -> None:
    """Take back the request keys kept for an execution row that was not written."""
    try:
        control.provider_keys_take(execution_id)
    except Exception:  # they expire on their own (PROVIDER_KEYS_TTL_SECONDS)
        pass


def _execution_send(execution_id: str, failures: list[BaseException]) -> None:
    """On commit: send the execution's task; a broker failure is noted in ``failures`` for the
    request to withdraw the row (an exception here would escape the commit as a 500)."""
    try:
        task_send(TASK_RUN_EXECUTION, execution_id)
    except _queue_errors() as exc:
        failures.append(exc)


def _execution_withdraw(execution: Execution, cause: BaseException) -> None:
    """The task never reached the broker: delete the still-queued row and raise TaskQueueUnavailable
    (503). If a worker claimed it meanwhile (the message did get through before the error), the
    execution stands and its stream is served as usual."""
    deleted, _ = Execution.objects.filter(pk=execution.pk, status=Execution.STATUS_QUEUED).delete()
    if not deleted:
        logger.warning("execution %s: task send reported %s but a worker has it; streaming", execution.pk,
                       cause.__class__.__name__)
        return
    try:
        control.provider_keys_take(str(execution.pk))
    except Exception:  # they expire on their own (PROVIDER_KEYS_TTL_SECONDS)
        pass
    logger.warning("execution %s withdrawn: the task queue refused it (%s: %s); 503", execution.pk,
                   cause.__class__.__name__, cause)
    raise TaskQueueUnavailable() from cause


def _same_request(existing: Execution, request: ActionRequest) -> Execution:
    if existing.request_hash != request.request_hash:
        raise ActionRejected(
            errors.REQUEST_ID_CONFLICT, f"requestId {request.request_id} was already used for a different request"
        )
    return existing


def _worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}"


class _Heartbeat:
    """Refreshes ``Execution.heartbeat_at`` every HEARTBEAT_SECONDS on its own thread/connection."""

    def __init__(self, execution_id: str) -> None:
        self.execution_id = execution_id
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"covel-heartbeat-{execution_id[:8]}", daemon=True)

    def __enter__(self) -> "_Heartbeat":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=HEARTBEAT_SECONDS + 5)

    def _run(self) -> None:
        try:
            while not self._stop.wait(HEARTBEAT_SECONDS):
                try:
                    Execution.objects.filter(pk=self.execution_id, status=Execution.STATUS_RUNNING).update(
                        heartbeat_at=timezone.now()
                    )
                except Exception as exc:
                    logger.warning("execution %s: heartbeat failed (%s: %s)", self.execution_id,
                                   exc.__class__.__name__, exc)
                    # A connection the server dropped (PostgreSQL restart) stays broken until closed;
                    # without this the heartbeat would stop for good and the reaper would take a
                    # live turn for a dead one.
                    connections.close_all()
        finally:
            connections.close_all()


_cancel_tokens: dict[str, Any] = {}
_cancel_guard = threading.Lock()


def execution_cancel(execution_id: str) -> bool:
    """Ask the engine to stop ``execution_id`` if it runs in this process (spec 004 §abort: the
    control registry is per process). True when a running execution was signalled."""
    with _cancel_guard:
        token = _cancel_tokens.get(str(execution_id))
    if token is None:
        return False
    token.cancel(ABORTED_BY_PLAYER)
    return True


def _engine_run(execution_id: str, sink: ExecutionSink, *, token, provider_keys: dict[str, str] | None,
                session_id: str = "", plugin_settings: dict[str, Any] | None = None,
                model_routing: dict[str, Any] | None = None, preloaded: tuple[Any, ...] | None = None,
                commit_best_effort: list[Any] | None = None):
    """Call the engine entry ``turns.engine.run.execution_run(execution_id, sink, cancel=...,
    provider_keys=..., code_grants=...)``; ``token`` is the execution's control token
    (``turns.control``); community code is checked against the session's grants as they are when it loads."""
    from turns.engine.run import execution_run

    with _cancel_guard:
        _cancel_tokens[execution_id] = token
    try:
        # Runtime jobs this turn's commit writes may hold on to the request's credentials.
        with credentials_scope(provider_keys, model_routing):
            return execution_run(execution_id, sink, cancel=token, provider_keys=provider_keys,
                                 plugin_settings=plugin_settings,
                                 code_grants=code_grant_checker(session_id) if session_id else None,
                                 model_routing=model_routing, preloaded=preloaded,
                                 commit_best_effort=commit_best_effort)
    finally:
        with _cancel_guard:
            _cancel_tokens.pop(execution_id, None)


def _outcome_read(outcome: Any) -> dict[str, Any]:
    """Normalise the engine's outcome (object or dict) to committed/abort_reason/turn_id/origin."""

    def pick(*names: str, default=None):
        for name in names:
            if isinstance(outcome, dict) and name in outcome:
                return outcome[name]
            if not isinstance(outcome, dict) and hasattr(outcome, name):
                return getattr(outcome, name)
        return default

    return {
        "committed": bool(pick("committed", default=False)),
        "abort_reason": pick("abort_reason", "abortReason") or None,
        "turn_id": pick("turn_id", "turnId") or None,
        "origin": pick("origin") or None,
        "error": pick("error") or None,
        "rejected": bool(pick("rejected", default=False)),
    }


def execution_run(*, execution_id: str, hostname: str = "") -> str | None:
    """Run one execution on this worker (the body of the ``turns.run_execution`` task).

    Claims the row atomically (queued → running); a redelivered or duplicate task finds it claimed
    and returns None without doing anything. Then: session lock (bounded wait; busy → the stream's
    single ``error.occurred`` session_busy), the admission checks again inside the lock
    (``error.occurred`` with the same codes), the engine, and finally the execution's status
    (committed | aborted | failed) and the stream's one ``execution.completed``
    ``{committed, abortReason?}``. Returns the final status.

    While it runs, the worker listens on the execution's control channel (``turns.control``): an
    abort cancels the engine's token; one that arrives before the engine started (waiting for the
    lock) ends the execution without running it: nothing saved, the stream's only frame is
    ``execution.completed {committed: false, abortReason: "aborted-by-player"}``. The request's
    ``X-Provider-Keys`` are taken from their transient holder on claim and passed to the engine.
    hostname: the Celery worker's node name; when that worker is in a warm shutdown before the
    engine started, the execution goes back to ``queued`` (keys and routing kept again) and its
    task is sent for the next worker; returns ``queued`` then.
    """
    execution_control = control.ExecutionControl(execution_id)
    seen: dict[str, Any] = {}
    try:
        status = _execution_run_claimed(execution_id, execution_control, hostname=hostname, seen=seen)
    finally:
        execution_control.close()
    if status is not None:
        metrics.turn_outcome("requeued" if status == Execution.STATUS_QUEUED else status)
        if status != Execution.STATUS_QUEUED and "created_at" in seen:
            metrics.turn_stage_observe("total", (timezone.now() - seen["created_at"]).total_seconds())
    return status


def _execution_requeue(execution: Execution, request_context: "control.RequestContext | None") -> str | None:
    """Warm shutdown before the engine started: running → queued for this claim, the request's
    keys and routing kept again for the next claimant, the task sent again (a send the broker
    refuses is left to the re-sender). None when the row changed meanwhile."""
    updated = Execution.objects.filter(pk=execution.pk, status=Execution.STATUS_RUNNING, claimed_by=execution.claimed_by,
                                       started_at__isnull=True).update(
        status=Execution.STATUS_QUEUED, claimed_by="", claimed_at=None, heartbeat_at=None)
    if not updated:
        return None
    if request_context is not None:
        try:
            control.provider_keys_put(str(execution.pk), request_context.keys, routing=request_context.routing)
        except Exception:  # they are gone; the turn runs with the server's keys, as after their TTL
            logger.warning("execution %s: request keys could not be kept again for the next worker", execution.pk)
    try:
        task_send(TASK_RUN_EXECUTION, str(execution.pk))
    except _queue_errors() as exc:
        logger.warning("execution %s: re-queued, task not sent (%s); the re-sender sends it", execution.pk,
                       exc.__class__.__name__)
    logger.info("execution %s: worker shutting down before the turn started; back in the queue", execution.pk)
    return Execution.STATUS_QUEUED


def _execution_run_claimed(execution_id: str, execution_control: "control.ExecutionControl", *,
                           hostname: str = "", seen: dict[str, Any] | None = None) -> str | None:
    now = timezone.now()
    execution = _execution_claim(execution_id, now)
    if execution is None:
        logger.info("execution %s already claimed; skipping", execution_id)
        return None
    execution_control.claimed()
    request_context = control.request_context_take(execution_id)
    metrics.turn_stage_observe("queue", (now - execution.created_at).total_seconds())
    if seen is not None:
        seen["created_at"] = execution.created_at  # for the "total" stage, without another read
    # A queued execution has no frames yet: only its own (single) claimant writes them.
    sink = ExecutionSink(execution_id=str(execution.id), turn_id=execution.turn_id)
    settling = False
    with _Heartbeat(str(execution.id)):
        try:
            if workers.worker_shutdown_requested(hostname) and not execution_control.is_aborted:
                return _execution_requeue(execution, request_context)
            # The settle barrier comes before the lock: the jobs it waits for commit under that lock.
            settle_wait(str(execution.session_id))
            waited = time.monotonic()
            with locks.session_lock(execution.session_id):
                metrics.turn_stage_observe("lock", time.monotonic() - waited)
                if execution_control.is_aborted:
                    return _abort_before_start(execution, sink)
                if workers.worker_shutdown_requested(hostname):
                    return _execution_requeue(execution, request_context)
                Execution.objects.filter(pk=execution.pk).update(started_at=timezone.now(), heartbeat_at=timezone.now())
                execution_control.started()
                session, snapshot = _admit_in_lock(execution)
                ran = time.monotonic()
                auto_snapshot = _AutoSnapshotInCommit()
                outcome = _engine_run(str(execution.id), sink, token=execution_control.token,
                                      preloaded=(execution, session, snapshot),
                                      provider_keys=request_context.keys if request_context else None,
                                      model_routing=request_context.routing if request_context else None,
                                      session_id=str(execution.session_id),
                                      plugin_settings=(execution.payload or {}).get(PLUGIN_SETTINGS_KEY),
                                      commit_best_effort=[auto_snapshot])
                metrics.turn_stage_observe("run", time.monotonic() - ran)
                if not auto_snapshot.holds(outcome):
                    _auto_snapshot(str(execution.session_id), outcome)
                # Frames are coalesced; this turn's are written (with its status and final frame,
                # _settle) before the next turn of the session may start, so the session's frames
                # stay in turn order. A failure from here on is not the turn's: it propagates (the
                # reaper ends the stream) instead of being recorded as a failed turn.
                settling = True
                status = _settle(execution, sink, outcome)
            sink.announce()  # the stream's end reaches clients once the session lock is free
            return status
        except SessionBusy:
            if execution_control.is_aborted:
                return _abort_before_start(execution, sink)
            return _reject(execution, sink, {"message": SESSION_BUSY_MESSAGE, "code": SessionBusy.code})
        except ActionRejected as exc:
            return _reject(execution, sink, ExecutionRejected(exc.code, exc.message, exc.details).payload())
        except ExecutionRejected as exc:
            if sink.emitted_count == 0:
                return _reject(execution, sink, exc.payload())
            logger.error("execution %s: rejection %s raised after frames were emitted", execution_id, exc.code)
            return _fail(execution, sink, exc.payload())
        except Exception as exc:
            if settling:
                raise
            logger.exception("execution %s failed", execution_id)
            return _fail_recorded(execution, sink, {"message": "The turn failed: internal error",
                                                    "code": errors.EXECUTION_FAILED, "details": {"error": type(exc).__name__}})


def _settle(execution: Execution, sink: ExecutionSink, outcome: Any) -> str:
    """Record what the engine returned (still holding the session lock): a rejection inside the
    lock, or the turn's final status with its remaining frames and execution.completed (_finish)."""
    if outcome is None and sink.engine_completed is not None:
        outcome = {**sink.engine_completed["payload"], "turn_id": sink.engine_completed["turn_id"]}
    result = _outcome_read(outcome or {})
    if result["rejected"]:
        # The engine refused inside the lock and emitted the stream's single error.occurred.
        error = result["error"] if isinstance(result["error"], dict) else None
        Execution.objects.filter(pk=execution.pk).update(
            status=Execution.STATUS_REJECTED, error=error, finished_at=timezone.now()
        )
        sink.end()
        return Execution.STATUS_REJECTED
    return _finish(execution, sink, result)


def _execution_claim(execution_id: str, now) -> Execution | None:
    """Claim a queued execution (queued → running, this worker, ``now``) and read it back in ONE
    statement: UPDATE … RETURNING through the ORM's ``raw()``, which converts the returned columns
    as the fields do (issue 18: it was an UPDATE and a SELECT per turn). None when it was not
    queued (a redelivered or duplicate task)."""
    from django.db import connection

    meta = Execution._meta
    columns = ", ".join(f'"{field.column}"' for field in meta.concrete_fields)
    stamp = connection.ops.adapt_datetimefield_value(now)
    sql = (f'UPDATE "{meta.db_table}" SET "status" = %s, "claimed_by" = %s, "claimed_at" = %s, "heartbeat_at" = %s '
           f'WHERE "{meta.pk.column}" = %s AND "status" = %s RETURNING {columns}')
    rows = list(Execution.objects.raw(sql, [Execution.STATUS_RUNNING, _worker_id(), stamp, stamp,
                                            meta.pk.get_db_prep_value(execution_id, connection), Execution.STATUS_QUEUED]))
    return rows[0] if rows else None


class _AutoSnapshotInCommit:
    """The automatic snapshot as a turn commit's best-effort hook (turns.snapshots
    .snapshot_auto_in_commit, CommitPlan.best_effort): refreshed in the transaction of each turn
    the execution commits. An execution whose last committed turn was saved without it (the hook
    failed and was left out, or another path committed the turn) is refreshed afterwards by
    ``_auto_snapshot`` (``holds``)."""

    __name__ = "automatic snapshot"

    def __init__(self) -> None:
        self.turn_ids: set[str] = set()  # the turns whose commit saved the snapshot

    def __call__(self, session) -> list:
        from turns.snapshots import snapshot_auto_in_commit

        events = snapshot_auto_in_commit(session)
        turn_id = events[0].payload.get("turnId") if events else None
        if turn_id:
            transaction.on_commit(lambda: self.turn_ids.add(turn_id))
        return events

    def holds(self, outcome: Any) -> bool:
        """Whether the snapshot is current for ``outcome`` (nothing committed, or its last turn's
        commit saved it)."""
        read = _outcome_read(outcome or {})
        return not read["committed"] or read["turn_id"] in self.turn_ids


def _auto_snapshot(session_id: str, outcome: Any) -> None:
    """After an execution committed (still holding the session lock) without refreshing its
    ``auto`` snapshot in the commit: refresh it now (turns.snapshots.snapshot_auto_refresh, spec 004
    §Snapshot / Fork). The turn is already saved, so a failure here is only logged (spec 004
    §开场接力: 回合保存之后的收尾失败时只记日志)."""
    if outcome is None or not _outcome_read(outcome)["committed"]:
        return
    from turns.snapshots import snapshot_auto_refresh

    try:
        snapshot_auto_refresh(session_id)
    except Exception:
        logger.warning("session %s: the auto snapshot could not be refreshed", session_id, exc_info=True)


def _admit_in_lock(execution: Execution):
    """Repeat the admission checks on the session as it is now (it may have changed while we
    waited for the lock), then refuse an inputMessageId a committed turn already saved.
    Returns the Session row it checked and the SessionSnapshot loaded from it (both current
    while the lock is held)."""
    # The session row and the turn's session snapshot, read by one statement here under the lock:
    # the checks use its characters and the engine starts from it (nothing can commit in between).
    session, snapshot = session_and_snapshot_load(str(execution.session_id))
    session_guard(session, execution.type)
    if execution.type == "submit_actions":
        actions_check(session, execution.payload.get("actions", []), player_character_ids=snapshot.player_character_ids())
    if execution.input_message_id and selectors.input_message_committed(execution.session_id, execution.input_message_id):
        raise ExecutionRejected(
            errors.INPUT_ALREADY_COMMITTED,
            f"Input {execution.input_message_id} was already committed with a turn; do not resend it",
        )
    return session, snapshot


def _abort_before_start(execution: Execution, sink: ExecutionSink) -> str:
    """The player stopped the action while it waited for the session lock: it never starts
    (spec 004 §回合中控制 abort: 回合还没开始就停止)."""
    origin = execution.origin or ORIGIN_PLAYER
    sink.engine_completed = {"payload": {"turnId": execution.turn_id, "origin": origin}, "turn_id": execution.turn_id}
    status = _finish(execution, sink, {"committed": False, "abort_reason": ABORTED_BY_PLAYER, "turn_id": execution.turn_id,
                                       "origin": origin, "error": None, "rejected": False})
    sink.announce()
    return status


def _reject(execution: Execution, sink: ExecutionSink, payload: dict[str, Any]) -> str:
    Execution.objects.filter(pk=execution.pk).update(
        status=Execution.STATUS_REJECTED, error=payload, finished_at=timezone.now()
    )
    sink.reject(payload)
    return Execution.STATUS_REJECTED


def _fail(execution: Execution, sink: ExecutionSink, error: dict[str, Any]) -> str:
    sink.close()
    outcome = {"committed": False}
    Execution.objects.filter(pk=execution.pk).update(
        status=Execution.STATUS_FAILED, error=error, outcome=outcome, finished_at=timezone.now()
    )
    sink.emit("error.occurred", error)
    sink.complete(outcome)
    return Execution.STATUS_FAILED


#: How long a worker keeps trying to record a failed execution while the database is unreachable.
FAIL_RECORD_SECONDS = 10.0


def _fail_recorded(execution: Execution, sink: ExecutionSink, error: dict[str, Any]) -> str:
    """``_fail``, retried with backoff for FAIL_RECORD_SECONDS when the database refuses it.

    The failure is often the database itself (a PostgreSQL restart): the connection it broke must
    be replaced first, and the server may need a moment to come back. Recording it here ends the
    stream with the stored final frame at once instead of after the reaper's COVEL_EXECUTION_STALE_SECONDS
    (the heartbeat keeps running meanwhile). Raises the database error when it stays away.
    """
    import time

    from django.db import InterfaceError, OperationalError

    deadline = time.monotonic() + FAIL_RECORD_SECONDS
    delay = 0.25
    while True:
        if not transaction.get_connection().in_atomic_block:
            close_old_connections()  # drops a connection an error left unusable
        try:
            return _fail(execution, sink, error)
        except (OperationalError, InterfaceError):
            if time.monotonic() + delay > deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 2.0)


def _finish(execution: Execution, sink: ExecutionSink, outcome: dict[str, Any]) -> str:
    """Write the execution's final status, its frames still held back and its one
    execution.completed in ONE transaction (a crash leaves all or none of them: the reaper then
    ends the stream), announced after it commits. Returns the status."""
    # The engine's own execution.completed payload (turnId, origin, error, failedRuntimeIds ...)
    # is kept; committed/abortReason come from the outcome the bridge records.
    payload: dict[str, Any] = dict((sink.engine_completed or {}).get("payload") or {})
    payload["committed"] = outcome["committed"]
    payload.pop("abortReason", None)
    if outcome["abort_reason"]:
        payload["abortReason"] = outcome["abort_reason"]
    if outcome["committed"]:
        status = Execution.STATUS_COMMITTED
    elif outcome["abort_reason"]:
        status = Execution.STATUS_ABORTED
    else:
        status = Execution.STATUS_FAILED
    turn_id = outcome["turn_id"] or execution.turn_id
    fields = {"status": status, "outcome": payload, "turn_id": turn_id,
              "origin": outcome["origin"] or execution.origin or ORIGIN_PLAYER,
              "error": outcome["error"] if isinstance(outcome["error"], dict) else None, "finished_at": timezone.now()}
    try:
        with transaction.atomic():
            if transaction.get_connection().vendor == "postgresql":
                # One statement: the status UPDATE as a data-modifying CTE of the frames' INSERT.
                sink.complete_in_transaction(payload, turn_id=turn_id, prefix=_execution_update_cte(execution.pk, fields))
            else:
                Execution.objects.filter(pk=execution.pk).update(**fields)
                sink.complete_in_transaction(payload, turn_id=turn_id)
    except IntegrityError:
        # The reaper judged this worker dead and ended the stream (its frames took these indexes,
        # its status stands); nothing of this ending was written.
        logger.warning("execution %s: ended by the reaper before it finished; its ending stands", execution.pk)
    return status


def _execution_update_cte(pk: Any, fields: dict[str, Any]) -> tuple[str, list[Any]]:
    """``WITH … AS (UPDATE the execution row SET fields)`` with its parameters (values adapted as
    the fields adapt them), for a PostgreSQL statement that writes something else as well."""
    from django.db import connection

    from covel.sqlrows import set_clause

    meta = Execution._meta
    assignments, params = set_clause(Execution, fields)
    params.append(meta.pk.get_db_prep_value(pk, connection))
    return f'WITH execution_ended AS (UPDATE "{meta.db_table}" SET {assignments} WHERE "{meta.pk.column}" = %s)', params


def _not_picked_up(execution: Execution, now) -> bool:
    """Queued longer than COVEL_EXECUTION_PICKUP_SECONDS and no worker consumes ``turns`` (a busy
    queue with live workers waits until QUEUED_STALE_SECONDS instead)."""
    if execution.status != Execution.STATUS_QUEUED:
        return False
    if execution.created_at >= now - timedelta(seconds=settings.COVEL_EXECUTION_PICKUP_SECONDS):
        return False
    return not workers.queue_consumers().has_consumer(TURNS_QUEUE)


def execution_reap_one(execution_id: str, *, now=None) -> bool:
    """Mark one execution interrupted when its worker is gone, or when no worker will take it;
    True when it did.

    Gone means: status running with no heartbeat for STALE_SECONDS (queued: no claim for
    QUEUED_STALE_SECONDS) and its session lock is free. The stream then gets an ``error.occurred``
    (``execution_interrupted``) and its ``execution.completed`` ``{committed: false}``.
    No worker: queued for COVEL_EXECUTION_PICKUP_SECONDS while no worker consumes the ``turns``
    queue: the same ending with code ``no_worker_available`` (``retryable: true``; nothing ran,
    ``GET /api/sessions/:id/execution`` offers the retry). A worker that shows up later finds the
    row taken and does nothing.
    """
    now = now or timezone.now()
    execution = Execution.objects.filter(pk=execution_id, status__in=Execution.ACTIVE_STATUSES).first()
    if execution is None:
        return False
    no_worker = _not_picked_up(execution, now)
    if not no_worker and not _looks_dead(execution, now):
        return False
    if locks.session_lock_probe(execution.session_id) != locks.PROBE_FREE:
        return False
    outcome = {"committed": False}
    if no_worker:
        waited = int((now - execution.created_at).total_seconds())
        error = {"message": f"No worker picked up this turn in {waited} s (no worker consumes the turns queue); "
                            "nothing ran, retry it once the service is back", "code": NO_WORKER_CODE,
                 "retryable": True, "details": {"queue": TURNS_QUEUE, "waitedSeconds": waited}}
    else:
        error = {"message": "The worker running this turn stopped before it finished", "code": INTERRUPTED_CODE}
    updated = Execution.objects.filter(pk=execution.pk, status=execution.status, heartbeat_at=execution.heartbeat_at).update(
        status=Execution.STATUS_INTERRUPTED, outcome=outcome, error=error, finished_at=now
    )
    if not updated:
        return False
    metrics.turn_outcome(Execution.STATUS_INTERRUPTED)
    if not no_worker:
        metrics.lease_expired("execution")
    for _ in range(3):
        start = ExecutionFrame.objects.filter(execution_id=execution.pk).aggregate(m=Max("index"))["m"] or 0
        sink = ExecutionSink(execution_id=str(execution.pk), turn_id=execution.turn_id, start_index=start)
        try:
            with transaction.atomic():
                sink.emit("error.occurred", error)
                sink.complete(outcome)
        except IntegrityError:
            continue
        sink.close()
        break
    if no_worker:
        logger.warning("execution %s ended: no worker consumes the turns queue", execution.pk)
    else:
        logger.warning("execution %s interrupted: its worker stopped", execution.pk)
    return True


def _looks_dead(execution: Execution, now) -> bool:
    if execution.status == Execution.STATUS_RUNNING:
        beat = execution.heartbeat_at or execution.claimed_at or execution.created_at
        return beat < now - timedelta(seconds=STALE_SECONDS)
    return execution.created_at < now - timedelta(seconds=QUEUED_STALE_SECONDS)


def executions_reap(*, now=None) -> int:
    """Interrupt every execution whose worker died (see ``execution_reap_one``); returns how many."""
    now = now or timezone.now()
    candidates = (
        Execution.objects.filter(status__in=Execution.ACTIVE_STATUSES)
        .annotate(beat=Coalesce("heartbeat_at", "claimed_at", "created_at"))
        .filter(beat__lt=now - timedelta(seconds=STALE_SECONDS))
        .values_list("pk", flat=True)
    )
    return sum(1 for pk in list(candidates) if execution_reap_one(str(pk), now=now))


def executions_resend(*, now=None) -> int:
    """Send the task of every execution that is still ``queued`` COVEL_EXECUTION_RESEND_AFTER_SECONDS
    after it was accepted and was never re-sent; returns how many were sent (beat
    ``turns.resend_executions``, and the embedded in-process timers).

    Exactly once per execution: ``heartbeat_at`` (unused while queued) is set by a compare-and-set
    before the send, so concurrent re-senders send each row once; a send the broker refuses clears
    it again for the next run. The claim (``queued → running``) keeps the turn from running twice
    when the original message turns up after all. An execution that stays queued anyway is reported
    interrupted after COVEL_EXECUTION_QUEUED_STALE_SECONDS (``execution_reap_one``).
    """
    now = now or timezone.now()
    idle_before = now - timedelta(seconds=settings.COVEL_EXECUTION_RESEND_AFTER_SECONDS)
    candidates = list(
        Execution.objects.filter(status=Execution.STATUS_QUEUED, heartbeat_at__isnull=True, created_at__lt=idle_before)
        .order_by("created_at").values_list("pk", flat=True)[:500]
    )
    sent = 0
    for pk in candidates:
        marked = Execution.objects.filter(pk=pk, status=Execution.STATUS_QUEUED, heartbeat_at__isnull=True).update(
            heartbeat_at=now
        )
        if not marked:
            continue  # claimed, aborted or re-sent by someone else meanwhile
        try:
            task_send(TASK_RUN_EXECUTION, str(pk))
        except _queue_errors() as exc:
            Execution.objects.filter(pk=pk, status=Execution.STATUS_QUEUED, heartbeat_at=now).update(heartbeat_at=None)
            logger.warning("execution %s: re-send failed (%s); next run retries", pk, exc.__class__.__name__)
            continue
        sent += 1
        logger.warning("execution %s: still queued after %ss; its task was sent again", pk,
                       settings.COVEL_EXECUTION_RESEND_AFTER_SECONDS)
    return sent


def execution_status(session) -> dict[str, Any]:
    """SessionExecutionStatus of ``session`` without waiting for its lock (spec 004 §刷新与未完成回合恢复).

    state: running (lock held, or the latest execution is active and alive), unknown (the lock
    could not be probed), idle (no execution), completed, failed (failed or aborted; with
    ``abortReason`` and a ``retry`` descriptor), interrupted (active row, dead worker, free lock).
    """
    probe = locks.session_lock_probe(session.pk)
    latest = selectors.execution_latest(session.pk)
    if probe == locks.PROBE_UNKNOWN:
        return {"state": "unknown"}
    if probe == locks.PROBE_HELD:
        out: dict[str, Any] = {"state": "running"}
        if latest is not None and latest.status in Execution.ACTIVE_STATUSES:
            out.update(_identity(latest))
        return out
    if latest is None:
        return {"state": "idle"}
    if latest.status in Execution.ACTIVE_STATUSES:
        if _looks_dead(latest, timezone.now()):
            return {"state": "interrupted", **_identity(latest), "retry": _retry_descriptor(latest)}
        return {"state": "running", **_identity(latest)}
    if latest.status == Execution.STATUS_COMMITTED:
        return {"state": "completed", **_identity(latest)}
    if latest.status == Execution.STATUS_INTERRUPTED:
        return {"state": "interrupted", **_identity(latest), "retry": _retry_descriptor(latest)}
    out = {"state": "failed", **_identity(latest), "retry": _retry_descriptor(latest)}
    abort_reason = (latest.outcome or {}).get("abortReason")
    if abort_reason:
        out["abortReason"] = abort_reason
    return out


def _identity(execution: Execution) -> dict[str, Any]:
    out: dict[str, Any] = {"requestId": execution.request_id}
    if execution.turn_id:
        out["turnId"] = execution.turn_id
    if execution.started_at or execution.claimed_at:
        out["startedAt"] = wire_timestamp(execution.started_at or execution.claimed_at)
    if execution.origin in (ORIGIN_PLAYER, ORIGIN_CONTINUATION):
        out["origin"] = execution.origin
    return out


def _retry_descriptor(execution: Execution) -> dict[str, Any]:
    """How a player retries this execution (spec 004 §重试): the same request for a plain player
    action, ``retry_turn`` from the recorded turn for answered interactions and continuations."""
    payload = dict(execution.payload or {})
    if execution.origin == ORIGIN_CONTINUATION:
        return {"type": "retry_turn", "payload": {"recoverFromTurnId": execution.turn_id}}
    if execution.type == "submit_actions":
        actions = [a for a in payload.get("actions", []) if isinstance(a, dict)]
        if any("interaction" in a for a in actions):
            return {"type": "retry_turn", "payload": {"recoverFromTurnId": execution.turn_id}}
        return {"type": "submit_actions",
                "payload": {"actions": [{k: v for k, v in a.items() if k != "source"} for a in actions]}}
    if execution.type == "start_session":
        return {"type": "start_session", "payload": {}}
    if execution.type == "retry_turn" and payload.get("recoverFromTurnId"):
        # It ran a recorded turn again: its own record (and the answers) is what to recover now.
        return {"type": "retry_turn", "payload": {"recoverFromTurnId": execution.turn_id}}
    payload.pop("recoverFromTurnId", None)
    payload.pop(PLUGIN_SETTINGS_KEY, None)
    return {"type": execution.type, "payload": payload}


def execution_task_run(execution_id: str, *, hostname: str = "") -> str | None:
    """The task body: run the execution with fresh DB connections (tasks share long-lived threads);
    hostname: the worker's node name (warm-shutdown re-queueing, see ``execution_run``)."""
    close_old_connections()
    return execution_run(execution_id=execution_id, hostname=hostname)
