"""The offline `scripted` provider: deterministic, keyless, plays every runtime's contract.

Order of answers for one call:
1. the plugin's own script, when its folder has `scripted.py` defining `respond(turn)` (see
   turns/engine/README.md, "Scripted scripts"); a reply of None falls through;
2. story runtimes (`context["is_story"]`): prose in the session locale built from the world,
   the characters present and the player's action, streamed in small pieces;
3. tool runtimes: a schema-valid call of the tool the contract needs (toolChoice name, the first
   `afterTools` tool, or the first business tool when tool use is required), then `runtime-done`
   when it is offered, else a short closing text.

Test hook: the environment variable ``COVEL_SCRIPTED_DELTA_DELAY_MS`` (milliseconds, default 0)
makes every streamed text delta wait that long first, so tests can stop a turn mid-stream
(abort) with the offline model. Read on every call; unset in normal use.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import threading
import time
from pathlib import Path
from typing import Any, Iterator

from turns.engine.providers.base import ModelRequest, ModelResponse, StreamItem, TextDelta, ToolCallRequest, Usage

logger = logging.getLogger(__name__)

NAME = "scripted"
SCRIPT_FILE = "scripted.py"
RUNTIME_DONE = "runtime-done"
#: Characters per streamed delta.
DELTA_CHARS = 6
DELTA_DELAY_ENV = "COVEL_SCRIPTED_DELTA_DELAY_MS"

_script_cache: dict[str, Any] = {}
_script_lock = threading.Lock()


def _script_load(plugin_id: str, plugin_root: str | None) -> Any:
    """The plugin's `respond` callable or None (cached per file; a broken script logs once)."""
    if not plugin_root:
        return None
    key = f"{plugin_root}/{SCRIPT_FILE}"
    with _script_lock:
        if key in _script_cache:
            return _script_cache[key]
        path = Path(plugin_root) / SCRIPT_FILE
        respond = None
        if path.is_file():
            from plugins_app.toolkit.modules import module_load_by_path

            try:
                module = module_load_by_path(Path(plugin_root), plugin_id, SCRIPT_FILE)
                respond = getattr(module, "respond", None)
                if not callable(respond):
                    respond = None
            except Exception:  # a plugin's script is outside our control; fall back to defaults
                logger.exception("scripted: cannot load %s", path)
        _script_cache[key] = respond
        return respond


def scripts_reset() -> None:
    """Forget loaded plugin scripts (tests that rewrite a script file)."""
    with _script_lock:
        _script_cache.clear()


def _is_zh(locale: str | None) -> bool:
    return bool(locale) and locale.lower().startswith("zh")


def _pick(options: list[Any], seed: str) -> Any:
    if not options:
        return None
    digest = int(hashlib.sha256(seed.encode("utf-8")).hexdigest()[:8], 16)
    return options[digest % len(options)]


def _first_sentence(text: str, limit: int = 90) -> str:
    text = " ".join((text or "").split())
    for mark in ("。", "！", "？", ". ", "! ", "? "):
        index = text.find(mark)
        if 0 < index < limit:
            return text[: index + len(mark)].strip()
    return text[:limit].rstrip() + ("…" if len(text) > limit else "")


_RENDER_TAG = re.compile(r"^\s*(?:【[^】]*】|\[[^\]]*\]\s*)")


def story_prose(context: dict[str, Any]) -> str:
    """Deterministic prose for a story runtime (locale, world, characters, player action)."""
    zh = _is_zh(context.get("locale"))
    world = context.get("world") or {}
    world_name = world.get("name") or ("此地" if zh else "this place")
    summary = _first_sentence(world.get("summary") or world.get("lore") or "")
    characters = [c for c in context.get("characters") or [] if c.get("name")]
    player = next((c for c in characters if c.get("type") == "player"), None)
    npcs = [c for c in characters if c.get("type") != "player"]
    turn = int(context.get("turn") or 0)
    # The rendered input may carry action tags (turns/engine/render.py: "[Name · Act] …",
    # "【名·行动】…"); prose never repeats them.
    action = " ".join(_RENDER_TAG.sub("", line).strip() for line in (context.get("player_message") or "").splitlines()).strip()
    npc = _pick(npcs, f"{context.get('session_id')}:{turn}:{action}")
    hero = player["name"] if player else ("你" if zh else "you")
    parts: list[str] = []
    if not action:
        if zh:
            parts.append(f"{world_name}。{summary}" if summary else f"故事在{world_name}展开。")
            if npc:
                parts.append(f"{npc['name']}{('——' + _first_sentence(npc.get('description') or '', 40)) if npc.get('description') else ''}，正在不远处等着什么。")
            parts.append(f"{hero}站在这里，第一步该往哪里走，由{hero}自己决定。")
        else:
            parts.append(f"{world_name}. {summary}" if summary else f"The story opens in {world_name}.")
            if npc:
                parts.append(f"{npc['name']} waits nearby{', ' + _first_sentence(npc.get('description') or '', 60) if npc.get('description') else ''}.")
            parts.append(f"{hero[0].upper() + hero[1:]} stand{'s' if player else ''} at the threshold; the first step is yours to choose.")
        return " ".join(parts) if not zh else "".join(parts)
    if zh:
        parts.append(f"{hero}{'说' if context.get('action_kind') == 'say' else ''}：「{action}」" if context.get("action_kind") == "say" else f"{hero}：{action}")
        if npc:
            reaction = _pick(["眉头一动，低声回了一句", "沉默片刻，点了点头", "笑了笑，把话接了过去", "抬眼望向远处，像是在掂量这句话"], f"{turn}:{npc['name']}")
            parts.append(f"{npc['name']}{reaction}。")
        parts.append(_pick([f"{world_name}的风从水面上吹过来，事情似乎有了新的走向。", f"周围的动静渐渐多了，{world_name}并不像表面那样平静。", "一条新的线索，就藏在刚才那句话的余音里。"], f"{turn}:{action}"))
        return "".join(parts)
    parts.append(f"{hero[0].upper() + hero[1:]}: {action}")
    if npc:
        reaction = _pick(["answers after a short pause", "nods slowly", "smiles and takes up the thread", "glances away, weighing the words"], f"{turn}:{npc['name']}")
        parts.append(f"{npc['name']} {reaction}.")
    parts.append(_pick([f"A wind moves through {world_name}; something has shifted.", f"The noise around you grows; {world_name} is less calm than it looks.", "A new lead hides in the echo of what was just said."], f"{turn}:{action}"))
    return " ".join(parts)


def schema_sample(schema: Any, name: str = "value", depth: int = 0) -> Any:
    """A value valid for a simple JSON Schema: defaults, first enum option, minimums, required keys."""
    if not isinstance(schema, dict) or depth > 8:
        return None
    if "default" in schema:
        return schema["default"]
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list) and schema[key]:
            return schema_sample(schema[key][0], name, depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), kind[0] if kind else None)
    if kind == "object" or (kind is None and "properties" in schema):
        out: dict[str, Any] = {}
        props = schema.get("properties") or {}
        for key in schema.get("required") or []:
            out[key] = schema_sample(props.get(key, {}), key, depth + 1)
        return out
    if kind == "array":
        count = int(schema.get("minItems") or 0)
        return [schema_sample(schema.get("items") or {}, name, depth + 1) for _ in range(count)]
    if kind == "integer":
        return int(schema.get("minimum", 0))
    if kind == "number":
        return schema.get("minimum", 0)
    if kind == "boolean":
        return False
    if kind == "null":
        return None
    text = name
    min_length = int(schema.get("minLength") or 0)
    return text if len(text) >= min_length else text + "x" * (min_length - len(text))


def _tool_results(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tool messages after the last user message, in order."""
    out: list[dict[str, Any]] = []
    for message in messages:
        if message.get("role") == "user":
            out = []
        elif message.get("role") == "tool":
            out.append(message)
    return out


class ScriptedClient:
    """ModelClient that never leaves the process. Thread-safe (no per-call state)."""

    name = NAME

    def stream(self, request: ModelRequest) -> Iterator[StreamItem]:
        context = request.context or {}
        tool_names = [t["name"] for t in request.tools]
        reply = self._plugin_reply(request, tool_names)
        if reply is None:
            reply = self._default_reply(request, tool_names)
        calls = [
            ToolCallRequest(
                id=f"call-{context.get('step', 0)}-{i}",
                name=c["name"],
                arguments=c["arguments"] if isinstance(c.get("arguments"), str) else json.dumps(c.get("arguments") or {}, ensure_ascii=False),
            )
            for i, c in enumerate(reply.get("tool_calls") or [])
        ]
        text = "" if calls else str(reply.get("text") or "")
        delay_seconds = _delta_delay_seconds()
        for start in range(0, len(text), DELTA_CHARS):
            if delay_seconds:
                time.sleep(delay_seconds)
            yield TextDelta(text[start : start + DELTA_CHARS])
        prompt_chars = sum(len(str(m.get("content") or "")) for m in request.messages)
        yield ModelResponse(
            text=text,
            tool_calls=calls,
            finish_reason="tool_calls" if calls else "stop",
            usage=Usage(input_tokens=max(1, prompt_chars // 4), output_tokens=max(1, len(text) // 4) if text else len(calls) * 8),
            model=request.model or NAME,
        )

    def _plugin_reply(self, request: ModelRequest, tool_names: list[str]) -> dict[str, Any] | None:
        context = request.context or {}
        respond = _script_load(str(context.get("plugin_id") or ""), context.get("plugin_root"))
        if respond is None:
            return None
        turn = {
            **{k: v for k, v in context.items() if k != "plugin_root"},
            "tools": [dict(t) for t in request.tools],
            "tool_choice": request.tool_choice,
            "tool_results": [
                {"name": m.get("name"), "content": _json_or_text(m.get("content"))} for m in _tool_results(request.messages)
            ],
            "messages": [dict(m) for m in request.messages],
        }
        reply = respond(turn)
        if reply is None:
            return None
        if not isinstance(reply, dict):
            raise TypeError(f"scripted.respond of {context.get('plugin_id')} returned {type(reply).__name__}, not dict")
        return reply

    def _default_reply(self, request: ModelRequest, tool_names: list[str]) -> dict[str, Any]:
        context = request.context or {}
        zh = _is_zh(context.get("locale"))
        if context.get("is_story"):
            return {"text": story_prose(context)}
        results = _tool_results(request.messages)
        business = [n for n in tool_names if n != RUNTIME_DONE]
        choice = request.tool_choice
        wanted: str | None = None
        if isinstance(choice, dict) and choice.get("name") in tool_names:
            wanted = choice["name"]
        elif not results:
            after = [n for n in (context.get("after_tools") or []) if n in tool_names]
            if after:
                wanted = after[0]
            elif (choice == "required" or context.get("require_tool_use")) and business:
                wanted = business[0]
        if wanted and not any(r.get("name") == wanted and not _is_error(r) for r in results):
            schema = next(t.get("parameters") for t in request.tools if t["name"] == wanted)
            return {"tool_calls": [{"name": wanted, "arguments": schema_sample(schema) or {}}]}
        if RUNTIME_DONE in tool_names:
            return {"tool_calls": [{"name": RUNTIME_DONE, "arguments": {}}]}
        return {"text": "完成。" if zh else "Done."}


def _delta_delay_seconds() -> float:
    raw = os.environ.get(DELTA_DELAY_ENV, "").strip()
    try:
        return max(0.0, float(raw) / 1000.0) if raw else 0.0
    except ValueError:
        logger.warning("%s=%r is not a number of milliseconds; ignored", DELTA_DELAY_ENV, raw)
        return 0.0


def _json_or_text(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _is_error(message: dict[str, Any]) -> bool:
    content = _json_or_text(message.get("content"))
    return isinstance(content, dict) and "error" in content

