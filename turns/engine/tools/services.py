"""Imported service tools (spec 000 §导入的服务工具, §不在的工具, §写服务的导入, §服务失败怎样回答).

An agent imports another plugin's service with ``agent.tools.services`` (``inventory.items@1`` or
``{contract, as}``); at runtime start each import becomes one tool of that runtime only (never in the
registry, source ``local`` for approval). A provider registers it in its entry::

    api.register_service("inventory.items@1", provider,
                         description="List the items a character carries.",   # the tool's description
                         input_schema={...JSON Schema...},                    # the tool's parameters
                         write=False,                                         # True: a write service
                         offer_to_models=True)                                # False: never a model tool

``provider(context, args)`` gets ``context = {sessionId, pluginId (the provider), callerPluginId,
locale, pluginData: {namespace: {key: value}}}`` — the provider's own read-only committed snapshot
(spec 004 §插件记忆) — and the model's (repaired, schema-checked) arguments. A read service returns
its value; a write service returns a ``ToolResult`` whose ``plugin.data*`` proposals change the
provider's own data: they are staged into the caller's commit unit under the provider's plugin id.

Annotations: read ``{readOnly, idempotent, concurrencySafe}`` (runs in parallel pools); write
``{stagesWrites}`` (a barrier). One call waits for the provider at most 15 s (``timeout``).

Absent tools (no exactly-one active provider, a provider that does not offer it to models, a write
service in a run that cannot stage writes) are not offered, but stay callable so a model that
still names one gets ``unavailable`` with the reason (no plugin id); the server log names the plugin.

Turn policies (``turn-policy@1``, spec 000 §角色委托与策略导入): the import's parameters, result and
annotations are the framework's, not the provider's. The model sends ``{present: [names],
recentSegments?}``; the host resolves the names privately (an unknown name is ``invalid-input``) and
adds the current action and the limits, so the provider gets ``{present, presentCharacters: [{id,
name}], recentSegments, action: {text, kind}, limits: {maxActors}}`` and answers ``{actors:
[{character | characterId, ...}]}``. The model reads ``{actors: [{character: name, ...}]}``: names
only (ids dropped), unknown characters left out, at most ``maxActors``. Annotations ``{readOnly,
idempotent: false, concurrencySafe: false}`` (a barrier). With several providers the session's
orchestration ``turnPolicy`` picks one; a saved choice no provider matches makes the tool absent.
Every provider's context also carries ``historyFor(characterId, limit=None)`` (turns.engine.cast).

Failures map per the spec's table: a provider's ``invalid-input`` and ``cancelled`` are the
caller's own failures; every other provider failure is ``refused: true`` (not counted against the
caller: ``ToolError.refused``), ``internal`` keeping only the first line with UUIDs as ``<id>``.
"""

from __future__ import annotations

import concurrent.futures
import logging
from typing import Any, Iterable

from covel.jsoncopy import json_copy
from plugins_app.toolkit.definition import READ_ONLY_SAFE, Tool, ToolResult, tool
from plugins_app.toolkit.errors import CANCELLED, INTERNAL, INVALID_INPUT, TIMEOUT, UNAVAILABLE, ToolError
from plugins_app.toolkit.proposals import Proposal
from turns.engine.tools.envelope import UUID_RE

TURN_POLICY_CONTRACT = "turn-policy@1"
TURN_POLICY_ANNOTATIONS = {"readOnly": True, "stagesWrites": False, "idempotent": False, "concurrencySafe": False}
TURN_POLICY_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "required": ["present"],
    "additionalProperties": False,
    "properties": {
        "present": {"type": "array", "maxItems": 32, "description": "Names of the characters present in the scene.",
                    "items": {"type": "string", "minLength": 1, "maxLength": 80}},
        "recentSegments": {"type": "array", "maxItems": 50, "items": {"type": "object"},
                           "description": "The latest story segments, {type, text, speaker?}."},
    },
}

logger = logging.getLogger(__name__)

#: Longest wait for one provider call (spec: 一次调用最多等提供方 15 秒).
SERVICE_TIMEOUT_SECONDS = 15.0
WRITE_ANNOTATIONS = {"readOnly": False, "stagesWrites": True, "idempotent": False, "concurrencySafe": False}
_pool = concurrent.futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="service-call")


def refused(code: str, message: str, **kw: Any) -> ToolError:
    """A ToolError the executor does not count as the caller's failed call (refused: true)."""
    error = ToolError(code, message, **kw)
    error.refused = True  # type: ignore[attr-defined]
    return error


def _first_line(exc: BaseException) -> str:
    text = (str(exc).strip() or type(exc).__name__).splitlines()[0]
    return UUID_RE.sub("<id>", text)[:300]


def is_write_service(options: dict[str, Any]) -> bool:
    return bool(options.get("write")) or options.get("mode") == "write"


def _absent(name: str, message: str) -> Tool:
    def execute(args: Any, ctx: Any) -> Any:
        raise ToolError(UNAVAILABLE, message)

    return tool(name=name, description="Unavailable imported service.", execute=execute,
                parameters={"type": "object"}, annotations=READ_ONLY_SAFE)


def _call_provider(env: Any, record: Any, registration: Any, contract: str, caller_plugin_id: str,
                   args: dict[str, Any], cancel: Any) -> Any:
    from turns.engine.cast import history_for_binding

    data = {ns: json_copy(rows) for (pid, ns), rows in env.snapshot.plugin_data.items() if pid == record.id}
    context = {"sessionId": env.snapshot.session_id, "pluginId": record.id, "callerPluginId": caller_plugin_id,
               "locale": env.snapshot.locale, "contract": contract, "pluginData": data,
               "historyFor": history_for_binding(env.snapshot, lambda: list(env.snapshot.characters))}
    future = _pool.submit(registration.target, context, json_copy(args))
    try:
        return future.result(timeout=SERVICE_TIMEOUT_SECONDS)
    except concurrent.futures.TimeoutError:
        future.cancel()
        raise refused(TIMEOUT, f"The service {contract} did not answer within {int(SERVICE_TIMEOUT_SECONDS)} s.") from None
    except ToolError as exc:
        if exc.code not in (INVALID_INPUT, CANCELLED):
            exc.refused = True  # type: ignore[attr-defined]
        raise
    except Exception as exc:  # provider code: answer internal, log with the plugin id
        logger.warning("service %s of plugin %s failed", contract, record.id, exc_info=True)
        raise refused(INTERNAL, f"The service {contract} failed: {_first_line(exc)}") from None


def _service_tool(env: Any, record: Any, registration: Any, contract: str, name: str, caller_plugin_id: str) -> Tool:
    options = dict(registration.options or {})
    write = is_write_service(options)
    schema = options.get("input_schema") or options.get("inputSchema") or options.get("parameters")

    def execute(args: dict[str, Any], ctx: Any) -> Any:
        value = _call_provider(env, record, registration, contract, caller_plugin_id, args, getattr(ctx, "cancel", None))
        if isinstance(value, ToolResult):
            if value.proposals and not write:
                raise refused(INTERNAL, f"The service {contract} returned writes but is a read service.")
            for proposal in value.proposals:
                if not isinstance(proposal, Proposal) or not proposal.kind.startswith("plugin.data"):
                    raise refused(INTERNAL, f"The service {contract} may only change its provider's plugin data.")
                proposal.plugin_id = record.id  # the provider's own data, staged with the caller's commit
                proposal.meta["service"] = contract
            return value
        return json_copy(value)

    description = str(options.get("description") or f"Imported service {contract}.")
    return tool(name=name, description=description, parameters=schema if isinstance(schema, dict) else None,
                execute=execute, annotations=WRITE_ANNOTATIONS if write else READ_ONLY_SAFE)


def _orchestration(env: Any) -> dict[str, Any]:
    from sessions.orchestration import orchestration_from_metadata

    return orchestration_from_metadata(env.snapshot.metadata)


def _turn_policy_tool(env: Any, record: Any, registration: Any, name: str, caller_plugin_id: str, turn: Any,
                      characters: Any) -> Tool:
    from turns.engine.cast import character_resolve

    description = str((registration.options or {}).get("description")
                      or "Choose which present characters act this turn, in order.")

    def execute(args: dict[str, Any], ctx: Any) -> Any:
        cast = list(characters())
        present = []
        for index, wanted in enumerate(args.get("present") or []):
            try:
                present.append(character_resolve(cast, wanted))
            except ToolError as exc:
                raise ToolError(INVALID_INPUT, f"present/{index}: {exc.message}") from None
        max_actors = int(_orchestration(env)["maxActors"])
        request = {"present": [c.name for c in present], "presentCharacters": [{"id": c.id, "name": c.name} for c in present],
                   "recentSegments": json_copy(args.get("recentSegments") or []),
                   "action": {"text": getattr(turn, "player_message", None), "kind": getattr(turn, "action_kind", None)},
                   "limits": {"maxActors": max_actors}}
        value = _call_provider(env, record, registration, TURN_POLICY_CONTRACT, caller_plugin_id, request, None)
        actors = value.get("actors") if isinstance(value, dict) else None
        if not isinstance(actors, list) or not all(isinstance(a, dict) for a in actors):
            raise refused(INTERNAL, "The service returned an invalid result.")
        by_id = {c.id: c for c in cast}
        chosen = []
        for actor in actors:
            found = by_id.get(actor.get("characterId")) if isinstance(actor.get("characterId"), str) else None
            if found is None and isinstance(actor.get("character"), str):
                try:
                    found = character_resolve(cast, actor["character"])
                except ToolError:
                    found = None
            if found is None:
                logger.info("turn policy of %s named an unknown character %r", record.id, actor)
                continue
            rest = {k: json_copy(v) for k, v in actor.items() if k not in ("character", "characterId")}
            chosen.append({"character": found.name, **rest})
        return {"actors": chosen[:max_actors]}

    return tool(name=name, description=description, parameters=TURN_POLICY_PARAMETERS, execute=execute,
                annotations=TURN_POLICY_ANNOTATIONS)


def _turn_policy_pick(env: Any, providers: list[Any]) -> tuple[list[Any], str | None]:
    """The turn-policy providers after the session's choice, and why none is usable (or None)."""
    chosen = _orchestration(env).get("turnPolicy")
    if chosen is None:
        return providers, None
    picked = [(r, reg) for r, reg in providers if r.id == chosen["pluginId"]
              and (reg.options or {}).get("name", chosen["name"]) == chosen["name"]]
    if not picked:
        return [], "the session's chosen turn policy is not available."
    return picked, None


def service_tools(env: Any, runtime: Any, imports: Iterable[Any], *, can_write: bool, turn: Any = None,
                  characters: Any = None) -> tuple[dict[str, Tool], dict[str, Tool]]:
    """(offered tools by name, absent tools by name) for a runtime's ``agent.tools.services``.

    ``env``: the ExecutionEnv (active plugin records with their registrations, the snapshot);
    ``imports``: ServiceImport(contract, tool_name) items; ``can_write``: False for runs without a
    staging area for another plugin's writes (an agent that may suspend, resumed or background
    runs), where write services are absent (not-allowed). ``turn`` / ``characters()`` (the
    caller's TurnInfo and view of the cast): what a turn-policy import adds and resolves against.
    """
    offered: dict[str, Tool] = {}
    absent: dict[str, Tool] = {}
    for imp in imports:
        name, contract = imp.tool_name, imp.contract
        providers = [(r, r.registrations.services[contract]) for r in env.plugins
                     if r.registrations is not None and contract in r.registrations.services]
        reason = None
        if contract == TURN_POLICY_CONTRACT and providers:
            providers, why = _turn_policy_pick(env, providers)
            if why is not None:
                reason = f'The tool "{name}" is unavailable in this session: {why}'
        if reason is not None:
            pass
        elif not providers:
            reason = f'The tool "{name}" is unavailable in this session: no active provider offers {contract}.'
        elif len(providers) > 1:
            reason = f'The tool "{name}" is unavailable in this session: more than one plugin provides it.'
        elif providers[0][1].options.get("offer_to_models", providers[0][1].options.get("offerToModels", True)) is False:
            reason = f'The tool "{name}" is unavailable in this session: its provider does not offer it to models.'
        elif is_write_service(providers[0][1].options) and not can_write:
            reason = (f'The tool "{name}" is unavailable in this run: it changes data, which this runtime cannot do here.')
        if reason is not None:
            logger.info("runtime %s: service import %s (%s) not offered: %s; providers %s", runtime.id, name, contract,
                        reason, [r.id for r, _ in providers])
            absent[name] = _absent(name, reason)
            continue
        record, registration = providers[0]
        if contract == TURN_POLICY_CONTRACT:
            offered[name] = _turn_policy_tool(env, record, registration, name, runtime.plugin_id, turn,
                                              characters or (lambda: list(env.snapshot.characters)))
            continue
        offered[name] = _service_tool(env, record, registration, contract, name, runtime.plugin_id)
    return offered, absent
