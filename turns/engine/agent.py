"""The agent loop: model ↔ ToolExecutor until the runtime's completion rule is met.

Rules (spec 000 §ToolExecutor 授权, §runtime-done; spec 004 §Turn 执行):
- tools: the runtime's whitelist (tools.builtin + tools.plugin + dataset tools); runtime-done is
  offered when the completion contract ends with it (not story, no afterTools); story runtimes
  never see it listed but stay authorized — calling it gets a "write the prose" answer.
- completion: story runtimes end with prose; `completion.afterTools` (completeAfterTools) ends
  the loop right after a listed tool succeeds, its content becoming the output;
  `completion.require: tool-use` needs a successful business tool call before text or
  runtime-done counts; `require: explicit` needs runtime-done; a successful runtime-done ends it.
- loop.maxSteps bounds model calls; loop.timeoutMs bounds the whole loop; toolChoice from
  agent.llm.toolChoice applies to the first step.
- each step emits step.started, llm.calling, llm.responded, tool.calling/completed/failed,
  step.completed; story prose streams as narrative.delta.
- steer (spec 004 §回合中控制 steer; turns.engine.steer): a story runtime whose ``env.cancel`` is a
  TurnControl drains its steer inbox before every model call and appends each message as a user
  message (``steer.applied`` trace row). A message that arrives while the final prose streams
  costs one more model call within loop.maxSteps (else ``steer.discarded``, reason max_steps).
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from typing import Any

import jsonschema

from plugins_app.manifests import RuntimeManifest
from turns.engine import trace as T
from turns.engine.deltas import DeltaCoalescer
from turns.engine.env import ExecutionEnv
from turns.engine.hooks import POST_TOOL_USE, has_hooks, post_context_assembly, post_tool_use, pre_llm_call, pre_tool_use
from covel.jsoncopy import json_copy
from turns.engine.prompt import (
    budget_cut,
    completion_text,
    history_messages,
    lorebook_matches,
    prompt_file_find,
    template_fill,
    template_values,
    character_line,
    character_roster_blocks,
    dimension_rules_text,
    DIMENSION_RULES_PLACEHOLDER,
    LORE_BUDGET_CHARS,
    CHARACTERS_BUDGET_CHARS,
    LOREBOOK_BUDGET_CHARS,
    MEMORY_BUDGET_CHARS,
    LOREBOOK_SCAN_MESSAGES,
)
from turns.engine.providers.base import ModelError, ModelRequest, ModelResponse, TextDelta
from turns.engine.providers.config import PROVIDER_SCRIPTED, slot_chain_has_scripted, slot_for_runtime
from turns.engine.runtime import (
    STATUS_FAILED,
    STATUS_SUCCESS,
    STATUS_SUSPENDED,
    RuntimeFailure,
    RuntimeResult,
    TurnInfo,
)
from turns.engine.state import EngineStateView, StagedProposals
from turns.engine.steer import STEER_APPLIED, STEER_DISCARDED, AppliedSteer, steer_text, turn_control_of
from plugins_app.toolkit import proposals as P
from turns.engine.tools.envelope import envelope_json
from plugins_app.toolkit.locale import ZH_CN, instruction_locale_for
from plugins_app.toolkit.names import SEARCH_TOOLS
from turns.engine.tools.search import DeferredTools
from turns.engine.tools.executor import CONTROL_DONE, CONTROL_SUSPEND, STATUS_SUCCESS as CALL_SUCCESS, ToolCall
from turns.engine.tools.registry import LOOP_HANDLED_TOOL_NAMES
from turns.engine.cast import history_for_binding
from turns.engine.delegate import NAME as DELEGATE, completion_output, private_messages, recorded_envelope, recorded_input

RUNTIME_DONE = "runtime-done"
SYNC_CHARACTERS = "sync-characters"
#: The story runtime's output field (contract narrative-engine@1: {narrativeOutput}).
STORY_OUTPUT_KEY = "narrativeOutput"
#: Characters kept per selfData value in "summary" format.
SELF_DATA_SUMMARY_CHARS = 200
DEFAULT_MAX_STEPS = 8
DEFAULT_TIMEOUT_MS = 240_000


def _now_iso() -> str:
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


def is_story_runtime(runtime: RuntimeManifest) -> bool:
    return runtime.visibility == "story"


def completion_of(runtime: RuntimeManifest) -> tuple[str | None, list[str]]:
    """(require, afterTools) from agent.completion or agent.loop.completion."""
    agent = runtime.agent
    if agent is None:
        return None, []
    merged: dict[str, Any] = {}
    for source in (agent.loop.get("completion") if isinstance(agent.loop.get("completion"), dict) else {}, agent.completion or {}):
        merged.update(source)
    after = [n for n in merged.get("afterTools") or [] if isinstance(n, str)]
    return merged.get("require"), after


def tool_names_for(env: ExecutionEnv, runtime: RuntimeManifest) -> tuple[list[str], list[str]]:
    """(offered names in order, warnings). Raises RuntimeFailure for an unregistered plugin tool."""
    assert runtime.agent is not None
    selection = runtime.agent.tools
    manifest = env.manifest(runtime.plugin_id)
    plugin_names = list(selection.plugin)
    if not selection.plugin_declared and manifest is not None and len(manifest.runtimes) == 1:
        plugin_names = [n for n in manifest.contributes.tools if n not in plugin_names] + plugin_names
    warnings: list[str] = []
    builtins = env.tool_registry.builtin_names()
    offered: list[str] = []
    for name in selection.builtin:
        if name == "delegate":
            continue  # built per runtime by the loop (turns.engine.delegate)
        if name in LOOP_HANDLED_TOOL_NAMES or name not in builtins:
            warnings.append(f'builtin tool "{name}" is not installed on this host — not offered')
            continue
        if name not in offered:
            offered.append(name)
    registered = env.tool_registry.plugin_tool_names(runtime.plugin_id)
    for name in plugin_names:
        if name not in registered:
            raise RuntimeFailure("tool_not_registered", f'runtime "{runtime.id}" declares plugin tool "{name}", but its plugin did not register it')
        if name not in offered:
            offered.append(name)
    return offered, warnings


def _tool_definition(env: ExecutionEnv, name: str, plugin_id: str, runtime_tools: dict[str, Any],
                     view: EngineStateView | None = None) -> dict[str, Any]:
    resolved = env.tool_registry.resolve(name, plugin_id)
    tool = resolved.tool if resolved else runtime_tools[name]
    definition = tool.definition()
    if name == "emit-event":
        from turns.engine.tools.builtin.emit_event import model_parameters_for

        definition["parameters"] = model_parameters_for(env.event_topics())
    elif name == SYNC_CHARACTERS and view is not None and resolved is not None and resolved.source == "builtin":
        from turns.engine.tools.builtin.characters import sync_parameters_for

        # The session's character types and attribute constraints, so the model can get them right.
        definition["parameters"] = sync_parameters_for(view.character_schema())
    return definition


def _output_schema(runtime: RuntimeManifest, env: ExecutionEnv) -> dict[str, Any] | None:
    path = runtime.output.get("schema")
    manifest = env.manifest(runtime.plugin_id)
    if not isinstance(path, str) or manifest is None:
        return None
    base = manifest.root / runtime.directory if runtime.directory else manifest.root

    def read() -> str | None:
        for candidate in (base / path, manifest.root / path):
            try:
                text = candidate.resolve().read_text(encoding="utf-8")
                json.loads(text)
                return text
            except (OSError, ValueError):
                continue
        return None

    # Read once per manifest (a plugin install/reload builds a new one); parsed per call (a fresh dict).
    text = manifest.package_text_memo(("output-schema", runtime.directory, path), read)
    return json.loads(text) if text is not None else None


def prompt_source(env: ExecutionEnv, runtime: RuntimeManifest) -> str:
    """The runtime's prompt template: ``prompts/<local id>.<locale>.md`` when present, else the
    manifest body (turns.engine.prompt.prompt_file_find)."""
    manifest = env.manifest(runtime.plugin_id)
    name = runtime.local_id or runtime.plugin_id
    source = runtime.prompt or (manifest.body if manifest and runtime.id == runtime.plugin_id else "")
    if manifest is not None:
        locale = env.snapshot.locale

        def read() -> str | None:
            found = prompt_file_find(manifest.root, name, locale)
            return found.read_text(encoding="utf-8") if found is not None else None

        # Found and read once per manifest and locale (a plugin install/reload builds a new manifest).
        text = manifest.package_text_memo(("prompt", name, locale), read)
        if text is not None:
            source = text
    return source


def system_prompt_build(env: ExecutionEnv, runtime: RuntimeManifest, turn: TurnInfo, *, view: EngineStateView,
                        inputs: dict[str, Any], offers_done: bool, after_tools: list[str], require: str | None,
                        dimension_rules: dict[str, str] | None = None, offered: list[str] = (),
                        budget_scale: float = 1.0) -> str:
    """The system prompt (see turns.engine.prompt module docstring). ``dimension_rules``
    (dimension id → updateRule) fills ``{{ world.dimensionRules }}`` when the template has it."""
    snapshot = env.snapshot
    zh = instruction_locale_for(snapshot.locale) == ZH_CN  # instruction language (COVEL_INSTRUCTION_LOCALE)
    is_story = is_story_runtime(runtime)
    characters = view.characters()
    scan = "\n".join(m.text for m in snapshot.messages[-LOREBOOK_SCAN_MESSAGES:]) + "\n" + (turn.player_message or "")
    matches = lorebook_matches(snapshot, view.lorebook_entries(), scan)
    values = template_values(snapshot=snapshot, characters=characters, lore_matches=matches, inputs=inputs,
                             user_settings=env.user_settings.get(runtime.plugin_id, {}), character_schema=view.character_schema(),
                             budget_scale=budget_scale)
    source = prompt_source(env, runtime)
    if DIMENSION_RULES_PLACEHOLDER in source:
        values["world"]["dimensionRules"] = dimension_rules_text(view.world_dimensions(), dimension_rules or {}, zh=zh)
    text, used = template_fill(source, values)
    sections = [text.strip()] if text.strip() else []
    pruned = int("world.lore" in used and len(snapshot.world.lore) > int(LORE_BUDGET_CHARS * budget_scale))
    if "world.lore" not in used and "world.name" not in used and (snapshot.world.name or snapshot.world.lore):
        lore, cut = budget_cut(snapshot.world.lore, int(LORE_BUDGET_CHARS * budget_scale))
        pruned += int(cut)
        head = "[世界]" if zh else "[WORLD]"
        sections.append(f"{head}\n{snapshot.world.name}\n{snapshot.world.summary}\n\n{lore}".strip())
    if SYNC_CHARACTERS in offered:
        # A runtime that writes characters needs their ids and current fields, in the blocks the
        # character prompts name (spec 000 §sync-characters 使用者).
        sections.append(character_roster_blocks(characters))
    elif not any(u.startswith(("characters", "player")) for u in used) and characters:
        body, cut = budget_cut("\n".join(character_line(c, zh) for c in characters), int(CHARACTERS_BUDGET_CHARS * budget_scale))
        pruned += int(cut)
        sections.append(("[角色]" if zh else "[CHARACTERS]") + "\n" + body)
    if "lorebook.matches" not in used and matches:
        body, cut = budget_cut("\n\n".join(e.content for e in matches), int(LOREBOOK_BUDGET_CHARS * budget_scale))
        pruned += int(cut)
        sections.append(("[资料]" if zh else "[LOREBOOK]") + "\n" + body)
    if is_story:
        for segment_text in prompt_segments(env, runtime, turn, view):
            body, cut = budget_cut(segment_text, int(MEMORY_BUDGET_CHARS * budget_scale))
            pruned += int(cut)
            sections.append(body)
        for record in env.plugins:
            for segment in record.manifest.contributes.prompt:
                if isinstance(segment.get("content"), str):
                    filled, _ = template_fill(segment["content"], values)
                    sections.append(filled.strip())
    for item in runtime.self_data:
        section = self_data_section(view, runtime.plugin_id, item)
        if section:
            sections.append(section)
    if "emit-event" in offered and runtime.agent is not None and runtime.agent.advertise_events:
        from turns.engine.tools.builtin.emit_event import event_directory_text

        sections.append(event_directory_text(env.event_topics(), zh=zh))  # the session's event directory
    if inputs and "runtime.inputs" not in used:
        sections.append("[RUNTIME-INPUTS]\n" + json.dumps(inputs, ensure_ascii=False, indent=1)[:8000])
    sections.append("[COMPLETION]\n" + completion_text(is_story=is_story, offers_done=offers_done, after_tools=after_tools, require=require, zh=zh))
    if pruned:
        env.tracer.emit(T.CONTEXT_PRUNED, {"runtimeId": runtime.id, "pluginId": runtime.plugin_id, "prunedMessageCount": pruned},
                        turn_id=turn.turn_id, plugin_id=runtime.plugin_id, runtime_id=runtime.id)
    return "\n\n".join(s for s in sections if s)


#: Extension point through which plugins add a segment to story prompts (memory blocks).
PROMPT_SEGMENT_POINT = "prompt.segment@1"


def prompt_segments(env: ExecutionEnv, runtime: RuntimeManifest, turn: TurnInfo, view: EngineStateView) -> list[str]:
    """The texts of the session's ``prompt.segment@1`` providers for a story prompt, in extension
    order (spec 004 §插件记忆: 已提交的记忆块通过 prompt.segment@1 进入后续提示词).

    Each provider is called with ``{sessionId, pluginId, runtimeId, locale, turn, pluginData}``,
    where ``pluginData`` is the provider's own data ({namespace: {key: value}}, this execution's
    staged writes included) — never another plugin's — and answers ``{"text": str}`` (empty: no
    segment). A provider that fails or is late is skipped (trace ``extension.failed`` is not a
    spec event, so the failure is only logged by ``plugins_app.extensions``)."""
    from plugins_app.extensions import ExtensionFailed, extension_call, extension_providers

    providers = extension_providers(env.plugin_registry, [p.id for p in env.plugins], PROMPT_SEGMENT_POINT)
    out: list[str] = []
    for provider in providers:
        namespaces = {ns for (pid, ns) in env.snapshot.plugin_data if pid == provider.plugin_id}
        data = {ns: view.plugin_data_list(provider.plugin_id, ns) for ns in sorted(namespaces)}
        context = {"sessionId": env.snapshot.session_id, "pluginId": provider.plugin_id, "runtimeId": runtime.id,
                   "locale": env.snapshot.locale, "turn": turn.logical_turn, "pluginData": json_copy(data)}
        try:
            answer = extension_call(provider, context)
        except ExtensionFailed:
            continue
        text = answer.get("text")
        if isinstance(text, str) and text.strip():
            out.append(text.strip())
    return out


#: Extension point of the plugin that compacts old history (history-compaction, spec 000 §memory-search).
HISTORY_COMPACT_POINT = "history.compact@1"


def history_compaction(env: ExecutionEnv) -> dict[str, Any] | None:
    """The committed rolling summary of the first ``history.compact@1`` provider that has one:
    ``{"text", "throughTurnId"}`` — the story history up to and including that turn is replaced
    by the summary in story prompts (turns.engine.prompt.history_messages). None without one."""
    from plugins_app.extensions import ExtensionFailed, extension_call, extension_providers

    for provider in extension_providers(env.plugin_registry, [p.id for p in env.plugins], HISTORY_COMPACT_POINT):
        data = {ns: json_copy(rows) for (pid, ns), rows in env.snapshot.plugin_data.items() if pid == provider.plugin_id}
        try:
            answer = extension_call(provider, {"sessionId": env.snapshot.session_id, "pluginId": provider.plugin_id,
                                               "locale": env.snapshot.locale, "pluginData": data})
        except ExtensionFailed:
            continue
        if isinstance(answer.get("text"), str) and answer["text"].strip() and isinstance(answer.get("throughTurnId"), str):
            return {"text": answer["text"].strip(), "throughTurnId": answer["throughTurnId"]}
    return None


#: Extension point of plugins that rewrite the story history a story prompt sees (branch-reply:
#: a reply's accepted telling replaces the one first written).
HISTORY_TRANSFORM_POINT = "prompt.history-transform@1"


def history_transform(env: ExecutionEnv, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The story history after every ``prompt.history-transform@1`` provider of the session's
    plugins, in provider order. Each gets ``{sessionId, pluginId, locale, pluginData (its own,
    committed), messages: [{role, content}]}`` and answers ``{messages}``: the same messages, in the
    same order and roles, with rewritten ``content`` strings. An answer of another shape (a message
    added, dropped, reordered or re-roled) or a failed / late provider is ignored, so a transform
    can change what the history says but never its structure. Unchanged without providers."""
    from plugins_app.extensions import ExtensionFailed, extension_call, extension_providers

    for provider in extension_providers(env.plugin_registry, [p.id for p in env.plugins], HISTORY_TRANSFORM_POINT):
        data = {ns: json_copy(rows) for (pid, ns), rows in env.snapshot.plugin_data.items() if pid == provider.plugin_id}
        try:
            answer = extension_call(provider, {"sessionId": env.snapshot.session_id, "pluginId": provider.plugin_id,
                                               "locale": env.snapshot.locale, "pluginData": data,
                                               "messages": json_copy(messages)})
        except ExtensionFailed:
            continue
        rewritten = answer.get("messages")
        if (isinstance(rewritten, list) and len(rewritten) == len(messages)
                and all(isinstance(new, dict) and new.get("role") == old["role"] and isinstance(new.get("content"), str)
                        for new, old in zip(rewritten, messages))):
            messages = [{"role": old["role"], "content": new["content"]} for new, old in zip(rewritten, messages)]
    return messages


def self_data_section(view: EngineStateView, plugin_id: str, item: dict[str, Any]) -> str:
    """io.selfData: the runtime's own plugin data (with staged writes) under the ``as`` tag.
    format: summary (values cut to 200 characters), full, ids-only; maxEntries keeps the newest."""
    namespace, tag = item.get("namespace"), item.get("as")
    if not isinstance(namespace, str) or not isinstance(tag, str):
        return ""
    rows = view.plugin_data_list(plugin_id, namespace)
    keys = list(rows)[-int(item.get("maxEntries") or 200):]
    fmt = item.get("format") or "summary"
    if fmt == "ids-only":
        body = "\n".join(f"- {k}" for k in keys)
    elif fmt == "full":
        body = json.dumps({k: rows[k] for k in keys}, ensure_ascii=False, indent=1)
    else:
        body = "\n".join(f"- {k}: {json.dumps(rows[k], ensure_ascii=False)[:SELF_DATA_SUMMARY_CHARS]}" for k in keys)
    name = tag.strip("<>")
    return f"<{name}>\n{body}\n</{name}>"


def user_message_build(env: ExecutionEnv, turn: TurnInfo, *, is_story: bool, upstream_texts: list[str]) -> str:
    """The turn's user message: the player's rendered input (or an opening cue) plus, for
    non-story runtimes, this turn's story so far."""
    zh = instruction_locale_for(env.snapshot.locale) == ZH_CN
    if turn.player_message:
        base = turn.player_message
    elif turn.kind == "setup":
        base = "（开局准备）" if zh else "(Session setup.)"
    elif is_story:
        base = "（故事开始。写出开场。）" if zh else "(The story begins. Write the opening scene.)"
    else:
        base = "（本回合没有玩家输入。）" if zh else "(No player input this turn.)"
    if is_story or not upstream_texts:
        return base
    story = "\n\n".join(upstream_texts)
    return (f"[玩家]\n{base}\n\n[本回合故事]\n{story}" if zh else f"[PLAYER]\n{base}\n\n[STORY THIS TURN]\n{story}")


def agent_runtime_run(
    env: ExecutionEnv,
    runtime: RuntimeManifest,
    turn: TurnInfo,
    *,
    upstream: list[P.Proposal],
    inputs: dict[str, Any],
    upstream_texts: list[str],
    run_id: str,
    resume: dict[str, Any] | None = None,
    subagent: dict[str, Any] | None = None,
) -> RuntimeResult:
    """Run one agent runtime to completion. Never raises for a runtime failure: the result has
    status failed/suspended and error {message, code}.

    resume: continue a suspended run instead of starting one (spec 004 §Suspend / Resume: agent
    runtime 从保存下来的工具调用记录接着跑): ``{continuation, data, proposals}`` — the saved
    continuation (``RuntimeResult.suspension["continuation"]``), the player's answer, and the
    writes staged before the suspension. A suspended result keeps its staged writes in
    ``proposals`` and describes itself in ``suspension``.

    subagent: run as a delegate's sub-agent (turns.engine.delegate): ``{parentCallId, brief, data,
    maxSteps, canStage, private, character?}`` — the brief (a character agent: with its profile,
    history and instruction) is the user message, the tools are cut down, events carry
    ``parentCallId``; a ``private`` sub-agent's events keep no model traffic or tool contents."""
    assert runtime.agent is not None
    agent = runtime.agent
    is_story = is_story_runtime(runtime)
    result = RuntimeResult(runtime_id=runtime.id, plugin_id=runtime.plugin_id, stage=runtime.stage,
                           status=STATUS_SUCCESS, is_story=is_story, run_id=run_id)
    own = StagedProposals(resume["proposals"] if resume else ())
    view = EngineStateView(env.snapshot, upstream=upstream, own=own, form_validators=env.form_validators,
                           event_topics=env.event_topics, datasets=env.datasets, searchable=env.searchable_records)
    emit = _emitter(env, runtime, turn)
    if subagent is not None:  # a sub-agent's events point back at the delegate call
        from turns.engine.delegate import private_payload

        private = bool(subagent.get("private"))  # a character / concealed sub-agent: no model traffic in traces
        emit = (lambda type, payload, _emit=emit: _emit(type, {**(private_payload(payload) if private else payload),
                                                               "parentCallId": subagent["parentCallId"]}))
    started = time.monotonic()
    try:
        _loop(env, runtime, turn, agent, is_story, result, own, view, inputs, upstream_texts, emit, started, resume=resume,
              subagent=subagent)
    except RuntimeFailure as exc:
        result.status = STATUS_FAILED
        result.error = {"message": exc.message, "code": exc.code}
    except ModelError as exc:
        result.status = STATUS_FAILED
        result.error = {"message": exc.message, "code": exc.code}
    except Exception as exc:  # plugin code (scripts, tools) may raise anything; the runtime fails alone
        result.status = STATUS_FAILED
        result.error = {"message": f"{type(exc).__name__}: {exc}", "code": "runtime_error"}
    result.duration_ms = int((time.monotonic() - started) * 1000)
    if result.status == STATUS_SUCCESS or (result.status == STATUS_SUSPENDED and result.suspension is not None):
        result.proposals = own.items()
    else:
        result.proposals = []
        result.pending_inputs = []
    return result


def _emitter(env: ExecutionEnv, runtime: RuntimeManifest, turn: TurnInfo):
    def emit(type: str, payload: dict[str, Any]) -> None:
        env.tracer.emit(type, {"runtimeId": runtime.id, "pluginId": runtime.plugin_id, **payload},
                        turn_id=turn.turn_id, plugin_id=runtime.plugin_id, runtime_id=runtime.id)
    return emit


def _loop(env, runtime, turn, agent, is_story, result, own, view, inputs, upstream_texts, emit, started, resume=None,
          subagent=None) -> None:
    from turns.engine.tools.context import ToolContext

    require, after_tools = completion_of(runtime)
    offered, warnings = tool_names_for(env, runtime)
    runtime_tools: dict[str, Any] = {}
    if agent.tools.datasets:
        from turns.engine.tools.builtin.datasets import dataset_tools

        selection = [d.dataset if d.tools is None else {"dataset": d.dataset, "tools": list(d.tools)} for d in agent.tools.datasets]
        runtime_tools = dataset_tools(env.datasets(runtime.plugin_id), selection, taken_names=frozenset(offered))
        offered += [n for n in runtime_tools if n not in offered]
    hidden: set[str] = set()  # authorized but not offered: absent service imports answer `unavailable`
    if agent.tools.services:  # imported service tools (spec 000 §导入的服务工具)
        from turns.engine.tools.services import service_tools

        can_write = resume is None and "suspend" not in agent.tools.builtin and not runtime.is_background
        imported, absent = service_tools(env, runtime, agent.tools.services, can_write=can_write, turn=turn,
                                         characters=view.characters)
        runtime_tools = {**runtime_tools, **imported, **absent}
        offered += [n for n in imported if n not in offered]
        hidden.update(absent)
    if subagent is None and "delegate" in agent.tools.builtin:  # spec 000 §子 agent（delegate）
        from turns.engine.delegate import delegate_tool

        runtime_tools = {**runtime_tools, "delegate": delegate_tool(
            env, runtime, turn, staged=view.staged_proposals, characters=view.characters,
            can_stage=resume is None and not runtime.is_background, run=agent_runtime_run)}
        offered.append("delegate")
    elif subagent is not None:  # read-only tools and service imports only (write ones when the caller may stage)
        from turns.engine.delegate import subagent_tool_names

        imports = {i.tool_name for i in agent.tools.services}
        writes = {n for n in imports if n in runtime_tools and n not in hidden
                  and runtime_tools[n].annotations.stages_writes}
        offered = subagent_tool_names(offered, runtime_tools, env.tool_registry, runtime.plugin_id, imports, writes,
                                      can_stage=bool(subagent.get("canStage")))
    # runtime-done is the quiet-turn exit of a runtime whose contract uses it: no completion tool,
    # or ``require: explicit`` (codex, affinity, character-tracker: "nothing qualifies → runtime-done").
    # A ``require: tool-use`` runtime with afterTools must end through its completion tool (spec 000 §授权).
    offers_done = (not is_story and (not after_tools or require == "explicit")
                   and RUNTIME_DONE in env.tool_registry.builtin_names())
    listed = list(offered)
    if offers_done and RUNTIME_DONE not in listed:
        listed.append(RUNTIME_DONE)
    if is_story and RUNTIME_DONE in listed:
        listed.remove(RUNTIME_DONE)
    authorized = set(listed) | hidden
    if is_story or offers_done:
        authorized.add(RUNTIME_DONE)
    for warning in warnings:  # notices, not failed calls (spec 000 §注解与超时: 省略并告警)
        emit(T.RUNTIME_WARNING, {"warning": {"code": "tool-not-offered", "message": warning}})
    slot, model_id = slot_for_runtime(config=env.router.config, runtime_id=runtime.id, is_story=is_story,
                                      request_model=env.request_model, overrides=env.snapshot.runtime_model_overrides,
                                      manifest_model=agent.model)
    result.model_slot = slot.name
    capability = _known_capability(slot, model_id)
    if capability is not None and capability.get("tools") is False and listed:
        if not is_story:
            raise RuntimeFailure("tools_unsupported", f'the model "{model_id or slot.model}" of slot "{slot.name}" cannot call '
                                 "tools (model database), and this runtime works through tools: bind a tool-capable model")
        listed = []  # a story runtime writes prose without its optional tools
    budget_scale = _budget_scale(capability)
    definitions = [_tool_definition(env, n, runtime.plugin_id, runtime_tools, view) for n in listed]
    deferred = (DeferredTools.for_runtime(agent.tools.defer, definitions, plugin_id=runtime.plugin_id)
                if listed and subagent is None else None)
    if deferred is not None:  # tools.defer: the pool waits, search-tools is injected (spec 000 §search-tools)
        runtime_tools = {**runtime_tools, SEARCH_TOOLS: deferred.tool()}
        definitions = deferred.definitions  # the live list: search-tools appends what it loads
        definitions.append(runtime_tools[SEARCH_TOOLS].definition())
        listed.append(SEARCH_TOOLS)
        authorized.add(SEARCH_TOOLS)
    # Rules are private to the dimension provider: given only to a runtime whose prompt places
    # {{ world.dimensionRules }} (world-init/dimension-tracker); read with the session snapshot.
    rules = dict(env.snapshot.dimension_rules) if DIMENSION_RULES_PLACEHOLDER in prompt_source(env, runtime) else None
    system = system_prompt_build(env, runtime, turn, view=view, inputs=inputs, offers_done=offers_done,
                                 after_tools=after_tools, require=require, dimension_rules=rules, offered=listed,
                                 budget_scale=budget_scale)
    # The request context is what the offline scripted provider answers from; real providers
    # ignore it (providers.base.ModelRequest), so it is built only when this slot or one of its
    # fallbacks is scripted (issue 18: copying snapshot data into every real model call).
    scripted_reachable = slot_chain_has_scripted(env.router.config, slot)
    scripted_dimensions = [] if not scripted_reachable else [
        {"id": d.id, "name": d.name, "value": d.value, "version": d.version, "schema": d.schema,
         **({"updateRule": rules[d.id]} if rules and rules.get(d.id) else {})}
        for d in view.world_dimensions()
    ]
    compaction = history_compaction(env) if is_story else None
    history, history_pruned = (history_messages(env.snapshot, max_turns=agent.history_max_turns, budget_scale=budget_scale,
                                                compaction=compaction)
                               if is_story else ([], False))
    if history:
        history = history_transform(env, history)
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}, *history,
                                      {"role": "user", "content": user_message_build(env, turn, is_story=is_story, upstream_texts=upstream_texts)}]
    if subagent is not None:  # the brief (and data) is the sub-agent's task
        from turns.engine.delegate import subagent_user_message

        messages[-1] = {"role": "user", "content": subagent_user_message(subagent, zh=instruction_locale_for(env.snapshot.locale) == ZH_CN)}
    messages = post_context_assembly(env, runtime, turn, messages, inputs=inputs, view=view, is_story=is_story,
                                     template=lambda: prompt_source(env, runtime))  # PostContextAssembly hooks
    max_steps = int(agent.loop.get("maxSteps") or DEFAULT_MAX_STEPS)
    if subagent is not None and subagent.get("maxSteps"):
        max_steps = min(max_steps, int(subagent["maxSteps"]))
    max_retries = max(0, int(agent.loop.get("maxRetries") or 0))
    call_timeout_ms = int(agent.loop.get("callTimeoutMs") or 0) or None
    timeout_ms = int(agent.loop.get("timeoutMs") or DEFAULT_TIMEOUT_MS)
    tool_choice: Any = (agent.llm or {}).get("toolChoice", "auto")
    tool_context = ToolContext(
        session_id=env.snapshot.session_id, plugin_id=runtime.plugin_id, runtime_id=runtime.id, state=view,
        authorized_tool_names=frozenset(authorized), locale=instruction_locale_for(env.snapshot.locale),
        content_locale=env.snapshot.locale, logical_turn=turn.logical_turn, cancel=env.cancel,
        dataset_tool_names=frozenset(runtime_tools), inputs={k: {"value": v} for k, v in inputs.items()},
        on_success=lambda outcome: _stage_outcome(own, runtime, outcome),
        model_router=env.router,  # memory-search's embedding slot
        history_for=history_for_binding(env.snapshot, view.characters),
    )
    manifest = env.manifest(runtime.plugin_id)
    business_success = False
    unresolved_failures: dict[str, str] = {}
    last_text = ""
    done = False
    interactions: dict[str, dict[str, Any]] = {}
    steer = turn_control_of(env.cancel) if is_story else None
    steer_carried: list[str] = []
    first_step = 1
    if resume is not None:
        # The saved conversation is the context (no re-assembly); the suspend call's placeholder
        # result is replaced by {summary, data} under the same toolCallId (spec 000 §suspend).
        saved = resume["continuation"]
        messages = json_copy(saved["messages"])
        for message in messages:
            if message.get("role") == "tool" and message.get("tool_call_id") == saved["suspendCallId"]:
                message["content"] = json.dumps({"summary": "The player answered.", "data": resume["data"]}, ensure_ascii=False)
        business_success = bool(saved.get("businessSuccess"))
        unresolved_failures = dict(saved.get("unresolvedFailures") or {})
        if deferred is not None:  # tools search-tools loaded before the suspension (no longer deferred: skipped)
            deferred.activate(saved.get("activatedTools") or [])
        interactions = dict(saved.get("interactions") or {})
        first_step = int(saved.get("step") or 0) + 1
        if first_step > max_steps:
            max_steps = first_step  # the answer always gets one model call
    suspend_call_id: str | None = None
    private_calls: dict[str, tuple[str, str]] = {}  # character delegations: what traces keep instead
    for step in range(first_step, max_steps + 1):
        if env.cancel.is_cancelled:
            raise RuntimeFailure("aborted", "the execution was stopped")
        if (time.monotonic() - started) * 1000 > timeout_ms:
            raise RuntimeFailure("timeout", f"runtime did not finish within {timeout_ms} ms")
        emit(T.STEP_STARTED, {"step": step})
        if steer is not None:
            incoming, steer_carried = steer_carried + steer.steer_take(), []
            for message in incoming:
                content = steer_text(message, locale=env.snapshot.locale)
                messages.append({"role": "user", "content": content})
                steer.steer_applied_add(AppliedSteer(message=message, text=content, runtime_id=runtime.id,
                                                     plugin_id=runtime.plugin_id, step=step))
                emit(STEER_APPLIED, {"step": step, "message": message})
        request = ModelRequest(
            messages=json_copy(messages), tools=definitions, tool_choice=tool_choice if step == 1 else ("auto" if tool_choice == "required" else tool_choice),
            context={} if not scripted_reachable else {
                "session_id": env.snapshot.session_id, "runtime_id": runtime.id, "plugin_id": runtime.plugin_id,
                "plugin_root": str(manifest.root) if manifest else None, "locale": env.snapshot.locale,
                "is_story": is_story, "step": step, "turn": turn.logical_turn, "turn_kind": turn.kind,
                "player_message": turn.player_message, "action_kind": turn.action_kind,
                "submissions": json_copy(turn.submissions), "inputs": json_copy(inputs),
                "after_tools": after_tools, "require_tool_use": require == "tool-use",
                "world": {"name": env.snapshot.world.name, "summary": env.snapshot.world.summary, "lore": env.snapshot.world.lore,
                          "opening_scenario": env.snapshot.world.opening_scenario},
                "lorebook": [{"id": e.id, "keys": list(e.keys), "content": e.content} for e in view.lorebook_entries() if e.enabled],
                "characters": [c.snapshot() for c in view.characters()],
                "character_schema": view.character_schema(),
                "dimensions": scripted_dimensions,  # values and schemas are view.world_dimensions()' private copies
                "pending_interactions": json_copy(env.snapshot.pending_interactions),
            },
        )
        request, call_model = pre_llm_call(env, runtime, turn, request, model_id)  # PreLLMCall hooks: this call only
        call_started = _now_iso()  # Tracer.emit restamps it with the trace row's own time, under its lock
        emit(T.LLM_CALLING, {"step": step, "slot": slot.name, "provider": slot.provider, "model": model_id or slot.model,
                             "startedAt": call_started, "messages": private_messages(request.messages, private_calls),
                             "toolNames": listed})
        if slot.provider != PROVIDER_SCRIPTED:
            env.tracer.flush()  # the model call waits on the network: the client sees llm.calling now
        t0 = time.monotonic()
        response: ModelResponse | None = None
        streamed: list[str] = []
        for attempt in range(max_retries + 1):
            # prose chunks leave as at most one narrative.delta per DELTA_WINDOW_SECONDS (turns.engine.deltas)
            deltas = DeltaCoalescer(lambda t: emit(T.NARRATIVE_DELTA, {"text": t, "step": step})) if is_story else None
            try:
                response = _model_call(env, slot, call_model, request, streamed, call_timeout_ms=call_timeout_ms,
                                       on_delta=deltas.add if deltas is not None else None)
                break
            except ModelError as exc:
                # loop.maxRetries: a call that failed before streaming anything is sent again on a
                # rate limit (429), a server error (5xx) or no answer — never after an idle timeout.
                if attempt >= max_retries or streamed or not _retryable(exc) or env.cancel.is_cancelled:
                    raise
                emit(T.LLM_RESPONDED, {"step": step, "slot": slot.name, "provider": slot.provider, "model": model_id,
                                       "durationMs": int((time.monotonic() - t0) * 1000), "error": {"code": exc.code, "message": exc.message},
                                       "retry": attempt + 1})
                _backoff(env, min(RETRY_BACKOFF_SECONDS * (2 ** attempt), RETRY_BACKOFF_MAX_SECONDS))
            finally:
                if deltas is not None:
                    deltas.close()  # the held prose leaves before any later frame of this runtime
        if response is None:
            raise ModelError("bad_response", "the model stream ended without a response")
        text = response.text or "".join(streamed)
        result.usage["input"] += response.usage.input_tokens
        result.usage["output"] += response.usage.output_tokens
        emit(T.LLM_RESPONDED, {"step": step, "slot": slot.name, "provider": slot.provider, "model": response.model or model_id,
                               "durationMs": int((time.monotonic() - t0) * 1000), "finishReason": response.finish_reason,
                               "usage": response.usage.to_json(), "text": text, "toolCallCount": len(response.tool_calls)})
        result.prompt = private_messages(request.messages, private_calls)
        if not response.tool_calls:
            emit(T.MESSAGE_COMPLETED, {"step": step, "text": text})
            messages.append({"role": "assistant", "content": text})
            emit(T.STEP_COMPLETED, {"step": step, "toolCallCount": 0})  # a re-prompt follows when a tool is still required
            if is_story:
                if text.strip():
                    late = steer.steer_take_or_close() if steer is not None else []
                    if late and step < max_steps:
                        steer_carried = late  # digest them in one more model call
                        continue
                    for message in late:
                        emit(STEER_DISCARDED, {"step": step, "message": message, "reason": "max_steps"})
                    result.text = text
                    result.output = {STORY_OUTPUT_KEY: text}
                    done = True
                    break
                messages.append({"role": "user", "content": "请写出本回合的故事正文。" if instruction_locale_for(env.snapshot.locale) == ZH_CN else "Write this turn's story prose now."})
                continue
            needs_tool = (require == "tool-use" and not business_success) or bool(after_tools) or require == "explicit"
            if needs_tool and step < max_steps:
                # Many OpenAI-compatible hosts (llama.cpp, ollama) ignore a forced tool_choice and
                # answer in prose: re-prompt once per remaining step with a short framework rule.
                nudge = tool_required_nudge(tool_choice=tool_choice, offers_done=offers_done, after_tools=after_tools,
                                            require=require, zh=instruction_locale_for(env.snapshot.locale) == ZH_CN)
                messages.append({"role": "user", "content": nudge})
                continue
            if needs_tool:
                raise RuntimeFailure("completion_unmet", "the runtime ended without the tool call its completion rule requires")
            last_text = text
            if unresolved_failures and not business_success and not text.strip():
                raise RuntimeFailure("tool_failed_without_output", "a tool call failed and the runtime produced no output")
            result.output = result.output if result.output is not None else ({"text": text} if text else None)
            result.text = ""
            done = True
            break
        finished = False
        regular = []
        story_done_calls = []
        refused: dict[str, str] = {}
        history_calls = []
        for call in response.tool_calls:
            if is_story and call.name == RUNTIME_DONE:
                story_done_calls.append(call)
                history_calls.append({"id": call.id, "name": call.name, "arguments": call.arguments})
                continue
            # PreToolUse hooks may rewrite the call (the history keeps what runs) or refuse it (turns.engine.hooks).
            decision = pre_tool_use(env, runtime, turn, call.name, call.arguments)
            history_calls.append({"id": call.id, "name": decision.name, "arguments": decision.arguments})
            regular.append(ToolCall(call_id=call.id, name=decision.name, arguments=decision.arguments))
            if decision.refused is not None:
                refused[call.id] = decision.refused
        for call in regular:
            emit(T.TOOL_CALLING, {"step": step, "tool": call.name, "callId": call.call_id,
                                  "input": recorded_input(call.name, _arguments_json(call.arguments))})
        outcomes = _calls_run(env, runtime, turn, regular, refused, tool_context, runtime_tools)
        # The history carries what ran: repaired arguments as valid JSON text, unrepairable ones as
        # the raw text in a JSON string (spec 000 §参数修复: 修正后的参数会以合法 JSON 写回模型历史).
        repaired = {o.call_id: o.history_arguments for o in outcomes}
        messages.append({"role": "assistant", "content": text, "tool_calls": [
            {**c, "arguments": repaired.get(c["id"]) or _history_text(c["arguments"])} for c in history_calls]})
        tool_messages: dict[str, dict[str, Any]] = {}
        for outcome in outcomes:
            # a character delegation's instruction and intent stay out of records and traces (spec 000 §角色委托)
            recorded = recorded_envelope(outcome.name, outcome.envelope)
            recorded_args = recorded_input(outcome.name, _arguments_json(outcome.history_arguments))
            if outcome.name == DELEGATE and (recorded is not outcome.envelope or recorded_args != _arguments_json(outcome.history_arguments)):
                private_calls[outcome.call_id] = (json.dumps(recorded_args, ensure_ascii=False), envelope_json(recorded))
            record = {"tool": outcome.name, "input": recorded_input(outcome.name, _arguments_json(outcome.history_arguments)),
                      "output": recorded, "status": outcome.status, "durationMs": outcome.duration_ms}
            result.tool_calls.append(record)
            if outcome.status == CALL_SUCCESS:
                emit(T.TOOL_COMPLETED, {"step": step, "tool": outcome.name, "callId": outcome.call_id, "output": recorded,
                                        "durationMs": outcome.duration_ms})
                for e in outcome.events:
                    emit(T.DOMAIN_EVENT_PREVIEWED, {"topic": e["topic"], "data": e.get("data") or {}})
                content = outcome.content
                if isinstance(content, dict):
                    if isinstance(content.get("interaction"), dict):
                        interaction = dict(content["interaction"])
                        interaction.setdefault("sourcePluginId", runtime.plugin_id)
                        interactions[str(interaction.get("interactionId"))] = interaction
                    if content.get("preGameDone") is True:
                        result.pre_game_done = True
                if outcome.name not in (RUNTIME_DONE, SEARCH_TOOLS):  # loading tools is not business work
                    business_success = True
                    unresolved_failures.pop(outcome.name, None)
                if outcome.control == CONTROL_DONE:
                    if require == "tool-use" and not business_success:
                        pass
                    elif require == "explicit" and unresolved_failures:
                        pass
                    else:
                        finished = True
                elif outcome.control == CONTROL_SUSPEND:
                    result.status = STATUS_SUSPENDED
                    suspend_call_id = outcome.call_id
                    suspend_content = content
                    finished = True
                if outcome.name in after_tools:
                    result.output = (completion_output(env, runtime.id, outcome.call_id, content)
                                     if outcome.name == DELEGATE else content)
                    finished = True
            else:
                emit(T.TOOL_FAILED, {"step": step, "tool": outcome.name, "callId": outcome.call_id, "output": outcome.envelope,
                                     "error": outcome.envelope.get("error"), "durationMs": outcome.duration_ms})
                if outcome.counts_as_failure:
                    unresolved_failures[outcome.name] = (outcome.error.code if outcome.error else "internal")
            tool_messages[outcome.call_id] = {"role": "tool", "tool_call_id": outcome.call_id, "name": outcome.name,
                                              "content": envelope_json(outcome.envelope)}
        for call in story_done_calls:
            nudge = {"summary": "Story runtimes end with prose: write this turn's story now, without tools."}
            tool_messages[call.id] = {"role": "tool", "tool_call_id": call.id, "name": call.name, "content": envelope_json(nudge)}
        for call in response.tool_calls:
            messages.append(tool_messages[call.id])
        emit(T.STEP_COMPLETED, {"step": step, "toolCallCount": len(response.tool_calls)})
        if finished:
            done = True
            break
    if not done:
        if is_story:
            raise RuntimeFailure("max_steps", f"the story runtime wrote no prose within {max_steps} steps")
        if (require == "tool-use" and not business_success) or after_tools or require == "explicit":
            raise RuntimeFailure("max_steps", f"the runtime did not complete within {max_steps} steps")
        result.output = result.output if result.output is not None else ({"text": last_text} if last_text else None)
    if result.status == STATUS_SUSPENDED:
        if suspend_call_id is not None:
            result.suspension = {
                "reason": str(suspend_content.get("reason") or ""), "resumeSchema": suspend_content.get("resumeSchema") or {},
                "continuation": {"kind": "agent", "messages": json_copy(messages), "suspendCallId": suspend_call_id,
                                 "step": step, "businessSuccess": business_success,
                                 "unresolvedFailures": unresolved_failures, "interactions": interactions,
                                 "activatedTools": list(deferred.activated) if deferred is not None else []},
            }
        return
    schema = _output_schema(runtime, env)
    if schema is not None and result.output is not None and not is_story:
        errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(result.output), key=lambda e: list(e.absolute_path))
        if errors:
            raise RuntimeFailure("output_invalid", "output does not match io.output.schema: " + errors[0].message)
    result.pending_inputs = list(interactions.values())
    if isinstance(result.output, dict) and result.output.get("preGameDone") is True:
        result.pre_game_done = True


def tool_required_nudge(*, tool_choice: Any, offers_done: bool, after_tools: list[str], require: str | None, zh: bool) -> str:
    """The framework instruction sent after a reply without the tool call the completion rule needs
    (a host ignored ``tool_choice`` or the model answered in prose). Returns one short user message."""
    named = tool_choice.get("name") if isinstance(tool_choice, dict) else None
    targets = [named] if isinstance(named, str) else list(after_tools)
    if zh:
        head = "[框架] 上一条回复没有工具调用，本 runtime 只能通过工具调用结束。不要写文字。"
        want = f"现在调用 {' 或 '.join(targets)}。" if targets else "现在调用完成任务所需的工具。"
        done = "没有需要记录的内容时，只调用 runtime-done。" if offers_done else ""
    else:
        head = "[FRAMEWORK] Your last reply had no tool call; this runtime can only finish through a tool call. Do not write text."
        want = f" Call {' or '.join(targets)} now." if targets else " Call the tool the task needs now."
        done = " If there is nothing to record, call runtime-done alone." if offers_done else ""
    return head + want + done


#: First wait before a retried model call (seconds); doubles per attempt up to the maximum.
RETRY_BACKOFF_SECONDS = 0.5
RETRY_BACKOFF_MAX_SECONDS = 4.0


def _backoff(env: ExecutionEnv, seconds: float) -> None:
    """Wait before a retry; a stop of the execution ends the wait early."""
    wait = getattr(env.cancel, "wait", None)
    if callable(wait):
        wait(seconds)
    else:
        time.sleep(seconds)


def _retryable(exc: ModelError) -> bool:
    """A failure worth one more identical call: HTTP 429 / 5xx, or no answer at all."""
    if exc.code == "unreachable":
        return True
    return exc.code == "provider_error" and exc.status is not None and (exc.status == 429 or exc.status >= 500)


def _model_call(env: ExecutionEnv, slot: Any, model: str, request: ModelRequest, streamed: list[str], *,
                call_timeout_ms: int | None, on_delta) -> ModelResponse:
    """One model call through the router: text deltas are appended to ``streamed`` (and passed to
    ``on_delta``), the final ModelResponse is returned. ``call_timeout_ms`` (loop.callTimeoutMs)
    bounds the whole call, checked between stream items (the provider's idle timeout bounds a
    silent stream). Raises ModelError, or RuntimeFailure("aborted") when the execution stops."""
    started = time.monotonic()
    response: ModelResponse | None = None
    for item in env.router.stream(slot, model, request):
        if env.cancel.is_cancelled:
            raise RuntimeFailure("aborted", "the execution was stopped")
        if call_timeout_ms is not None and (time.monotonic() - started) * 1000 > call_timeout_ms:
            raise ModelError("call_timeout", f"the model call took longer than loop.callTimeoutMs ({call_timeout_ms} ms)")
        if isinstance(item, TextDelta):
            streamed.append(item.text)
            if on_delta is not None:
                on_delta(item.text)
        elif isinstance(item, ModelResponse):
            response = item
    if response is None:
        raise ModelError("bad_response", "the model stream ended without a response")
    return response


#: Prompt characters the default budgets add up to (lore, characters, lorebook, memory, history).
DEFAULT_PROMPT_BUDGET_CHARS = 56_000
#: Characters per token assumed when a context window (tokens) becomes a character budget.
CHARS_PER_TOKEN = 3
#: Smallest share of the default budgets kept however small the window is.
MIN_BUDGET_SCALE = 0.1


def _known_capability(slot: Any, model_id: str | None) -> dict[str, Any] | None:
    """The model database's capability for the slot's model, or None when nothing specific is known
    (the offline scripted model, a database miss answered with the protocol's defaults, no lookup)."""
    from turns.engine.ports import model_capability
    from turns.engine.providers.config import PROVIDER_SCRIPTED

    if slot.provider == PROVIDER_SCRIPTED:
        return None
    found = model_capability(model_id or slot.model, provider=slot.provider, protocol=slot.protocol)
    if not found or found.get("source") == "protocol-default":
        return None
    return found.get("capability") or None


def _budget_scale(capability: dict[str, Any] | None) -> float:
    """Share (0.1–1.0) of the default prompt budgets that fits the model's context window, keeping
    room for its output (maxOutputTokens, at most a quarter of the window). 1.0 when unknown."""
    window = capability.get("contextWindow") if capability else None
    if not isinstance(window, int) or window <= 0:
        return 1.0
    output = capability.get("maxOutputTokens") if isinstance(capability.get("maxOutputTokens"), int) else 2048
    available = (window - min(output, window // 4)) * CHARS_PER_TOKEN
    return max(MIN_BUDGET_SCALE, min(1.0, available / DEFAULT_PROMPT_BUDGET_CHARS))


def _calls_run(env, runtime, turn, calls: list[ToolCall], refused: dict[str, str], tool_context, runtime_tools) -> list:
    """One model reply's calls, outcomes in the model's order. Refused calls do not run. With
    PostToolUse hooks the calls run one at a time and a hook may stop the rest (``cancelled``);
    without, they run as one batch (parallel pools)."""
    runnable = [c for c in calls if c.call_id not in refused]
    if not has_hooks(env, POST_TOOL_USE):
        ran = env.executor.execute_batch(runnable, tool_context, runtime_tools=runtime_tools) if runnable else []
    else:
        ran, stop = [], None
        for call in runnable:
            if stop is not None:
                ran.append(env.executor.cancelled_outcome(call, stop))
                continue
            outcome = env.executor.execute_one(call, tool_context, runtime_tools=runtime_tools)
            ran.append(outcome)
            stop = post_tool_use(env, runtime, turn, call.name, call.arguments, outcome)
    by_id = {o.call_id: o for o in ran}
    return [by_id[c.call_id] if c.call_id in by_id else env.executor.refused_outcome(c, refused[c.call_id]) for c in calls]


def _stage_outcome(own: StagedProposals, runtime: RuntimeManifest, outcome: Any) -> None:
    """Stage a successful call's writes the moment it ends, so later calls of the same reply (and
    of later steps) read them through the runtime's one staged view (spec 000 §读到的是哪一份数据).
    The commit still applies them in one transaction; a failed runtime drops them all."""
    own.extend(outcome.proposals)
    own.extend(P.Proposal(P.EVENT_EMIT, {"topic": e["topic"], "data": e.get("data") or {}},
                          plugin_id=runtime.plugin_id, runtime_id=runtime.id, call_id=outcome.call_id)
               for e in outcome.events)


def _history_text(raw: Any) -> str:
    """Arguments as the JSON text a chat history carries (a dict is serialized; text kept)."""
    if isinstance(raw, str):
        return raw if raw.strip() else "{}"
    return json.dumps(raw if raw is not None else {}, ensure_ascii=False)


def _arguments_json(raw: Any) -> Any:
    if isinstance(raw, str):
        try:
            return json.loads(raw) if raw.strip() else {}
        except ValueError:
            return raw
    return raw

