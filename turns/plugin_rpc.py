"""POST /api/sessions/:id/plugin-rpc: structured instructions to a session's plugins (spec 004 §插件
RPC 通道, §RPC Approval 流程, §/plugins 命令). No chat input, no player turn.

kinds (``kind`` decides; nothing is guessed from other fields):

- ``action`` ``{pluginId, action, payload?}``: a handler the plugin's entry registered with
  ``api.register_rpc(name, handler)`` — called ``handler(ctx, payload)`` — or, under the reserved id
  ``framework``, a framework default action (``slash-debug``; ``slash-plugins`` needs the
  ``framework:plugins`` command context). Names with a framework approval prefix (``covel:``,
  ``runtime:``, ``event:``) are refused (400 reserved_action) even when registered. The handler runs
  under the session lock with COVEL_RPC_HANDLER_TIMEOUT_SECONDS (30 s); past it ``ctx.signal`` is
  aborted, later ``ctx.store`` calls are refused, a store call in progress finishes, then 504
  handler_timeout and the lock is released. Writes made before stay (they are immediate).
  ``ctx.store`` is bound to the session and plugin and offers exactly ``getSession()``,
  ``listTurnMessages(limit≤200)``, ``getPluginData / setPluginData / listPluginData`` of the own
  plugin (snake_case aliases too); ``setPluginData`` checks the namespace's dataset (``set`` op,
  record schema) and raises ``StoreRejected`` the handler may catch. → 200 ``{status: "ok", result}``.
- ``runtime`` ``{pluginId, runtimeId, payload?, expectsBackgroundFollower?, retryFromTurnId?}``: one
  manual run through the full turn flow (turns.engine.manual) → 200 ``{status: "ok", turnId,
  runtimeResults, durationMs, deferredJobs?}`` (``deferredJobs``: the background followers its
  emitted events queued in the same commit, turns.engine.followers); ``schedule.background`` (or
  expectsBackgroundFollower) → a durable ``_runtime_jobs`` job (origin.activation ``manual``) queued
  under the lock through the engine's ``runtime_jobs_stage`` port → 202 ``{status: "accepted", jobId,
  pending: true, turnId, runtimeId, phase?}``; with ``phase: "prompt"`` the job fails
  ``follower-not-emitted`` when the entry woke no follower. X-Plugin-User-Settings reach the run (and
  the job's frozen ``userSettings``). A plugin the fault breaker paused is 404 plugin_not_active.
- ``command`` ``{commandId, input | args}``: a command of the session's catalogue (framework
  ``/plugins``, ``/debug`` and the runnable plugins' ``contributes.commands``), arguments validated
  against its declaration, then its action runs as above with ``ctx.command`` / payload
  ``{invocationId, commandId, command, canonical, raw, argv, args, source}``; a command with a
  declared ``context`` answers with ``environment`` re-read after the action.
- ``event`` ``{pluginId, topic, payload?}``: a topic the plugin declares; payload checked against
  the topic's schema; every runnable runtime with ``trigger: {type: event, topic}`` is queued as an
  event job (origin.activation ``event``, sourceTurnId = eventId, ``ctx.trigger_event``) in one
  transaction → 200 ``{status: "ok", eventId, topic, deferredJobs: [{jobId, runtimeId}]}``.

Community plugins pass the approval gate first (sessions.approvals): server code, then the action /
``runtime:<id>`` / ``event:<topic>`` (and for events, each community subscriber's code grants), one
missing grant per request → 202 ``{status: "approval-required", approvalId, pending}``; every check is
repeated after the session lock is taken. Errors use the standard envelope (turns.errors
RPC_STATUS_BY_CODE).
"""
from __future__ import annotations

import json
import logging
import shlex
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import jsonschema
from django.conf import settings
from django.db import connections, transaction

from covel.credentials import credentials_scope
from covel.errors import ApiError, SessionNotFound
from plugins_app.diagnostics import CALLER_FRAMEWORK, CONTRACT_RPC_ACTION, call_record
from plugins_app.errors import PluginNotFound
from plugins_app.models import PluginData
from plugins_app.selectors_plugin_data import RESERVED_PREFIX
from plugins_app.trust import action_is_reserved, event_action
from sessions import approvals, locks
from sessions.faults import plugins_paused
from sessions.grants import code_grant_checker
from sessions.models import Session, TurnMessage
from sessions.selectors import runnable_plugins, session_commands, session_out
from turns import errors as E
from turns.engine import ports
from turns.events import session_events_append

logger = logging.getLogger("covel.plugin_rpc")

KIND_ACTION, KIND_RUNTIME, KIND_COMMAND, KIND_EVENT = "action", "runtime", "command", "event"
FRAMEWORK_PLUGIN_ID = "framework"
ACTION_SLASH_DEBUG = "slash-debug"
ACTION_SLASH_PLUGINS = "slash-plugins"
COMMAND_FRAMEWORK_PLUGINS = "framework:plugins"
SOURCE_COMPOSER, SOURCE_PLUGIN_UI = "composer", "plugin-ui"
TURN_MESSAGES_MAX = 200
BACKGROUND_QUEUE_MAX = 256
ACTIVATION_MANUAL, ACTIVATION_EVENT = "manual", "event"
#: 202 ``phase`` (and job payload ``phase``) of an expectsBackgroundFollower run of a sync runtime.
PHASE_PROMPT = "prompt"

#: kind → (required fields, accepted fields)
_FIELDS: dict[str, tuple[set[str], set[str]]] = {
    KIND_ACTION: ({"pluginId", "action"}, {"kind", "pluginId", "action", "payload"}),
    KIND_RUNTIME: ({"pluginId", "runtimeId"},
                   {"kind", "pluginId", "runtimeId", "payload", "expectsBackgroundFollower", "retryFromTurnId"}),
    KIND_COMMAND: ({"commandId"}, {"kind", "commandId", "input", "args"}),
    KIND_EVENT: ({"pluginId", "topic"}, {"kind", "pluginId", "topic", "payload"}),
}
_STRING_FIELDS = ("pluginId", "action", "runtimeId", "commandId", "topic", "input", "retryFromTurnId")


def _invalid(message: str, details: dict[str, Any] | None = None) -> E.PluginRpcError:
    return E.PluginRpcError(E.RPC_INVALID_REQUEST, message, details)


@dataclass
class RpcRequest:
    """A parsed plugin-rpc body (wire names as in the spec)."""

    kind: str
    fields: dict[str, Any] = field(default_factory=dict)

    def get(self, name: str, default: Any = None) -> Any:
        return self.fields.get(name, default)


def rpc_request_parse(body: Any) -> RpcRequest:
    """Validate the body's shape for its kind. Raises 400 invalid_rpc_request: not an object, kind
    missing or unknown, a required field missing, a field of another kind, a wrong type, command
    with both or neither of input/args, event payload not an object."""
    if not isinstance(body, dict):
        raise _invalid("Request body must be a JSON object")
    kind = body.get("kind")
    if kind not in _FIELDS:
        raise _invalid("kind must be one of action, runtime, command, event")
    required, accepted = _FIELDS[kind]
    extra = sorted(set(body) - accepted)
    if extra:
        raise _invalid(f"{extra[0]} is not accepted with kind {kind}", {"field": extra[0]})
    missing = sorted(required - set(body))
    if missing:
        raise _invalid(f"kind {kind} needs {missing[0]}", {"field": missing[0]})
    for name in _STRING_FIELDS:
        if name in body and (not isinstance(body[name], str) or not body[name]):
            raise _invalid(f"{name} must be a non-empty string", {"field": name})
    if kind == KIND_COMMAND:
        if ("input" in body) == ("args" in body):
            raise _invalid("a command takes exactly one of input and args")
        if "args" in body and not isinstance(body["args"], dict):
            raise _invalid("args must be an object", {"field": "args"})
    if kind == KIND_EVENT and "payload" in body and not isinstance(body["payload"], dict):
        raise _invalid("an event payload must be an object", {"field": "payload"})
    if "expectsBackgroundFollower" in body and not isinstance(body["expectsBackgroundFollower"], bool):
        raise _invalid("expectsBackgroundFollower must be a boolean", {"field": "expectsBackgroundFollower"})
    return RpcRequest(kind=kind, fields=dict(body))


# ---------------------------------------------------------------------------------------------
# Shared checks
# ---------------------------------------------------------------------------------------------


def _registry():
    from plugins_app.registry import plugin_registry

    return plugin_registry()


def _session_check(session: Session) -> None:
    if session.deletion_state:
        raise E.PluginRpcError(E.SESSION_DELETING, "Session is being deleted")
    if session.status != Session.STATUS_ACTIVE:
        raise E.PluginRpcError(E.SESSION_NOT_ACTIVE, f"Session is {session.status}, not active")


def _session_reload(session: Session) -> Session:
    """The session as it is now, inside the lock (it may have changed or been replaced meanwhile)."""
    fresh = Session.objects.filter(pk=session.pk).first()
    if fresh is None:
        raise SessionNotFound(session.pk)
    if fresh.incarnation != session.incarnation:
        raise E.PluginRpcError(E.SESSION_INCARNATION_CHANGED, "The session was replaced while the request waited")
    _session_check(fresh)
    return fresh


def _plugin_active(session: Session, registry, plugin_id: str):
    """The plugin's record when it is enabled and can run in the session, else 404 plugin_not_active
    (the message names why when the player chose it but it cannot run now)."""
    runnable, rejections = runnable_plugins(session, registry)
    if plugin_id not in runnable:
        rejection = next((r for r in rejections if r.get("pluginId") == plugin_id), None)
        reason = f" ({rejection.get('reason')})" if rejection else ""
        raise E.PluginRpcError(E.RPC_PLUGIN_NOT_ACTIVE, f"Plugin is not active in this session: {plugin_id}{reason}")
    if plugin_id in plugins_paused(session.metadata):
        raise E.PluginRpcError(E.RPC_PLUGIN_NOT_ACTIVE,
                               f"Plugin is not active in this session: {plugin_id} (paused after repeated faults; resume it first)")
    return registry.get(plugin_id)


def _lock(session_id: str):
    return locks.session_lock(session_id)


# ---------------------------------------------------------------------------------------------
# The action context and its store
# ---------------------------------------------------------------------------------------------


class StoreRejected(Exception):
    """A ``ctx.store`` call was refused (reserved namespace, dataset rule, size, or the handler's
    time is up). ``code`` is stable; the handler may catch it and answer for itself."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class _Signal:
    """``ctx.signal``: aborted once the handler's time is up (``is_aborted``, ``reason``)."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.reason: str | None = None

    def abort(self, reason: str) -> None:
        self.reason = reason
        self._event.set()

    @property
    def is_aborted(self) -> bool:
        return self._event.is_set()

    aborted = is_aborted

    def wait(self, timeout: float | None = None) -> bool:
        return self._event.wait(timeout)


class RpcStore:
    """``ctx.store`` of one action call: the session and the calling plugin only (spec 004 §action 的
    context.store). After ``close()`` (the handler timed out) every call raises StoreRejected
    (``handler_timeout``); ``close`` waits for a call already running."""

    def __init__(self, session_id: str, record) -> None:
        self._session_id = session_id
        self._record = record
        self._lock = threading.Lock()
        self._closed = False

    def close(self) -> None:
        with self._lock:
            self._closed = True

    def _open(self) -> None:
        if self._closed:
            raise StoreRejected(E.RPC_HANDLER_TIMEOUT, "the handler's time is up; the store is closed")

    def getSession(self) -> dict[str, Any]:  # noqa: N802 (spec name)
        """The session record (read-only copy)."""
        with self._lock:
            self._open()
            session = Session.objects.filter(pk=self._session_id).first()
            return session_out(session) if session is not None else {}

    def listTurnMessages(self, limit: int | None = None) -> list[dict[str, Any]]:  # noqa: N802
        """The newest committed turn messages, oldest first: at most ``limit`` (≤ 200, default 200)."""
        if limit is None:
            limit = TURN_MESSAGES_MAX
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise StoreRejected("invalid_limit", "limit must be a positive integer")
        with self._lock:
            self._open()
            rows = list(TurnMessage.objects.filter(session_id=self._session_id).order_by("-id")[:min(limit, TURN_MESSAGES_MAX)])
        rows.reverse()
        return [{"turnId": r.turn_id, "runtimeId": r.runtime_id, "role": r.role, "content": r.content} for r in rows]

    def getPluginData(self, namespace: str, key: str) -> Any:  # noqa: N802
        """The own plugin's value at (namespace, key), or None."""
        with self._lock:
            self._open()
            if not isinstance(namespace, str) or namespace.startswith(RESERVED_PREFIX):
                return None
            row = PluginData.objects.filter(session_id=self._session_id, plugin_id=self._record.id, namespace=namespace,
                                            key=key).first()
            return row.value if row is not None else None

    def listPluginData(self, namespace: str) -> dict[str, Any]:  # noqa: N802
        """``{key: value}`` of the own plugin's namespace (kernel namespaces read as empty)."""
        with self._lock:
            self._open()
            if not isinstance(namespace, str) or namespace.startswith(RESERVED_PREFIX):
                return {}
            rows = PluginData.objects.filter(session_id=self._session_id, plugin_id=self._record.id, namespace=namespace)
            return {r.key: r.value for r in rows.order_by("key")}

    def setPluginData(self, namespace: str, key: str, value: Any) -> dict[str, Any]:  # noqa: N802
        """Write the own plugin's value now (one transaction with its plugin-data.changed event).
        Checks the destination dataset (``set`` among its ops, the record schema). Returns ``{version}``."""
        from turns import services_plugin_data

        if not isinstance(namespace, str) or not isinstance(key, str) or not namespace or not key:
            raise StoreRejected("invalid_location", "namespace and key must be non-empty strings")
        with self._lock:
            self._open()
            self._dataset_check(namespace, value)
            try:
                row = services_plugin_data.plugin_data_put(session_id=self._session_id, plugin_id=self._record.id,
                                                           namespace=namespace, key=key, value=value)
            except ApiError as exc:
                raise StoreRejected(exc.code or "rejected", exc.message) from None
            return {"version": row.version}

    def _dataset_check(self, namespace: str, value: Any) -> None:
        declaration = self._record.manifest.contributes.datasets.get(namespace)
        if not isinstance(declaration, dict):
            return
        ops = declaration.get("ops") if isinstance(declaration.get("ops"), list) else ["set"]
        if "set" not in ops:
            raise StoreRejected("dataset-violation", f"dataset {namespace} does not allow set")
        schema = declaration.get("schema")
        if isinstance(schema, str):
            try:
                schema = json.loads((self._record.manifest.root / schema).read_text(encoding="utf-8"))
            except (OSError, ValueError):
                schema = None
        if isinstance(schema, dict):
            error = next(iter(jsonschema.validators.validator_for(schema)(schema).iter_errors(value)), None)
            if error is not None:
                raise StoreRejected("dataset-violation", f"the record does not match dataset {namespace}: {error.message}")

    get_session = getSession
    list_turn_messages = listTurnMessages
    get_plugin_data = getPluginData
    list_plugin_data = listPluginData
    set_plugin_data = setPluginData


@dataclass
class RpcContext:
    """What an action handler receives as ``ctx``: session_id, plugin_id, action, locale, store
    (RpcStore), signal (aborted at the time limit), command (the invocation for commands, else
    None), environment (the declared context before the action, commands only), log(message)."""

    session_id: str
    plugin_id: str
    action: str
    locale: str
    store: RpcStore
    signal: _Signal
    command: dict[str, Any] | None = None
    environment: dict[str, Any] | None = None
    logs: list[str] = field(default_factory=list)

    def log(self, message: str) -> None:
        self.logs.append(str(message))


def _timeout_seconds() -> float:
    return float(settings.COVEL_RPC_HANDLER_TIMEOUT_SECONDS)


def _handler_run_recorded(handler, ctx: RpcContext, payload: Any, *, incarnation: str) -> Any:
    """``_handler_run``, recorded in the process's call window for the session's plugin diagnostics
    (plugins_app.diagnostics: identities, duration and outcome only — no payload or result)."""
    outcome, error_code = "error", "handler-error"
    started = time.monotonic()
    try:
        value = _handler_run(handler, ctx, payload)
        outcome, error_code = "success", None
        return value
    except E.PluginRpcError as exc:
        if exc.code == E.RPC_HANDLER_TIMEOUT:
            outcome, error_code = "timeout", "timeout"
        raise
    finally:
        call_record(session_id=ctx.session_id, incarnation=incarnation, caller_plugin_id=CALLER_FRAMEWORK,
                    provider_plugin_id=ctx.plugin_id, name=ctx.action, contract=CONTRACT_RPC_ACTION, outcome=outcome,
                    duration_ms=(time.monotonic() - started) * 1000, error_code=error_code)


def _handler_run(handler, ctx: RpcContext, payload: Any) -> Any:
    """Call ``handler(ctx, payload)`` on its own thread within the time limit (see module docstring).
    Raises 504 handler_timeout, or 500 (no code) when the handler raised or returned no JSON value."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = handler(ctx, payload)
        except BaseException as exc:  # plugin code may raise anything
            box["error"] = exc
        finally:
            connections.close_all()

    thread = threading.Thread(target=target, name=f"covel-rpc-{ctx.plugin_id}-{ctx.action}"[:60], daemon=True)
    thread.start()
    thread.join(_timeout_seconds())
    if thread.is_alive():
        ctx.signal.abort(E.RPC_HANDLER_TIMEOUT)
        ctx.store.close()  # waits for a store call in progress, then refuses the rest
        raise E.PluginRpcError(E.RPC_HANDLER_TIMEOUT, f"The action handler did not finish within {_timeout_seconds():g} s")
    if "error" in box:
        logger.error("plugin %s action %s raised", ctx.plugin_id, ctx.action, exc_info=box["error"])
        raise ApiError(500, None, "The plugin action failed")
    try:
        return json.loads(json.dumps(box.get("value")))
    except (TypeError, ValueError):
        logger.error("plugin %s action %s returned a value JSON cannot hold", ctx.plugin_id, ctx.action)
        raise ApiError(500, None, "The plugin action failed") from None


# ---------------------------------------------------------------------------------------------
# kind: action (and the action a command runs)
# ---------------------------------------------------------------------------------------------


def _action_handler(session: Session, registry, record, action: str, *, approval_payload: Any):
    """Admission of a plugin action (before and again inside the lock): the community gate
    (server code, then the entry import, then the action's own grant) and the registered handler.
    Returns (handler, grant or None). 404 unknown_action when the entry registered no such action."""
    if record.needs_code_grant:
        if not record.manifest.entry:
            raise E.PluginRpcError(E.RPC_UNKNOWN_ACTION, f"{record.id} registers no action {action}")
        approvals.code_gate(session, record, [], payload=approval_payload)
        if record.is_code_pending:
            record = registry.entry_ensure(record.id)
        if not record.is_loaded:
            logger.error("plugin %s: entry failed to load: %s", record.id, record.error)
            raise ApiError(500, None, "The plugin's server code failed to load")
    registration = record.registrations.rpcs.get(action)
    if registration is None:
        raise E.PluginRpcError(E.RPC_UNKNOWN_ACTION, f"{record.id} registers no action {action}")
    granted = approvals.action_grant(session, record, action, payload=approval_payload)
    return registration.target, granted


def _plugin_action_run(session: Session, registry, plugin_id: str, action: str, payload: Any, *,
                       command: dict[str, Any] | None = None, approval_payload: Any = None,
                       declaration_check=None) -> Any:
    if approval_payload is None:
        approval_payload = payload
    record = _plugin_active(session, registry, plugin_id)
    _action_handler(session, registry, record, action, approval_payload=approval_payload)
    with _lock(session.pk):
        session = _session_reload(session)
        record = _plugin_active(session, registry, plugin_id)
        if declaration_check is not None:
            declaration_check(session)
        handler, granted = _action_handler(session, registry, record, action, approval_payload=approval_payload)
        approvals.once_grant_consume(session, record, granted, payload=approval_payload)
        ctx = RpcContext(session_id=session.pk, plugin_id=record.id, action=action, locale=session.locale,
                         store=RpcStore(session.pk, record), signal=_Signal(), command=command,
                         environment=_environment(session, registry, command) if command else None)
        return _handler_run_recorded(handler, ctx, payload, incarnation=session.incarnation)


def _framework_action(session: Session, registry, action: str, *, command: dict[str, Any] | None) -> dict[str, Any]:
    """Framework default actions (spec 004 框架默认 action). Read-only; no lock."""
    if action == ACTION_SLASH_PLUGINS:
        if command is None or command.get("commandId") != COMMAND_FRAMEWORK_PLUGINS:
            raise E.PluginRpcError(E.RPC_COMMAND_CONTEXT_REQUIRED,
                                   "slash-plugins runs only as the framework:plugins command")
        client_action: dict[str, Any] = {"type": "open-plugin-diagnostics"}
        plugin_id = (command.get("args") or {}).get("pluginId")
        if plugin_id is not None:
            if registry.get(plugin_id) is None:
                raise PluginNotFound(plugin_id)
            client_action["pluginId"] = plugin_id
        return {"clientAction": client_action}
    if action == ACTION_SLASH_DEBUG:
        return {"clientAction": {"type": "open-debug", "sessionId": session.pk, "view": "traces"},
                "context": _environment(session, registry, {"context": ["session", "active-runtimes", "models"]})}
    raise E.PluginRpcError(E.RPC_UNKNOWN_ACTION, f"framework has no action {action}")


def _action(session: Session, request: RpcRequest, registry) -> tuple[int, dict[str, Any]]:
    plugin_id, action = request.get("pluginId"), request.get("action")
    if action_is_reserved(action):
        raise E.PluginRpcError(E.RPC_RESERVED_ACTION, f"{action} is a framework approval key, not an action")
    payload = request.get("payload")
    if plugin_id == FRAMEWORK_PLUGIN_ID:
        return 200, {"status": "ok", "result": _framework_action(session, registry, action, command=None)}
    result = _plugin_action_run(session, registry, plugin_id, action, payload)
    return 200, {"status": "ok", "result": result}


# ---------------------------------------------------------------------------------------------
# kind: command
# ---------------------------------------------------------------------------------------------


def _environment(session: Session, registry, command: dict[str, Any] | None) -> dict[str, Any] | None:
    """The declared context of a command, read now and cut to its scopes (session, active-runtimes,
    models); None when it declares none."""
    scopes = [s for s in (command or {}).get("context") or [] if isinstance(s, str)]
    if not scopes:
        return None
    fresh = Session.objects.filter(pk=session.pk).first() or session
    out: dict[str, Any] = {}
    if "session" in scopes:
        record = session_out(fresh)
        out["session"] = {k: record.get(k) for k in ("id", "worldId", "status", "phase", "locale", "completedPlayerTurns")}
    if "active-runtimes" in scopes:
        runnable, _ = runnable_plugins(fresh, registry)
        out["activeRuntimes"] = [r.id for pid in runnable for r in registry.get(pid).manifest.runtimes]
    if "models" in scopes:
        from turns.engine.providers.config import model_config_active

        config, _error = model_config_active(settings.COVEL_HOME, path=settings.COVEL_LLM_TOML)
        slots = [config.slot(name) for name in (config.slots or ("story", "plugin"))]
        out["models"] = {slot.name: {"provider": slot.provider, "model": slot.model} for slot in slots}
    return out


def _arg_value(declared: dict[str, Any], raw: Any, *, from_text: bool) -> Any:
    name, kind = declared.get("name"), declared.get("type") or "string"
    value = raw
    if from_text and isinstance(raw, str):
        try:
            if kind == "integer":
                value = int(raw)
            elif kind == "number":
                value = float(raw)
            elif kind == "boolean":
                lowered = raw.lower()
                if lowered not in ("true", "false", "yes", "no", "1", "0"):
                    raise ValueError(raw)
                value = lowered in ("true", "yes", "1")
        except ValueError:
            raise E.PluginRpcError(E.RPC_COMMAND_ARGS_INVALID, f"argument {name} must be a {kind}") from None
    is_ok = {
        "string": isinstance(value, str),
        "integer": isinstance(value, int) and not isinstance(value, bool),
        "number": isinstance(value, (int, float)) and not isinstance(value, bool),
        "boolean": isinstance(value, bool),
    }.get(kind, isinstance(value, str))
    if not is_ok:
        raise E.PluginRpcError(E.RPC_COMMAND_ARGS_INVALID, f"argument {name} must be a {kind}")
    choices = declared.get("choices")
    if isinstance(choices, list) and choices and str(value) not in choices:
        raise E.PluginRpcError(E.RPC_COMMAND_ARGS_INVALID, f"argument {name} must be one of {', '.join(choices)}")
    return value


def command_invocation(command: dict[str, Any], *, text: str | None, args: dict[str, Any] | None) -> dict[str, Any]:
    """Validate and normalize one command call against its declaration. ``text`` (composer input,
    ``/name a b``) is re-tokenized and converted; ``args`` (plugin UI) is checked as is (unknown
    fields, types, choices, required, variadic). Returns ``{invocationId, commandId, command,
    canonical, raw, argv, args, source}``. Raises 400 command_args_invalid."""
    declared = [a for a in command.get("arguments") or [] if isinstance(a, dict) and isinstance(a.get("name"), str)]
    name = command["name"]
    values: dict[str, Any] = {}
    if text is not None:
        try:
            tokens = shlex.split(text)
        except ValueError as exc:
            raise E.PluginRpcError(E.RPC_COMMAND_ARGS_INVALID, f"input cannot be read: {exc}") from None
        names = {name, *[a for a in command.get("aliases") or [] if isinstance(a, str)]}
        if not tokens or not tokens[0].startswith("/") or tokens[0][1:] not in names:
            raise E.PluginRpcError(E.RPC_COMMAND_ARGS_INVALID, f"input must start with /{name}")
        argv = tokens[1:]
        for index, arg in enumerate(declared):
            if arg.get("variadic"):
                if index < len(argv):
                    values[arg["name"]] = _arg_value(arg, " ".join(argv[index:]), from_text=True)
                argv_used = len(argv)
                break
            if index < len(argv):
                values[arg["name"]] = _arg_value(arg, argv[index], from_text=True)
        else:
            argv_used = min(len(argv), len(declared))
        if len(argv) > argv_used:
            raise E.PluginRpcError(E.RPC_COMMAND_ARGS_INVALID, f"/{name} takes at most {len(declared)} argument(s)")
        source, raw = SOURCE_COMPOSER, text
    else:
        known = {a["name"]: a for a in declared}
        unknown = sorted(set(args or {}) - set(known))
        if unknown:
            raise E.PluginRpcError(E.RPC_COMMAND_ARGS_INVALID, f"/{name} has no argument {unknown[0]}")
        for key, value in (args or {}).items():
            values[key] = _arg_value(known[key], value, from_text=False)
        argv = [str(values[a["name"]]) for a in declared if a["name"] in values]
        source, raw = SOURCE_PLUGIN_UI, None
    for arg in declared:
        if arg.get("required") and arg["name"] not in values:
            raise E.PluginRpcError(E.RPC_COMMAND_ARGS_INVALID, f"/{name} needs the argument {arg['name']}")
    canonical = " ".join([f"/{name}", *[shlex.quote(str(values[a["name"]])) for a in declared if a["name"] in values]])
    return {"invocationId": str(uuid.uuid4()), "commandId": command["id"], "command": name, "canonical": canonical,
            "raw": raw if raw is not None else canonical, "argv": argv, "args": values, "source": source}


def _command_find(session: Session, registry, command_id: str) -> dict[str, Any]:
    command = next((c for c in session_commands(session, registry) if c.get("id") == command_id), None)
    if command is None:
        raise E.PluginRpcError(E.RPC_COMMAND_NOT_ACTIVE, f"No command {command_id} in this session")
    return command


def _command(session: Session, request: RpcRequest, registry) -> tuple[int, dict[str, Any]]:
    command_id = request.get("commandId")
    command = _command_find(session, registry, command_id)
    invocation = command_invocation(command, text=request.get("input"), args=request.get("args"))
    action = command.get("action")
    if command["pluginId"] == FRAMEWORK_PLUGIN_ID:
        result = _framework_action(session, registry, action, command=invocation)
    else:
        def declaration_check(locked: Session) -> None:
            now = next((c for c in session_commands(locked, registry) if c.get("id") == command_id), None)
            if now != command:
                raise E.PluginRpcError(E.RPC_COMMAND_CHANGED, f"The command {command_id} changed while the request waited")

        result = _plugin_action_run(session, registry, command["pluginId"], action, invocation, command={**command, **invocation},
                                    approval_payload={"commandId": command_id, "args": invocation["args"]},
                                    declaration_check=declaration_check)
    out: dict[str, Any] = {"status": "ok", "result": result}
    environment = _environment(session, registry, command)
    if environment is not None:
        out["environment"] = environment
    return 200, out


# ---------------------------------------------------------------------------------------------
# kind: runtime
# ---------------------------------------------------------------------------------------------


def _subagent_gate(session: Session, registry, payload: Any) -> None:
    """Community subagent providers of the session need their code grants too (any run may call them)."""
    runnable, _ = runnable_plugins(session, registry)
    for plugin_id in runnable:
        record = registry.get(plugin_id)
        ids = [r.id for r in record.manifest.runtimes if r.is_subagent_only]
        if ids and record.needs_code_grant:
            approvals.code_gate(session, record, ids, payload=payload)


def _retry_logical_turn(session: Session, turn_id: str) -> int | None:
    """The logical turn of the recorded turn ``turn_id`` (a retry runs with its source's turn number,
    e.g. so the dimension tracker settles that source's receipt; spec 004 §维度编辑与待结算恢复)."""
    from turns.engine.retry import logical_turn_of
    from turns.models import TurnResult

    row = TurnResult.objects.filter(session_id=session.pk, turn_id=turn_id).first()
    return logical_turn_of(row, session.completed_player_turns) if row is not None else None


def _retry_inputs(session: Session, runtime, turn_id: str) -> dict[str, Any]:
    """io.inputs of ``runtime`` resolved from the stored results of the committed turn ``turn_id``."""
    from turns.engine.retry import turn_results_load
    from turns.engine.schedule import inputs_resolve
    from turns.models import RuntimeOutput, TurnResult

    row = TurnResult.objects.filter(session_id=session.pk, turn_id=turn_id).first()
    if row is None:
        raise E.PluginRpcError(E.RPC_RETRY_TURN_NOT_FOUND, f"Turn not found: {turn_id}")
    if not row.committed:
        raise E.PluginRpcError(E.RPC_RETRY_SOURCE_NOT_COMMITTED, f"Turn {turn_id} was not committed")
    registry = _registry()
    manifests = {}
    for runtime_id in RuntimeOutput.objects.filter(session_id=session.pk, turn_id=turn_id).values_list("runtime_id", flat=True):
        manifest = registry.runtime(runtime_id)
        if manifest is not None:
            manifests[runtime_id] = manifest
    # The stored typed outputs (RuntimeOutput ``results[0].structured``), as the action retries read them.
    results = {r.runtime_id: r for r in turn_results_load(session.pk, [turn_id], set(), manifests)}
    inputs, _missing = inputs_resolve(runtime, results, manifests)
    return inputs


def _runtime(session: Session, request: RpcRequest, registry, provider_keys, plugin_settings) -> tuple[int, dict[str, Any]]:
    plugin_id, runtime_id = request.get("pluginId"), request.get("runtimeId")
    payload = request.get("payload")
    if runtime_id.split("/", 1)[0] != plugin_id:
        raise E.PluginRpcError(E.RPC_PLUGIN_MISMATCH, f"{runtime_id} does not belong to {plugin_id}")

    def admit(current: Session):
        record = _plugin_active(current, registry, plugin_id)
        runtime = next((r for r in record.manifest.runtimes if r.id == runtime_id), None)
        if runtime is None:
            raise E.PluginRpcError(E.RPC_RUNTIME_NOT_ACTIVE, f"Runtime is not active in this session: {runtime_id}")
        if runtime.is_subagent_only:
            raise E.PluginRpcError(E.RPC_RUNTIME_SUBAGENT_ONLY, f"{runtime_id} runs only as a subagent")
        approvals.code_gate(current, record, [runtime.id], payload=payload)
        _subagent_gate(current, registry, payload)
        return record, runtime

    _record, runtime = admit(session)
    retry_from = request.get("retryFromTurnId")
    inputs = _retry_inputs(session, runtime, retry_from) if retry_from else {}
    logical_turn = _retry_logical_turn(session, retry_from) if retry_from else None
    follower = bool(request.get("expectsBackgroundFollower"))
    with _lock(session.pk):
        session = _session_reload(session)
        record, runtime = admit(session)
        if runtime.is_background or follower:
            return 202, _runtime_enqueue(session, record, runtime, payload, inputs=inputs,
                                         phase=PHASE_PROMPT if follower and not runtime.is_background else None,
                                         user_settings=plugin_settings.get(record.id) or {})
        return _runtime_sync(session, runtime, payload, inputs=inputs, provider_keys=provider_keys,
                             plugin_settings=plugin_settings, logical_turn=logical_turn)


def _runtime_sync(session: Session, runtime, payload: Any, *, inputs, provider_keys,
                  plugin_settings, logical_turn: int | None = None) -> tuple[int, dict[str, Any]]:
    from turns.engine.manual import manual_runtime_run
    from turns.engine.run import RuntimeJobRejected

    try:
        outcome = manual_runtime_run(session.pk, runtime.id, manual_payload=payload, inputs=inputs,
                                     provider_keys=provider_keys, plugin_settings=plugin_settings,
                                     code_grants=code_grant_checker(session.pk), logical_turn=logical_turn)
    except RuntimeJobRejected as exc:
        raise E.PluginRpcError(E.RPC_RUNTIME_NOT_ACTIVE, exc.message) from None
    result = outcome.result
    item: dict[str, Any] = {"runtimeId": result.runtime_id, "pluginId": result.plugin_id,
                            "status": "ok" if result.status == "success" else result.status,
                            "durationMs": result.duration_ms, "output": None if runtime.is_concealed else result.output}
    if result.error:
        item["error"] = result.error
    if not outcome.committed and E.RPC_DIMENSION_VERSION_CONFLICT in str((outcome.error or {}).get("message")):
        raise E.PluginRpcError(E.RPC_DIMENSION_VERSION_CONFLICT, "A dimension changed before the edit could be saved; "
                               "read GET /api/sessions/:id/view again", {"currentVersions": _dimension_versions(session.pk)})
    if not outcome.committed:
        raise E.PluginRpcError(E.RPC_TURN_COMMIT_FAILED, "The runtime's proposals could not be committed",
                               {"turnId": outcome.turn_id, "runtimeResults": [item], "error": outcome.error})
    out = {"status": "ok", "turnId": outcome.turn_id, "runtimeResults": [item], "durationMs": outcome.duration_ms}
    if outcome.deferred_jobs:
        out["deferredJobs"] = outcome.deferred_jobs  # background followers its events queued
    return 200, out


def _dimension_versions(session_id: str) -> dict[str, int]:
    """{dimension id: committed version} of the session (the 409 dimension-version-conflict details)."""
    from sessions.models import DimensionValue

    return dict(DimensionValue.objects.filter(session_id=session_id).values_list("dimension_id", "version"))


def _jobs_stage(session: Session, specs: list[dict[str, Any]]) -> None:
    """Write runtime jobs and their events in one transaction (tasks are sent after it commits)."""
    if ports.runtime_jobs_queued_count(session.pk) + len(specs) > BACKGROUND_QUEUE_MAX:
        raise E.PluginRpcError(E.RPC_BACKGROUND_QUEUE_FULL, "Too many queued background jobs in this session")
    with transaction.atomic():
        locked = Session.objects.select_for_update().get(pk=session.pk)
        events = ports.runtime_jobs_stage(session=locked, jobs=specs)
        session_events_append(locked.pk, events)


def _job_payload(session: Session, runtime, *, origin: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"origin": origin, "stage": runtime.stage, "inputs": {}, "logicalTurn": session.completed_player_turns + 1,
            "locale": session.locale, "model": None, "userSettings": {}, "completion": dict(runtime.completion), **extra}


def _runtime_enqueue(session: Session, record, runtime, payload: Any, *, inputs, phase: str | None,
                     user_settings: dict[str, Any]) -> dict[str, Any]:
    turn_id, job_id = str(uuid.uuid4()), str(uuid.uuid4())
    extra: dict[str, Any] = {"phase": phase} if phase else {}
    spec = {"jobId": job_id, "pluginId": record.id, "runtimeId": runtime.id,
            "payload": {**_job_payload(session, runtime, origin={"activation": ACTIVATION_MANUAL, "sourceTurnId": turn_id},
                                       turnId=turn_id, manualPayload=payload, inputs=inputs, **extra),
                        "userSettings": user_settings}}
    _jobs_stage(session, [spec])
    out = {"status": "accepted", "jobId": job_id, "pending": True, "turnId": turn_id, "runtimeId": runtime.id}
    if phase:
        out["phase"] = phase
    return out


# ---------------------------------------------------------------------------------------------
# kind: event
# ---------------------------------------------------------------------------------------------


def _event_schema(record, declaration: dict[str, Any]) -> dict[str, Any] | None:
    # The one loader the engine's event directory uses too (inline object or package .json file).
    from plugins_app.manifest_files import event_schema_load

    schema, problem = event_schema_load(record.manifest.root, declaration)
    if problem is not None:
        logger.warning("plugin %s: event schema %s is unusable: %s", record.id, declaration.get("schema"), problem)
    return schema


def _event(session: Session, request: RpcRequest, registry) -> tuple[int, dict[str, Any]]:
    plugin_id, topic = request.get("pluginId"), request.get("topic")
    payload = request.get("payload") if request.get("payload") is not None else {}

    def admit(current: Session):
        record = _plugin_active(current, registry, plugin_id)
        declaration = next((e for e in record.manifest.contributes.events
                            if isinstance(e, dict) and e.get("topic") == topic), None)
        if declaration is None:
            raise E.PluginRpcError(E.RPC_EVENT_NOT_DECLARED, f"{plugin_id} declares no event topic {topic}")
        schema = _event_schema(record, declaration)
        if schema is not None:
            issues = [{"path": [str(p) for p in err.absolute_path], "message": err.message}
                      for err in jsonschema.validators.validator_for(schema)(schema).iter_errors(payload)]
            if issues:
                raise E.PluginRpcError(E.RPC_EVENT_PAYLOAD_INVALID, f"payload does not match {topic}: {issues[0]['message']}",
                                       {"issues": issues})
        granted = approvals.action_grant(current, record, event_action(topic), payload=payload)
        runnable, _ = runnable_plugins(current, registry)
        subscribers = sorted(((registry.get(pid), r) for pid in runnable for r in registry.get(pid).manifest.runtimes
                              if r.trigger.type == "event" and r.trigger.topic == topic), key=lambda pair: pair[1].id)
        for subscriber, runtime in subscribers:
            approvals.code_gate(current, subscriber, [runtime.id], payload=payload)
        return record, granted, subscribers

    admit(session)
    with _lock(session.pk):
        session = _session_reload(session)
        record, granted, subscribers = admit(session)
        approvals.once_grant_consume(session, record, granted, payload=payload)
        event_id = str(uuid.uuid4())
        trigger = {"eventId": event_id, "topic": topic, "pluginId": plugin_id, "payload": payload}
        specs = [{"jobId": str(uuid.uuid4()), "pluginId": subscriber.id, "runtimeId": runtime.id,
                  "payload": _job_payload(session, runtime, origin={"activation": ACTIVATION_EVENT, "sourceTurnId": event_id},
                                          triggerEvent=trigger)}
                 for subscriber, runtime in subscribers]
        if specs:
            _jobs_stage(session, specs)
    return 200, {"status": "ok", "eventId": event_id, "topic": topic,
                 "deferredJobs": [{"jobId": s["jobId"], "runtimeId": s["runtimeId"]} for s in specs]}


# ---------------------------------------------------------------------------------------------
# Entry
# ---------------------------------------------------------------------------------------------


def plugin_rpc(session: Session, body: Any, *, provider_keys: dict[str, str] | None = None,
               plugin_settings: dict[str, dict[str, Any]] | None = None) -> tuple[int, dict[str, Any]]:
    """Dispatch one plugin-rpc request for the authorized ``session`` (see the module docstring).
    provider_keys / plugin_settings: the request's decoded X-Provider-Keys / X-Plugin-User-Settings
    (a runtime run merges the settings over world and manifest defaults; a background job keeps them).
    Returns (HTTP status, body); raises the listed errors and ApprovalRequired (202)."""
    request = rpc_request_parse(body)
    _session_check(session)
    registry = _registry()
    if request.kind == KIND_ACTION:
        return _action(session, request, registry)
    if request.kind == KIND_COMMAND:
        return _command(session, request, registry)
    if request.kind == KIND_RUNTIME:
        # A background run's job holds on to this request's keys for its worker (jobs.credentials).
        with credentials_scope(provider_keys):
            return _runtime(session, request, registry, provider_keys, plugin_settings or {})
    with credentials_scope(provider_keys):
        return _event(session, request, registry)
