"""Function runtimes and guards: plain Python handlers with a ``ctx`` (spec 000 §Function
runtime 调用工具; the Python counterpart of FunctionHandlerContext).

Handler: ``function.handler: ./handler.py`` (function ``handle``) or ``./handler.py:name``,
resolved against the runtime's directory, loaded by file path. ``handle(ctx)`` returns:
- a dict: the runtime's output. Reserved keys are lifted out: ``proposals`` ([{type, payload}]
  staged as Proposals), ``pluginData`` ([{namespace, key, value}] → plugin.data). A
  ``preGameDone: true`` key completes a setup runtime; ``interaction``/``interactions`` ask the
  player (same shape as a tool result's ``interaction``); ``text`` is kept in the output.
- None (no output) or any other JSON value (the output).
Raising, or returning ``{"status": "failed", "error"?}`` (the runtime reports its own failure),
fails the runtime and discards all of its writes. Any failed ``ctx.tools.call`` fails
the runtime too, even when the handler catches the error (spec: 不会提交部分写入).

Guards (``guard: ./guard.py``, function ``guard``) run before an agent runtime with the same
ctx: returning None runs the agent; ``{"skip": "<reason>"}`` skips it; any other dict completes
the runtime without a model call, read exactly like a handler's return value.
"""

from __future__ import annotations

import functools
import json
import logging
import time

from typing import Any, Callable

from plugins_app.manifests import RuntimeManifest
from plugins_app.code_loading import CodeNotLoadable, plugin_module_cached, runtime_code_path
from turns.engine import trace as T
from turns.engine.env import ExecutionEnv
from turns.engine.function_ctx import HostCallFailed, asset_generations_read, host_apis
from turns.engine.cast import history_for_binding
from turns.engine.delegate import NAME as DELEGATE, delegate_tool, recorded_envelope, recorded_input
from turns.engine.hooks import pre_tool_use
from covel.jsoncopy import json_copy
from turns.engine.runtime import (STATUS_FAILED, STATUS_SKIPPED, STATUS_SUCCESS, STATUS_SUSPENDED, RuntimeFailure, RuntimeResult,
                                  TurnInfo)
from turns.engine.state import EngineStateView, StagedProposals
from plugins_app.toolkit import proposals as P
from turns.engine.tools.context import ToolContext
from plugins_app.toolkit.locale import instruction_locale_for
from turns.engine.tools.executor import STATUS_SUCCESS as CALL_SUCCESS, ToolCall

logger = logging.getLogger(__name__)

DEFAULT_HANDLER_NAME = "handle"
DEFAULT_GUARD_NAME = "guard"
RESERVED_KEYS = ("proposals", "pluginData", "interaction", "interactions")
#: Error code of a runtime whose own result says ``status: "failed"`` without naming a code.
RUNTIME_REPORTED_FAILURE = "runtime_reported_failure"



class ToolCallFailed(Exception):
    """A ctx.tools.call failed; ``code``/``message`` come from the tool's error envelope."""

    def __init__(self, name: str, code: str, message: str) -> None:
        super().__init__(f'{name}: {code}: {message}')
        self.tool = name
        self.code = code
        self.message = message


def callable_load(env: ExecutionEnv, runtime: RuntimeManifest, declared: str, default_name: str) -> Callable[..., Any]:
    """Load ``./path.py[:name]`` relative to the runtime's directory. Raises RuntimeFailure."""
    manifest = env.manifest(runtime.plugin_id)
    if manifest is None:
        raise RuntimeFailure("handler_not_loadable", f"plugin {runtime.plugin_id} is not active")
    try:
        candidate, root, name = runtime_code_path(manifest.root, runtime, declared)
    except CodeNotLoadable as exc:
        raise RuntimeFailure("handler_not_loadable", str(exc)) from None
    if not candidate.is_file():
        raise RuntimeFailure("handler_not_loadable", f"{declared} not found")
    try:
        # One module cache per process, shared with the approval decision's preload (plugins_app.code_loading).
        module = plugin_module_cached(root, runtime.plugin_id, candidate)
    except Exception as exc:  # plugin code: any import error
        raise RuntimeFailure("handler_not_loadable", f"{declared}: {type(exc).__name__}: {exc}") from None
    target = getattr(module, name or default_name, None)
    if target is None and not name:
        target = getattr(module, "handler", None) or getattr(module, "run", None)
    if not callable(target):
        raise RuntimeFailure("handler_not_loadable", f"{declared} defines no {name or default_name}(ctx)")
    return target


class _Tools:
    """ctx.tools: call(name, args) runs a whitelisted tool through the ToolExecutor."""

    def __init__(self, env: ExecutionEnv, ctx: "FunctionContext", tool_context: ToolContext, emit, result: RuntimeResult,
                 runtime_tools: dict[str, Any] | None = None) -> None:
        self._env, self._ctx, self._tool_context, self._emit, self._result = env, ctx, tool_context, emit, result
        self._runtime_tools = runtime_tools or {}  # service imports and delegate (built for this runtime)
        self._counter = 0

    def call(self, name: str, args: dict[str, Any] | None = None) -> Any:
        """Run one tool; returns its full content. Raises ToolCallFailed (the runtime fails)."""
        self._counter += 1
        call_id = f"fn-{self._counter}"
        try:
            json.dumps(args or {})
        except (TypeError, ValueError):
            self._ctx.failed = True
            raise ToolCallFailed(name, "invalid-input", "arguments are not JSON-serialisable") from None
        self._emit(T.TOOL_CALLING, {"tool": name, "callId": call_id, "input": recorded_input(name, args or {})})
        # The same PreToolUse hooks as the agent loop; a refusal fails the runtime here (spec 000:
        # 函数 runtime 的 Hook 中止仍使调用失败).
        decision = pre_tool_use(self._env, self._ctx._runtime, self._ctx._turn, name, dict(args or {}))
        call = ToolCall(call_id=call_id, name=decision.name, arguments=decision.arguments)
        if decision.refused is not None:
            outcome = self._env.executor.refused_outcome(call, decision.refused)
        else:
            outcome = self._env.executor.execute_one(call, self._tool_context, runtime_tools=self._runtime_tools)
        recorded = recorded_envelope(name, outcome.envelope)
        self._result.tool_calls.append({"tool": name, "input": recorded_input(name, args or {}), "output": recorded,
                                        "status": outcome.status, "durationMs": outcome.duration_ms})
        if outcome.status != CALL_SUCCESS:
            self._ctx.failed = True
            error = outcome.envelope.get("error") or {}
            self._emit(T.TOOL_FAILED, {"tool": name, "callId": call_id, "error": error, "output": outcome.envelope})
            raise ToolCallFailed(name, str(error.get("code")), str(error.get("message")))
        self._emit(T.TOOL_COMPLETED, {"tool": name, "callId": call_id, "output": recorded, "durationMs": outcome.duration_ms})
        self._ctx._own.extend(outcome.proposals)
        self._ctx._own.extend(P.Proposal(P.EVENT_EMIT, {"topic": e["topic"], "data": e.get("data") or {}},
                                         plugin_id=self._ctx.plugin_id, runtime_id=self._ctx.runtime_id) for e in outcome.events)
        content = outcome.content
        if isinstance(content, dict) and isinstance(content.get("interaction"), dict):
            interaction = dict(content["interaction"])
            interaction.setdefault("sourcePluginId", self._ctx.plugin_id)
            self._ctx.interactions[str(interaction.get("interactionId"))] = interaction
        return json_copy(content)


class _World:
    """ctx.world: name, description, lore, opening_scenario, characters(), character_schema(),
    dimensions (id → value)."""

    def __init__(self, env: ExecutionEnv, view: EngineStateView) -> None:
        world = env.snapshot.world
        self.id = world.id
        self.name = world.name
        self.description = world.summary
        self.lore = world.lore
        self.opening_scenario = world.opening_scenario
        self._env = env
        self._view = view

    @functools.cached_property
    def metadata(self) -> dict[str, Any]:
        """The world's record metadata (a private copy, made on first access: it is large and most
        handlers never read it)."""
        return json_copy(self._env.snapshot.world.metadata)

    @functools.cached_property
    def dimensions(self) -> dict[str, Any]:
        """Dimension id → frozen value (a private copy, made on first access)."""
        return {d.id: json_copy(d.value) for d in self._env.snapshot.dimensions}

    def dimension_records(self) -> list[dict[str, Any]]:
        """The frozen public dimensions with their versions: ``[{id, name, value, version, schema}]``
        (the dimension editor's compare-and-set base)."""
        return [{"id": d.id, "name": d.name, "value": json_copy(d.value), "version": d.version,
                 "schema": json_copy(d.schema)} for d in self._env.snapshot.dimensions]

    def characters(self) -> list[dict[str, Any]]:
        return [c.snapshot() for c in self._view.characters()]

    def character_schema(self) -> dict[str, Any] | None:
        return self._view.character_schema()


class _Model:
    """ctx.model: one model call for a function runtime that needs the model but no agent loop
    (memory extraction, history compaction). The slot is chosen as for an agent runtime of the
    plugin (request model > runtimeModelOverrides > ``function.model`` > the ``plugin`` slot); the
    offline ``scripted`` provider answers through the plugin's own ``scripted.py``.

    complete(messages, *, tools=None, tool_choice="auto", context=None) → ``{"text": str,
    "toolCalls": [{"name", "arguments": dict}]}``. Raises RuntimeFailure ``model_error`` (the
    provider's code in the message) or ``aborted`` when the execution stops. Each call leaves
    ``llm.calling`` / ``llm.responded`` trace rows."""

    def __init__(self, env: ExecutionEnv, runtime: RuntimeManifest, turn: TurnInfo, emit) -> None:
        self._env, self._runtime, self._turn, self._emit = env, runtime, turn, emit
        self.calls = 0

    def complete(self, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]] | None = None,
                 tool_choice: Any = "auto", context: dict[str, Any] | None = None) -> dict[str, Any]:
        from turns.engine.providers.base import ModelError, ModelRequest, ModelResponse
        from turns.engine.providers.config import slot_for_runtime

        env, runtime = self._env, self._runtime
        manifest_model = runtime.function.model if runtime.function is not None else None
        slot, model_id = slot_for_runtime(config=env.router.config, runtime_id=runtime.id, is_story=False,
                                          request_model=env.request_model, overrides=env.snapshot.runtime_model_overrides,
                                          manifest_model=manifest_model)
        manifest = env.manifest(runtime.plugin_id)
        self.calls += 1
        request = ModelRequest(messages=json_copy(messages), tools=list(tools or []), tool_choice=tool_choice, context={
            "session_id": env.snapshot.session_id, "runtime_id": runtime.id, "plugin_id": runtime.plugin_id,
            "plugin_root": str(manifest.root) if manifest else None, "locale": env.snapshot.locale, "is_story": False,
            "step": self.calls, "turn": self._turn.logical_turn, "turn_kind": self._turn.kind, "function": True,
            **json_copy(context or {})})
        self._emit(T.LLM_CALLING, {"step": self.calls, "slot": slot.name, "provider": slot.provider,
                                   "model": model_id or slot.model, "messages": request.messages})
        response: ModelResponse | None = None
        try:
            for item in env.router.stream(slot, model_id, request):
                if env.cancel.is_cancelled:
                    raise RuntimeFailure("aborted", "the execution was stopped")
                if isinstance(item, ModelResponse):
                    response = item
        except ModelError as exc:
            raise RuntimeFailure("model_error", f"{exc.code}: {exc.message}"[:2000]) from None
        if response is None:
            raise RuntimeFailure("model_error", "bad_response: the model stream ended without a response")
        calls = []
        for call in response.tool_calls:
            try:
                arguments = json.loads(call.arguments or "{}")
            except ValueError:
                arguments = None
            calls.append({"name": call.name, "arguments": arguments if isinstance(arguments, dict) else {}})
        self._emit(T.LLM_RESPONDED, {"step": self.calls, "text": response.text[:4000], "toolCalls": calls,
                                     "usage": response.usage.to_json()})
        return {"text": response.text, "toolCalls": calls}


class _Services:
    """ctx.services: read-only services other active plugins registered (``contributes.services``).

    call(contract, args=None) → ``[{"pluginId", "value"}]``, one per active provider in plugin
    order (the caller's own plugin included). A provider receives ``(context, args)`` with context
    ``{sessionId, pluginId, locale, pluginData: {namespace: {key: value}}}`` — its own committed
    plugin data only (spec 004 §插件记忆: 公共服务只能访问提供者自己的只读快照). A provider that
    raises is left out (logged)."""

    def __init__(self, env: ExecutionEnv) -> None:
        self._env = env

    def call(self, contract: str, args: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        env = self._env
        for record in env.plugins:
            registration = record.registrations.services.get(contract) if record.registrations else None
            if registration is None:
                continue
            data = {ns: json_copy(rows) for (pid, ns), rows in env.snapshot.plugin_data.items() if pid == record.id}
            context = {"sessionId": env.snapshot.session_id, "pluginId": record.id, "locale": env.snapshot.locale,
                       "pluginData": data}
            try:
                value = registration.target(context, json_copy(args or {}))
            except Exception:  # plugin code: one broken provider must not fail the caller
                logger.warning("service %s of %s failed", contract, record.id, exc_info=True)
                continue
            out.append({"pluginId": record.id, "value": json_copy(value)})
        return out


class FunctionContext:
    """What a function handler / guard receives. Attributes:

    session_id, plugin_id, runtime_id, locale (session content locale), logical_turn (fixed for
    the execution), turn_kind ("setup" | "main"), origin, player_message (rendered, or None),
    submissions (interaction answers saved with this turn), pending_interactions (unanswered
    interactions of the session), inputs (resolved io.inputs by name), settings (user settings),
    manual_payload (plugin-rpc runtime payload, else None), trigger_event (event jobs:
    ``{eventId, topic, pluginId, payload}``, else None), resume_data / resumed_from_suspension_id (a
    resumed run: the player's answer and the suspension id; else None; returning ``{"outcome":
    "suspended", "reason", "resumeSchema"?}`` suspends the runtime),
    world (_World), plugin_data / pluginData, tools (_Tools), log(message), and the host API of
    turns.engine.function_ctx (docs/function-runtime-ctx.md): gateway, utils (fetch_with_retry),
    media (put, ingest_url), progress (report), recursive_call / recursiveCall, agents (run).
    ``tools.call`` also runs the runtime's imported services (``function.tools.services``, by their
    tool names) and ``delegate`` when ``function.tools.builtin`` lists it.
    """

    def __init__(self, env: ExecutionEnv, runtime: RuntimeManifest, turn: TurnInfo, view: EngineStateView,
                 own: StagedProposals, inputs: dict[str, Any], emit, result: RuntimeResult, *,
                 upstream: list[P.Proposal] | None = None, depth: int = 0, progress_job_id: str | None = None) -> None:
        self.session_id = env.snapshot.session_id
        self.plugin_id = runtime.plugin_id
        self.runtime_id = runtime.id
        self.locale = env.snapshot.locale
        self.logical_turn = turn.logical_turn
        self.turn_kind = turn.kind
        self.origin = turn.origin
        self.player_message = turn.player_message
        self.submissions = json_copy(turn.submissions)
        # A manual run's RPC payload (spec 004 §插件 RPC 通道: ctx.manualPayload) and an event job's trigger.
        self.manual_payload = json_copy(turn.manual_payload)
        self.trigger_event = json_copy(turn.trigger_event)
        self.pending_interactions = json_copy(env.snapshot.pending_interactions)
        # A resumed run (spec 004 §Suspend / Resume): the player's answer and the suspension it answers.
        self.resume_data = json_copy(turn.resume_data)
        self.resumed_from_suspension_id = turn.resumed_from_suspension_id
        self.inputs = json_copy(inputs)
        self.settings = json_copy(env.user_settings.get(runtime.plugin_id, {}))
        self.world = _World(env, view)
        self.failed = False
        self.interactions: dict[str, dict[str, Any]] = {}
        self.logs: list[str] = []
        self._own = own
        self._runtime, self._turn = runtime, turn
        apis = host_apis(env, runtime, turn, view, own, list(upstream or []), emit, result, run=function_runtime_run,
                         depth=depth, progress_job_id=progress_job_id)
        self.plugin_data = self.pluginData = apis.plugin_data
        self.gateway, self.utils, self.media, self.progress = apis.gateway, apis.utils, apis.media, apis.progress
        self.recursive_call = self.recursiveCall = apis.recursive
        self.agents = apis.agents
        tool_names = set()
        selection = runtime.function.tools if runtime.function is not None else None
        if selection is None and runtime.agent is not None:
            selection = runtime.agent.tools
        if selection is not None:
            tool_names.update(selection.builtin)
            tool_names.update(selection.plugin)
        tool_context = ToolContext(
            session_id=self.session_id, plugin_id=self.plugin_id, runtime_id=self.runtime_id, state=view,
            authorized_tool_names=frozenset(tool_names), locale=instruction_locale_for(self.locale),
            content_locale=self.locale, logical_turn=turn.logical_turn, cancel=env.cancel,
            inputs={k: {"value": v} for k, v in inputs.items()},
            history_for=history_for_binding(env.snapshot, view.characters),
        )
        runtime_tools = self._runtime_tools(env, runtime, turn, view, selection, list(upstream or []), own)
        tool_context.authorized_tool_names = frozenset(tool_names | set(runtime_tools))
        self.tools = _Tools(env, self, tool_context, emit, result, runtime_tools)
        self.model = _Model(env, runtime, turn, emit)
        self.services = _Services(env)
        self._env = env

    @staticmethod
    def _runtime_tools(env: ExecutionEnv, runtime: RuntimeManifest, turn: TurnInfo, view: EngineStateView, selection: Any,
                       upstream: list[P.Proposal], own: StagedProposals) -> dict[str, Any]:
        """The tools built for this runtime that ctx.tools.call may name: its service imports
        (spec 000 §导入的服务工具; write services only where writes can be staged) and delegate."""
        if selection is None:
            return {}
        can_stage = not runtime.is_background and turn.resumed_from_suspension_id is None
        out: dict[str, Any] = {}
        if selection.services:
            from turns.engine.tools.services import service_tools

            imported, absent = service_tools(env, runtime, selection.services, can_write=can_stage, turn=turn,
                                             characters=view.characters)
            out.update(imported)
            out.update(absent)
        if DELEGATE in selection.builtin:
            from turns.engine.agent import agent_runtime_run

            out[DELEGATE] = delegate_tool(env, runtime, turn, staged=lambda: list(upstream) + own.items(),
                                          characters=view.characters, can_stage=can_stage, run=agent_runtime_run)
        return out

    def log(self, message: str) -> None:
        self.logs.append(str(message))

    def history(self) -> list[dict[str, Any]]:
        """The committed story history (player messages and story prose, the snapshot's last
        turn_messages rows), oldest first: ``[{"turnId", "role": "user" | "assistant", "text"}]``.
        A detached job sees its source turn as the newest turn."""
        out = []
        for row in self._env.snapshot.history:
            if row.get("role") not in ("user", "assistant"):
                continue
            content = row.get("content")
            text = content.get("text") if isinstance(content, dict) else content
            if isinstance(text, str) and text.strip():
                out.append({"turnId": row.get("turn_id"), "role": row["role"], "text": text})
        return out

    def trace(self, type: str, payload: dict[str, Any]) -> None:
        """A trace-only row of this runtime (e.g. ``context.compaction.failed``); never forwarded
        to the action stream."""
        self._env.tracer.emit(type, {"runtimeId": self.runtime_id, "pluginId": self.plugin_id, **json_copy(payload)},
                              turn_id=self._turn.turn_id, plugin_id=self.plugin_id, runtime_id=self.runtime_id,
                              forward=False)


def handler_return_apply(value: Any, ctx: FunctionContext, result: RuntimeResult) -> None:
    """Read a handler/guard return value into ``result`` (see module docstring). Raises RuntimeFailure,
    also for a result that reports its own failure (``{"status": "failed", "error"?: str | {code?,
    message}}``): the runtime is failed like any other (stream, trace, turn result,
    ``failedRuntimeIds``), with ``error.code`` ``runtime_reported_failure`` unless it names one."""
    if isinstance(value, dict) and value.get("status") == STATUS_FAILED:
        raise _reported_failure(value.get("error"))
    if isinstance(value, dict):
        output = {k: v for k, v in value.items() if k not in RESERVED_KEYS}
        for item in value.get("proposals") or []:
            if not isinstance(item, dict):
                raise RuntimeFailure("proposal-invalid", "proposals[] items must be {type, payload}")
            proposal = P.Proposal(str(item.get("type")), item.get("payload") if isinstance(item.get("payload"), dict) else {},
                                  plugin_id=ctx.plugin_id, runtime_id=ctx.runtime_id)
            try:
                proposal.payload = P.proposal_validate(proposal)
            except P.ProposalInvalid as exc:
                raise RuntimeFailure("proposal-invalid", str(exc)) from None
            ctx._own.extend([proposal])
        ctx._own.extend(asset_generations_read(value, ctx.plugin_id, ctx.runtime_id))
        for item in value.get("pluginData") or []:
            if not isinstance(item, dict):
                raise RuntimeFailure("proposal-invalid", "pluginData[] items must be {namespace, key, value}")
            ctx.plugin_data.set(item.get("namespace"), item.get("key"), item.get("value"))
        for interaction in ([value["interaction"]] if isinstance(value.get("interaction"), dict) else []) + [
            i for i in value.get("interactions") or [] if isinstance(i, dict)
        ]:
            item = dict(interaction)
            item.setdefault("sourcePluginId", ctx.plugin_id)
            ctx.interactions[str(item.get("interactionId"))] = item
        result.output = output if output else None
        result.pre_game_done = value.get("preGameDone") is True
    elif value is not None:
        try:
            result.output = json.loads(json.dumps(value))
        except (TypeError, ValueError):
            raise RuntimeFailure("output_invalid", "the handler returned a value JSON cannot hold") from None


def _reported_failure(error: Any) -> RuntimeFailure:
    """The RuntimeFailure of a result ``{"status": "failed", "error": ...}`` (see handler_return_apply)."""
    code, message = RUNTIME_REPORTED_FAILURE, "the runtime reported a failure"
    if isinstance(error, str) and error.strip():
        message = error
    elif isinstance(error, dict):
        if isinstance(error.get("code"), str) and error["code"].strip():
            code = error["code"]
        if isinstance(error.get("message"), str) and error["message"].strip():
            message = error["message"]
    return RuntimeFailure(code, message[:2000])


def _emitter(env: ExecutionEnv, runtime: RuntimeManifest, turn: TurnInfo):
    def emit(type: str, payload: dict[str, Any]) -> None:
        env.tracer.emit(type, {"runtimeId": runtime.id, "pluginId": runtime.plugin_id, **payload},
                        turn_id=turn.turn_id, plugin_id=runtime.plugin_id, runtime_id=runtime.id)
    return emit


def guard_run(env: ExecutionEnv, runtime: RuntimeManifest, turn: TurnInfo, *, upstream: list[P.Proposal],
              inputs: dict[str, Any], run_id: str) -> RuntimeResult | None:
    """Run the runtime's guard. None → run the agent; else the finished (or skipped) result."""
    if not runtime.guard:
        return None
    result = RuntimeResult(runtime_id=runtime.id, plugin_id=runtime.plugin_id, stage=runtime.stage,
                           status=STATUS_SUCCESS, run_id=run_id)
    own = StagedProposals()
    view = EngineStateView(env.snapshot, upstream=upstream, own=own, form_validators=env.form_validators,
                           event_topics=env.event_topics, datasets=env.datasets)
    emit = _emitter(env, runtime, turn)
    started = time.monotonic()
    try:
        guard = callable_load(env, runtime, runtime.guard, DEFAULT_GUARD_NAME)
        ctx = FunctionContext(env, runtime, turn, view, own, inputs, emit, result, upstream=upstream)
        value = guard(ctx)
        if value is None:
            return None
        if isinstance(value, dict) and isinstance(value.get("skip"), str):
            result.status = STATUS_SKIPPED
            result.skip_reason = value["skip"]
            return result
        handler_return_apply(value, ctx, result)
        if ctx.failed:
            raise RuntimeFailure("tool_failed", "a tool call of the guard failed")
        result.pending_inputs = list(ctx.interactions.values())
        result.proposals = own.items()
    except RuntimeFailure as exc:
        result.status, result.error = STATUS_FAILED, {"message": exc.message, "code": exc.code}
    except Exception as exc:  # plugin code
        result.status, result.error = STATUS_FAILED, {"message": f"{type(exc).__name__}: {exc}", "code": "guard_error"}
    result.duration_ms = int((time.monotonic() - started) * 1000)
    if result.status == STATUS_FAILED:
        result.proposals, result.pending_inputs = [], []
    return result


def function_runtime_run(env: ExecutionEnv, runtime: RuntimeManifest, turn: TurnInfo, *, upstream: list[P.Proposal],
                         inputs: dict[str, Any], run_id: str, depth: int = 0,
                         progress_job_id: str | None = None) -> RuntimeResult:
    """Run a function runtime. Never raises for a runtime failure (status failed, error set).
    depth: 0 for a scheduled run, n for a run started by ctx.recursive_call n levels down.
    progress_job_id: a resumed run's carried ctx.progress job (its continuation's ``progressJobId``)."""
    assert runtime.function is not None
    result = RuntimeResult(runtime_id=runtime.id, plugin_id=runtime.plugin_id, stage=runtime.stage,
                           status=STATUS_SUCCESS, run_id=run_id)
    own = StagedProposals()
    view = EngineStateView(env.snapshot, upstream=upstream, own=own, form_validators=env.form_validators,
                           event_topics=env.event_topics, datasets=env.datasets)
    emit = _emitter(env, runtime, turn)
    started = time.monotonic()
    emit(T.FUNCTION_EXECUTING, {"handler": runtime.function.handler})
    ctx: FunctionContext | None = None
    try:
        handler = callable_load(env, runtime, runtime.function.handler, DEFAULT_HANDLER_NAME)
        ctx = FunctionContext(env, runtime, turn, view, own, inputs, emit, result, upstream=upstream, depth=depth,
                              progress_job_id=progress_job_id)
        value = handler(ctx)
        if ctx.failed:
            raise RuntimeFailure("tool_failed", "a ctx.tools.call failed; the runtime's writes are discarded")
        if isinstance(value, dict) and value.get("outcome") == "suspended":
            # {outcome: "suspended", reason, resumeSchema?}: wait for the player (spec 004 §Suspend /
            # Resume: function runtime 重新调用 handler，数据通过 ctx.resumeData 传入).
            schema = value.get("resumeSchema") if isinstance(value.get("resumeSchema"), dict) else {"type": "object"}
            result.status = STATUS_SUSPENDED
            result.suspension = {"reason": str(value.get("reason") or ""), "resumeSchema": schema,
                                 "continuation": {"kind": "function", "inputs": json_copy(inputs),
                                                  "progressJobId": ctx.progress.job_id if ctx.progress.is_started else None}}
            result.proposals = own.items()
        else:
            handler_return_apply(value, ctx, result)
            result.pending_inputs = list(ctx.interactions.values())
            result.proposals = own.items()
    except RuntimeFailure as exc:
        result.status, result.error = STATUS_FAILED, {"message": exc.message, "code": exc.code}
    except ToolCallFailed as exc:
        result.status, result.error = STATUS_FAILED, {"message": str(exc), "code": "tool_failed"}
    except HostCallFailed as exc:  # an uncaught ctx.gateway / utils / media / recursiveCall failure
        result.status, result.error = STATUS_FAILED, {"message": exc.message[:2000], "code": exc.code}
    except Exception as exc:  # plugin code may raise anything; only this runtime fails
        result.status, result.error = STATUS_FAILED, {"message": f"{type(exc).__name__}: {exc}", "code": "handler_error"}
    result.duration_ms = int((time.monotonic() - started) * 1000)
    if result.status == STATUS_FAILED:
        result.proposals, result.pending_inputs = [], []
    if ctx is not None:
        ctx.progress.finish({STATUS_SUCCESS: "succeeded", STATUS_SUSPENDED: "waiting-input"}.get(result.status, "failed"))
    emit(T.FUNCTION_COMPLETED, {"status": result.status, "durationMs": result.duration_ms})
    return result



