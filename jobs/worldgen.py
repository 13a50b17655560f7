"""AI world generation (spec 004 POST /api/ai/generate-world).

Flow: the endpoint validates the body (400s before any stream), ``generation_start`` writes a
``WorldGeneration`` row and schedules the ``worldgen.generate_world`` task (queue ``worldgen``;
the in-process worker when embedded) after commit, and the response relays the row's frames as
SSE (``generation_stream``). The task (``generation_run``) asks the model for each part in order
— manifest, lore, then the brief's characters / lorebook / rules, then each contract — validating
each answer as it arrives (up to 3 requests per part), writes a world package into a hidden
staging folder, checks it with the package loader (``sessions.world_packages.world_package_load``)
and saves it per ``saveTarget``:

- ``server-file``: the package moves to ``COVEL_HOME/worlds/<id>`` (with ``.covel-generated.json``
  listing each written file and its SHA-256);
- ``server-store``: a ``sessions.World`` row (metadata.source "store", embeddedCharacters /
  embeddedLorebook carry the content, no worldData); the staging folder is removed;
- ``return-only``: nothing is written; the ``done`` frame carries the world.

Frames (``data: <json>\\n\\n``): ``{"type":"progress","phase":"generating"|"validating"|"saving",
"parts"?}``, then one ``{"type":"done","world",warnings?,usage?}`` or ``{"type":"error","message",
code?,usage?}``. Model calls go through the engine's ModelRouter (slot from llm.toml, fallback
chain); the offline ``scripted`` provider answers from ``jobs/worldgen_scripted/scripted.py``.
"""
from __future__ import annotations

import asyncio
import copy
import hashlib
import json
import logging
import re
import shutil
import threading
import time
import uuid
from pathlib import Path
from typing import Any, AsyncIterator

import jsonschema
import yaml
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import transaction

from jobs.config_services import llm_config_active
from covel.errors import ApiError
from covel.taskqueue import TASK_GENERATE_WORLD, task_send_on_commit
from jobs.models import WorldGeneration
from sessions import world_packages as wp
from sessions.worldpkg.dimensions import dimension_definition_validate
from sessions.worldpkg.files import locale_canonical
from covel import eventbus
from turns.engine.providers import config as llm
from turns.engine.providers.base import ModelError, ModelRequest, ModelResponse, TextDelta
from turns.engine.providers.openai_chat import OpenAIChatClient

logger = logging.getLogger("covel.worldgen")

SAVE_SERVER_FILE = "server-file"
SAVE_SERVER_STORE = "server-store"
SAVE_RETURN_ONLY = "return-only"
SAVE_TARGETS = (SAVE_SERVER_FILE, SAVE_SERVER_STORE, SAVE_RETURN_ONLY)
CONTENT_KINDS = ("characters", "lorebook", "rules", "opening-kit")
CONCEPT_MAX_CHARS = 4000
INSTRUCTIONS_MAX_CHARS = 2000
IDLE_TIMEOUT_MIN_MS = 1000
IDLE_TIMEOUT_MAX_MS = 1_800_000
IDLE_TIMEOUT_DEFAULT_MS = 120_000
DEFAULT_LOCALE = "zh-CN"
MAX_ATTEMPTS = 3
#: Least time between two progress frames that only report more characters (spec: 400 ms).
PROGRESS_INTERVAL_SECONDS = 0.4
#: Count targets of the brief's content (spec: 角色 3、资料库 4、规则 3).
TARGET_COUNTS = {"characters": 3, "lorebook": 4, "rules": 3}
OPENING_KIT_RESOURCES = 2  # spec: 开局资源 2
GENERATED_MARKER = ".covel-generated.json"
STAGING_PREFIX = ".covel-staging-"
SCRIPTED_ROOT = Path(__file__).resolve().parent / "worldgen_scripted"
SCRIPTED_ID = "covel-worldgen"
CODE_IDLE_TIMEOUT = "model_idle_timeout"
FRAME_DONE = "done"
FRAME_ERROR = "error"
FRAME_PROGRESS = "progress"
#: The relay gives up on a generation that wrote nothing for its idle timeout plus this long
#: (no worker on the queue, or the worker died).
STALL_GRACE_SECONDS = 120.0
RELAY_POLL_SECONDS = 0.25
KEEPALIVE_SECONDS = 15.0
KEEPALIVE_CHUNK = ": keep-alive\n\n"
_ENTRY_ID_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,79}$")
_CHARACTER_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,79}$")
_ADVENTURE_RE = re.compile(r"^\s*([123])\.\s+\S", re.MULTILINE)
_FENCE_RE = re.compile(r"```[a-zA-Z]*\n(.*?)```", re.DOTALL)
_publish_lock = threading.Lock()


# --------------------------------------------------------------------------------------------
# Request
# --------------------------------------------------------------------------------------------


def _bad(message: str) -> ApiError:
    return ApiError(400, None, message)


def generation_request_parse(body: dict[str, Any], *, contracts_catalog: dict[str, dict[str, Any]],
                             packs: dict[str, Any]) -> dict[str, Any]:
    """Validate a generate-world body; returns the normalized request (camelCase keys).

    contracts_catalog: contract id → authoring entry (only entries offering ``generate``);
    packs: pack id → PackSpec. Raises 400 (no code) with the spec's messages: concept required
    (≤ 4000 chars), saveTarget one of the three, idleTimeoutMs integer 1000–1800000, unknown pack,
    unknown content kind or contract, additionalInstructions ≤ 2000 chars.
    """
    concept = body.get("concept")
    if not isinstance(concept, str) or not concept.strip():
        raise _bad("concept (string) is required")
    if len(concept) > CONCEPT_MAX_CHARS:
        raise _bad(f"concept must be at most {CONCEPT_MAX_CHARS} characters")
    locale = locale_canonical(body.get("locale", DEFAULT_LOCALE))  # "en-us" → "en-US" (issue 21)
    if locale is None:
        raise _bad("locale must be a BCP 47 tag such as zh-CN")
    model = body.get("model")
    if model is not None and (not isinstance(model, str) or not model):
        raise _bad("model must be a non-empty string")
    save_target = body.get("saveTarget", SAVE_SERVER_FILE)
    if save_target not in SAVE_TARGETS:
        raise _bad('saveTarget must be "server-file", "server-store", or "return-only"')
    idle = body.get("idleTimeoutMs", IDLE_TIMEOUT_DEFAULT_MS)
    if isinstance(idle, bool) or not isinstance(idle, int) or not IDLE_TIMEOUT_MIN_MS <= idle <= IDLE_TIMEOUT_MAX_MS:
        raise _bad("idleTimeoutMs must be an integer from 1000 to 1800000")
    brief_raw = body.get("brief")
    brief: dict[str, Any] = {"content": [], "contracts": []}
    if brief_raw is not None:
        if not isinstance(brief_raw, dict):
            raise _bad("brief must be an object")
        pack = brief_raw.get("pack")
        if pack is not None:
            if not isinstance(pack, str) or pack not in packs:
                raise _bad(f"brief.pack is not a known pack: {pack}")
            brief["pack"] = pack
        content = brief_raw.get("content", [])
        if not isinstance(content, list) or any(c not in CONTENT_KINDS for c in content):
            raise _bad(f"brief.content items must be among {', '.join(CONTENT_KINDS)}")
        brief["content"] = list(dict.fromkeys(content))
        # Omitted contracts: the ones GET /api/framework/authoring marks `generate: default`.
        contracts = brief_raw.get("contracts", [c for c, e in contracts_catalog.items() if e.get("generate") == "default"])
        if not isinstance(contracts, list) or any(not isinstance(c, str) or c not in contracts_catalog for c in contracts):
            raise _bad("brief.contracts must name contracts offered for generation (GET /api/framework/authoring)")
        brief["contracts"] = list(dict.fromkeys(contracts))
        instructions = brief_raw.get("additionalInstructions")
        if instructions is not None:
            if not isinstance(instructions, str) or len(instructions) > INSTRUCTIONS_MAX_CHARS:
                raise _bad(f"brief.additionalInstructions must be a string of at most {INSTRUCTIONS_MAX_CHARS} characters")
            brief["additionalInstructions"] = instructions
    return {"concept": concept, "locale": locale, "model": model or llm.SLOT_STORY, "saveTarget": save_target,
            "idleTimeoutMs": idle, "brief": brief}


def contracts_catalog() -> dict[str, dict[str, Any]]:
    """Contracts offered for generation: authoring entries of loaded plugins with ``generate``."""
    from sessions.authoring import authoring
    from plugins_app.registry import plugin_registry

    return {c["contract"]: c for c in authoring(plugin_registry())["contracts"] if c.get("generate")}


def packs_catalog() -> dict[str, Any]:
    """The builtin play packs by id (plugins_app/packs/builtin.yaml)."""
    from sessions.world_services import PACKS_CATALOG

    packs, _issues = wp.packs_catalog_load(PACKS_CATALOG)
    return {p.id: p for p in packs}


def generation_busy() -> bool:
    """Whether a generation, revision or translation of this server is still running (spec 004:
    they share one mutex over the whole stream). A row nobody wrote for its idle timeout plus
    STALL_GRACE_SECONDS belongs to a dead worker and no longer counts. The database row is the
    mark, so every web process sees it."""
    from django.utils import timezone

    now = timezone.now()
    for updated_at, request in WorldGeneration.objects.filter(
            status__in=(WorldGeneration.STATUS_QUEUED, WorldGeneration.STATUS_RUNNING)).values_list("updated_at", "request"):
        idle_seconds = int((request or {}).get("idleTimeoutMs") or IDLE_TIMEOUT_DEFAULT_MS) / 1000
        if (now - updated_at).total_seconds() < idle_seconds + STALL_GRACE_SECONDS:
            return True
    return False


def generation_start(*, request: dict[str, Any]) -> WorldGeneration:
    """Write the generation row and schedule ``worldgen.generate_world`` after commit.
    429 operation_in_progress (before any model call) while another one runs."""
    with transaction.atomic():
        if generation_busy():
            raise ApiError(429, "operation_in_progress", "A world generation, revision or translation is running; retry when it ends")
        generation = WorldGeneration.objects.create(request=request)
        task_send_on_commit(TASK_GENERATE_WORLD, str(generation.id))
    return generation


# --------------------------------------------------------------------------------------------
# Frames
# --------------------------------------------------------------------------------------------


def generation_channel(generation_id: str) -> str:
    return f"worldgen:{generation_id}"


class _Abandoned(Exception):
    """The row is already terminal (the relay declared it stalled): stop without writing."""


def _frame_append(generation_id: str, frame: dict[str, Any], *, status: str | None = None, world_id: str = "") -> None:
    with transaction.atomic():
        row = WorldGeneration.objects.select_for_update().get(pk=generation_id)
        if row.status in (WorldGeneration.STATUS_DONE, WorldGeneration.STATUS_FAILED):
            raise _Abandoned()
        row.frames = [*row.frames, frame]
        fields = ["frames", "updated_at"]
        if status:
            row.status = status
            fields.append("status")
        if world_id:
            row.world_id = world_id
            fields.append("world_id")
        row.save(update_fields=fields)
    try:
        eventbus.publish(generation_channel(generation_id), {"frames": len(row.frames)})
    except Exception:  # the bus is a wake-up hint; the relay polls the row anyway
        logger.warning("worldgen %s: frame announcement failed", generation_id, exc_info=True)


def generation_fail_stalled(generation_id: str, message: str) -> None:
    """Close a generation nobody is writing: append the final error frame unless already terminal."""
    try:
        _frame_append(generation_id, {"type": FRAME_ERROR, "message": message}, status=WorldGeneration.STATUS_FAILED)
    except _Abandoned:
        pass


def frame_encode(frame: dict[str, Any]) -> str:
    return "data: " + json.dumps(frame, ensure_ascii=False, separators=(",", ":")) + "\n\n"


def _frames_read(generation_id: str) -> list[dict[str, Any]]:
    return list(WorldGeneration.objects.filter(pk=generation_id).values_list("frames", flat=True).first() or [])


async def generation_stream(generation_id: str, *, idle_timeout_ms: int) -> AsyncIterator[str]:
    """Relay a generation's frames as SSE chunks until its ``done`` / ``error`` frame.

    A client leaving only stops the relay. When nothing new arrives for ``idle_timeout_ms`` plus
    STALL_GRACE_SECONDS, the generation is closed with an error frame (no worker took it, or it died).
    """
    loop = asyncio.get_running_loop()
    wake = asyncio.Event()

    def on_message(_message: dict[str, Any]) -> None:
        try:
            loop.call_soon_threadsafe(wake.set)
        except RuntimeError:  # the loop is gone: the client left
            pass

    unsubscribe = await sync_to_async(eventbus.subscribe, thread_sensitive=False)(generation_channel(generation_id), on_message)
    read = sync_to_async(_frames_read)
    stall_seconds = idle_timeout_ms / 1000 + STALL_GRACE_SECONDS
    sent = 0
    last_progress = last_output = time.monotonic()
    try:
        while True:
            wake.clear()
            frames = await read(generation_id)
            now = time.monotonic()
            for frame in frames[sent:]:
                sent += 1
                last_progress = last_output = now
                yield frame_encode(frame)
                if frame.get("type") in (FRAME_DONE, FRAME_ERROR):
                    return
            if now - last_progress >= stall_seconds:
                await sync_to_async(generation_fail_stalled)(generation_id, "World generation stalled: no worker answered")
                last_progress = now
                continue
            if now - last_output >= KEEPALIVE_SECONDS:
                last_output = now
                yield KEEPALIVE_CHUNK
            try:
                await asyncio.wait_for(wake.wait(), timeout=RELAY_POLL_SECONDS)
            except asyncio.TimeoutError:
                pass
    finally:
        unsubscribe()


# --------------------------------------------------------------------------------------------
# Part validation (deterministic; each raises _Invalid with the reason)
# --------------------------------------------------------------------------------------------


class _Invalid(ValueError):
    pass


class _IdleTimeout(Exception):
    pass


def _structured(text: str) -> Any:
    match = _FENCE_RE.search(text)
    body = match.group(1) if match else text
    try:
        return yaml.safe_load(body)
    except yaml.YAMLError as exc:
        raise _Invalid(f"the answer is not YAML/JSON: {exc.__class__.__name__}") from None


def _text_field(data: dict[str, Any], key: str, part: str, limit: int = 4000) -> str:
    value = data.get(key)
    if not isinstance(value, str) or not value.strip():
        raise _Invalid(f"{part}: {key} (string) is required")
    return value.strip()[:limit]


def _is_numeric(definition: Any) -> bool:
    schema = definition.get("schema") if isinstance(definition, dict) else None
    return isinstance(schema, dict) and schema.get("type") in ("integer", "number")


def manifest_check(text: str, warnings: list[str], *, opening_kit: bool = False) -> dict[str, Any]:
    """{id, name, summary, tags, dimensions} from the manifest answer; invalid dimensions are
    dropped one by one with a warning (spec: 无法通过校验的维度被单独丢弃). With ``opening_kit``
    (brief.content "opening-kit") the kit lives in the dimensions: numeric starting-resource
    dimensions (target 2; a warning below it) and a ``startingConditions`` dimension with the
    opening choices; an answer with neither is rejected (and asked again)."""
    data = _structured(text)
    if not isinstance(data, dict):
        raise _Invalid("manifest: the answer must be a mapping")
    world_id = data.get("id")
    if not isinstance(world_id, str) or not wp.WORLD_ID_RE.match(world_id):
        raise _Invalid("manifest: id must be lowercase letters, digits and hyphens, starting with a letter")
    tags = data.get("tags") or []
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise _Invalid("manifest: tags must be a list of strings")
    dimensions: dict[str, Any] = {}
    raw_dims = data.get("dimensions") or {}
    if not isinstance(raw_dims, dict):
        raise _Invalid("manifest: dimensions must be a mapping of dimension id to definition")
    for dim_id, definition in raw_dims.items():
        issues = dimension_definition_validate(str(dim_id), definition, field_prefix="dimensions.")
        if issues:
            first = issues[0]
            warnings.append(f'dropped dimension "{dim_id}": {first.field or dim_id}: {first.message}')
            continue
        dimensions[str(dim_id)] = definition
    if opening_kit:
        resources = [d for d in dimensions.values() if _is_numeric(d)]
        if not resources and "startingConditions" not in dimensions:
            raise _Invalid("manifest: the brief asks for an opening kit: numeric startingResources dimensions and "
                           "startingConditions")
        if len(resources) < OPENING_KIT_RESOURCES:
            warnings.append(f"opening kit has {len(resources)} numeric resource dimensions; the brief asks for {OPENING_KIT_RESOURCES}")
        if "startingConditions" not in dimensions:
            warnings.append("opening kit has no startingConditions dimension")
    return {"id": world_id, "name": _text_field(data, "name", "manifest", 200),
            "summary": _text_field(data, "summary", "manifest"), "tags": list(dict.fromkeys(tags)),
            "dimensions": dimensions}


def lore_check(text: str) -> str:
    """WORLD.md: non-empty Markdown with the three adventure entries numbered 1. 2. 3."""
    lore = _FENCE_RE.sub(lambda m: m.group(1), text).strip() if text.strip().startswith("```") else text.strip()
    if not lore:
        raise _Invalid("lore: the answer is empty")
    numbers = {m.group(1) for m in _ADVENTURE_RE.finditer(lore)}
    if numbers != {"1", "2", "3"}:
        raise _Invalid("lore: the three adventure entries must start with 1. 2. and 3.")
    return lore + "\n"


def characters_check(text: str) -> list[dict[str, Any]]:
    """Records {id, name, type: player|npc, description, fields?}; at most one player, unique ids."""
    data = _structured(text)
    if not isinstance(data, list) or not data:
        raise _Invalid("characters: the answer must be a non-empty list")
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for index, item in enumerate(data):
        if not isinstance(item, dict):
            raise _Invalid(f"characters[{index}] must be a mapping")
        cid = item.get("id")
        if not isinstance(cid, str) or not _CHARACTER_ID_RE.match(cid) or cid in seen:
            raise _Invalid(f"characters[{index}].id must be a unique id")
        seen.add(cid)
        kind = item.get("type", "npc")
        if kind not in ("player", "npc"):
            raise _Invalid(f"characters[{index}].type must be player or npc")
        record = {"id": cid, "name": _text_field(item, "name", f"characters[{index}]", 120), "type": kind,
                  "description": _text_field(item, "description", f"characters[{index}]")}
        if isinstance(item.get("fields"), dict):
            record["fields"] = item["fields"]
        out.append(record)
    if sum(1 for c in out if c["type"] == "player") > 1:
        raise _Invalid("characters: only one character can be the player")
    return out


def entries_check(text: str, kind: str, taken: set[str]) -> list[dict[str, Any]]:
    """Lorebook entries {id, keys, content, title?} or rules {id, title, content}; ids are new in
    the lorebook/rules namespace (``taken``)."""
    data = _structured(text)
    if not isinstance(data, list) or not data:
        raise _Invalid(f"{kind}: the answer must be a non-empty list")
    out: list[dict[str, Any]] = []
    seen = set(taken)
    for index, item in enumerate(data):
        if not isinstance(item, dict):
            raise _Invalid(f"{kind}[{index}] must be a mapping")
        eid = item.get("id")
        if not isinstance(eid, str) or not _ENTRY_ID_RE.match(eid) or eid in seen:
            raise _Invalid(f"{kind}[{index}].id must be a new lowercase id")
        seen.add(eid)
        entry: dict[str, Any] = {"id": eid, "content": _text_field(item, "content", f"{kind}[{index}]")}
        if kind == "rules":
            entry["title"] = _text_field(item, "title", f"{kind}[{index}]", 200)
            entry["keys"] = [entry["title"]]
            entry["constant"] = True
            entry["tags"] = ["rule"]
        else:
            keys = item.get("keys")
            if not isinstance(keys, list) or not keys or not all(isinstance(k, str) and k for k in keys):
                raise _Invalid(f"{kind}[{index}].keys must be a non-empty list of strings")
            entry["keys"] = keys
            if isinstance(item.get("title"), str):
                entry["title"] = item["title"]
        out.append(entry)
    return out


def contract_check(text: str, contract: dict[str, Any]) -> Any:
    """Contract data (JSON/YAML) validated against the contract's JSON Schema when it has one."""
    data = _structured(text)
    if data is None:
        raise _Invalid(f"contract:{contract['contract']}: the answer is empty")
    schema = contract.get("schema")
    if isinstance(schema, dict):
        try:
            jsonschema.validate(data, schema)
        except jsonschema.ValidationError as exc:
            raise _Invalid(f"contract:{contract['contract']}: {exc.message}") from None
        except jsonschema.SchemaError:
            logger.warning("worldgen: contract %s has an invalid schema; data kept unvalidated", contract["contract"])
    return data


# --------------------------------------------------------------------------------------------
# Prompts
# --------------------------------------------------------------------------------------------

_PART_INSTRUCTIONS = {
    "manifest": "Write the world manifest as YAML with keys: id (lowercase letters, digits, hyphens), name, summary, "
                "tags (list), dimensions (mapping id -> {name, description, schema (JSON Schema subset), initialValue, "
                "updateRule}).",
    "opening-kit": "Opening kit: among the dimensions, at least 2 numeric starting resources (integer or number "
                   "schema) and a startingConditions dimension (object: openingScenario, startingLocation, "
                   "openingChoices list) with concrete opening choices.",
    "lore": "Write WORLD.md in Markdown: the setting, its tensions, and a section of exactly three adventure entries "
            "starting with '1. ', '2. ' and '3. '.",
    "characters": "Write the main characters as a YAML list of {id, name, type (player or npc), description}. "
                  "At most one player. Aim for 3.",
    "lorebook": "Write lorebook entries as a YAML list of {id, keys (list of trigger words), content}. Aim for 4.",
    "rules": "Write world rules as a YAML list of {id, title, content}. Ids must differ from lorebook ids. Aim for 3.",
}


def _messages(part: str, job: dict[str, Any], accepted: dict[str, Any], contract: dict[str, Any] | None,
              retry_reason: str | None) -> list[dict[str, Any]]:
    brief = job["brief"]
    if contract is not None:
        instruction = (f"Write data for contract {contract['contract']} ({contract.get('title') or ''}) as JSON. "
                       f"Hint: {contract.get('hint') or ''}\nSchema: {json.dumps(contract.get('schema'), ensure_ascii=False)}")
    else:
        instruction = _PART_INSTRUCTIONS[part]
        if part == "manifest" and "opening-kit" in brief.get("content", []):
            instruction += "\n" + _PART_INSTRUCTIONS["opening-kit"]
    system = ("You write one part of a world package for an interactive fiction engine. "
              f"Write in the language of locale {job['locale']}. Reuse ids of already accepted parts when you refer "
              "to them; never define an id twice. Answer with the part only.")
    user = [f"Concept: {job['concept']}", f"Part: {part}", instruction]
    if brief.get("additionalInstructions"):
        user.append(f"Additional instructions: {brief['additionalInstructions']}")
    if accepted:
        user.append("Accepted parts:\n" + yaml.safe_dump(accepted, allow_unicode=True, sort_keys=False))
    if retry_reason:
        user.append(f"The previous answer was rejected: {retry_reason}. Write the part again.")
    return [{"role": "system", "content": system}, {"role": "user", "content": "\n\n".join(user)}]


# --------------------------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------------------------


class _Run:
    """One generation: parts state, frames, model calls and usage."""

    def __init__(self, generation: WorldGeneration) -> None:
        self.id = str(generation.id)
        self.job = generation.request
        self.parts: list[dict[str, Any]] = []
        self.usage = {"inputTokens": 0, "outputTokens": 0, "requests": 0}
        self.has_usage = False
        self.warnings: list[str] = []
        self.accepted: dict[str, Any] = {}
        self._last_chars_frame = 0.0
        config, _ = llm_config_active()
        slot, model = llm.slot_for_runtime(config=config, runtime_id="worldgen", is_story=True, request_model=self.job["model"])
        self.slot, self.model = slot, model
        idle = int(self.job["idleTimeoutMs"])
        clients = {}
        if slot.provider != llm.PROVIDER_SCRIPTED and slot.protocol in llm.PROTOCOLS and slot.endpoint:
            clients[f"{slot.provider}|{slot.base_url or ''}"] = OpenAIChatClient(base_url=slot.endpoint, idle_timeout_ms=idle)
        self.router = llm.ModelRouter(config, clients=clients)

    # frames
    def emit(self, frame: dict[str, Any], *, status: str | None = None, world_id: str = "") -> None:
        _frame_append(self.id, frame, status=status, world_id=world_id)

    def progress(self, *, phase: str = "generating", with_parts: bool = True) -> None:
        frame: dict[str, Any] = {"type": FRAME_PROGRESS, "phase": phase}
        if with_parts and phase == "generating":
            frame["parts"] = copy.deepcopy(self.parts)
        self.emit(frame)

    def part(self, part_id: str) -> dict[str, Any]:
        return next(p for p in self.parts if p["id"] == part_id)

    def usage_out(self) -> dict[str, Any] | None:
        return dict(self.usage) if self.has_usage else None

    # model
    def ask(self, part_id: str, attempt: int, *, contract: dict[str, Any] | None, retry_reason: str | None) -> str:
        state = self.part(part_id)
        state.update({"state": "active", "attempt": attempt, "chars": 0})
        self.progress()
        context = {"plugin_id": SCRIPTED_ID, "plugin_root": str(SCRIPTED_ROOT), "is_story": False, "runtime_id": "worldgen",
                   "locale": self.job["locale"],
                   "worldgen": {"part": part_id, "concept": self.job["concept"], "locale": self.job["locale"],
                                "brief": self.job["brief"], "accepted": copy.deepcopy(self.accepted), "contract": contract}}
        request = ModelRequest(messages=_messages(part_id, self.job, self.accepted, contract, retry_reason), context=context)
        chunks: list[str] = []
        response: ModelResponse | None = None
        try:
            for item in self.router.stream(self.slot, self.model, request):
                if isinstance(item, TextDelta):
                    chunks.append(item.text)
                    state["chars"] += len(item.text)
                    now = time.monotonic()
                    if now - self._last_chars_frame >= PROGRESS_INTERVAL_SECONDS:
                        self._last_chars_frame = now
                        self.progress()
                elif isinstance(item, ModelResponse):
                    response = item
        except ModelError as exc:
            if exc.code == "idle_timeout":
                raise _IdleTimeout(exc.message) from None
            raise
        if response is not None:
            self.has_usage = True
            self.usage["inputTokens"] += response.usage.input_tokens
            self.usage["outputTokens"] += response.usage.output_tokens
            self.usage["requests"] += 1
        text = response.text if response is not None and response.text else "".join(chunks)
        state["chars"] = len(text)
        return text

    def generate(self, part_id: str, check, *, contract: dict[str, Any] | None = None) -> Any:
        """Ask up to MAX_ATTEMPTS times; returns the checked value. Raises _Invalid (last reason),
        _IdleTimeout or ModelError."""
        reason: str | None = None
        for attempt in range(1, MAX_ATTEMPTS + 1):
            text = self.ask(part_id, attempt, contract=contract, retry_reason=reason)
            try:
                value = check(text)
            except _Invalid as exc:
                reason = str(exc)
                logger.info("worldgen %s: %s attempt %s rejected: %s", self.id, part_id, attempt, reason)
                continue
            self.part(part_id)["state"] = "done"
            self.progress()
            return value
        self.part(part_id)["state"] = "failed"
        self.progress()
        raise _Invalid(reason or f"{part_id}: no valid answer")


def generation_run(generation_id: str, *, runners: dict[str, Any] | None = None) -> str | None:
    """The task body. Claims a queued generation (a second delivery finds it claimed and exits),
    runs it and writes its final frame. Never raises for model or content failures. Returns the
    generation's status afterwards (None when this delivery did not claim it).

    ``runners``: request ``operation`` → ``runner(run)`` for the other world operations sharing the
    queue and the frames (``translate``: jobs.worldgen_translate, ``revise``: jobs.worldgen_revise;
    passed by the task so this module imports neither)."""
    claimed = WorldGeneration.objects.filter(pk=generation_id, status=WorldGeneration.STATUS_QUEUED).update(
        status=WorldGeneration.STATUS_RUNNING)
    if not claimed:
        return None
    generation = WorldGeneration.objects.get(pk=generation_id)
    run = _Run(generation)
    try:
        operation = (generation.request or {}).get("operation")
        runner = (runners or {}).get(operation) if operation else None
        if operation and runner is None:
            raise RuntimeError(f"no runner for world operation {operation!r}")
        (runner or _generate)(run)
    except _Abandoned:
        logger.warning("worldgen %s: closed by the relay before it finished", generation_id)
    except Exception:
        logger.exception("worldgen %s failed", generation_id)
        try:
            run.emit(_error_frame(run, "World generation failed; check the model configuration or the server log"),
                     status=WorldGeneration.STATUS_FAILED)
        except _Abandoned:
            pass
    return WorldGeneration.objects.filter(pk=generation_id).values_list("status", flat=True).first()


def _error_frame(run: _Run, message: str, code: str | None = None) -> dict[str, Any]:
    frame: dict[str, Any] = {"type": FRAME_ERROR, "message": message}
    if code:
        frame["code"] = code
    if run.usage_out():
        frame["usage"] = run.usage_out()
    return frame


def _fail(run: _Run, message: str, code: str | None = None) -> None:
    run.emit(_error_frame(run, message, code), status=WorldGeneration.STATUS_FAILED)


def _generate(run: _Run) -> None:
    job = run.job
    brief = job["brief"]
    catalog = contracts_catalog() if brief["contracts"] else {}
    kinds = [k for k in brief["content"] if k in TARGET_COUNTS]
    part_ids = ["manifest", "lore", *kinds, *[f"contract:{c}" for c in brief["contracts"]]]
    for part_id in part_ids:
        entry: dict[str, Any] = {"id": part_id, "state": "pending"}
        if part_id.startswith("contract:"):
            title = (catalog.get(part_id[len("contract:"):]) or {}).get("title")
            if isinstance(title, str):
                entry["title"] = title
        run.parts.append(entry)
    run.emit({"type": FRAME_PROGRESS, "phase": "generating"})
    run.progress()
    # Required parts: a failure ends the generation.
    try:
        dimension_warnings: list[str] = []

        def check_manifest(text: str) -> dict[str, Any]:
            found: list[str] = []
            value = manifest_check(text, found, opening_kit="opening-kit" in brief["content"])
            dimension_warnings[:] = found  # only the accepted answer's drops count
            return value

        manifest = run.generate("manifest", check_manifest)
        run.warnings.extend(dimension_warnings)
        run.accepted["manifest"] = manifest
        lore = run.generate("lore", lore_check)
    except _IdleTimeout as exc:
        _fail(run, f"The model sent nothing for {job['idleTimeoutMs']} ms: {exc}", CODE_IDLE_TIMEOUT)
        return
    except _Invalid as exc:
        _fail(run, f"The model's answer failed validation: {exc}")
        return
    except ModelError as exc:
        logger.warning("worldgen %s: model error %s: %s", run.id, exc.code, exc.message)
        _fail(run, "The model request failed; check the model configuration or the server log")
        return
    # Optional parts: a failure leaves the part out with a warning; after an idle timeout the
    # later parts are not requested (spec 004 等待时间).
    content: dict[str, Any] = {}
    contracts: dict[str, Any] = {}
    stopped = False
    for part_id in part_ids[2:]:
        if stopped:
            run.warnings.append(f"{part_id} was not requested: the model stopped answering")
            continue
        try:
            if part_id == "characters":
                content["characters"] = run.generate(part_id, characters_check)
                run.accepted["characters"] = content["characters"]
            elif part_id in ("lorebook", "rules"):
                taken = {e["id"] for e in content.get("lorebook", []) + content.get("rules", [])}
                content[part_id] = run.generate(part_id, lambda text, k=part_id, t=taken: entries_check(text, k, t))
                run.accepted[part_id] = content[part_id]
            else:
                contract = catalog[part_id[len("contract:"):]]
                contracts[contract["contract"]] = run.generate(part_id, lambda text, c=contract: contract_check(text, c),
                                                               contract=_contract_context(contract))
        except _IdleTimeout:
            run.part(part_id)["state"] = "failed"
            run.progress()
            run.warnings.append(f"{part_id} could not be generated: the model stopped answering")
            stopped = True
        except (_Invalid, ModelError) as exc:
            run.part(part_id)["state"] = "failed"
            reason = str(exc) if isinstance(exc, _Invalid) else "the model request failed"
            run.warnings.append(f"{part_id} could not be generated: {reason}")
        else:
            target = TARGET_COUNTS.get(part_id)
            count = len(content.get(part_id, []))
            if target and count < target:
                run.warnings.append(f"generated {count} {part_id} entries; the brief asks for {target}")
    run.emit({"type": FRAME_PROGRESS, "phase": "validating"})
    staging = _staging_write(manifest=manifest, lore=lore, content=content, contracts=contracts, catalog=catalog, job=job)
    try:
        package = wp.world_package_load(staging, source=wp.SOURCE_USER, expected_id=manifest["id"])
        if not package.ok:
            errors = [f"{i.file or ''}{(':' + i.field) if i.field else ''}: {i.message}" for i in package.issues if i.severity == "error"]
            _fail(run, "The generated world package is invalid: " + "; ".join(errors[:5]))
            return
        run.emit({"type": FRAME_PROGRESS, "phase": "saving"})
        world, failure = _save(package, staging, job["saveTarget"])
        if failure:
            _fail(run, failure)
            return
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    done: dict[str, Any] = {"type": FRAME_DONE, "world": world}
    if run.warnings:
        done["warnings"] = run.warnings
    if run.usage_out():
        done["usage"] = run.usage_out()
    run.emit(done, status=WorldGeneration.STATUS_DONE, world_id=world["id"])


def _contract_context(contract: dict[str, Any]) -> dict[str, Any]:
    return {k: contract.get(k) for k in ("contract", "title", "hint", "schema", "example")}


# --------------------------------------------------------------------------------------------
# Package and saving
# --------------------------------------------------------------------------------------------


def _dump_yaml(value: Any) -> str:
    return yaml.safe_dump(value, allow_unicode=True, sort_keys=False)


def _staging_write(*, manifest, lore, content, contracts, catalog, job) -> Path:
    """Write the package into a hidden folder of the user worlds directory; returns its path."""
    worlds_dir = wp.user_worlds_dir(settings.COVEL_HOME)
    worlds_dir.mkdir(parents=True, exist_ok=True)
    root = worlds_dir / f"{STAGING_PREFIX}{uuid.uuid4().hex[:12]}"
    files: dict[str, str] = {}
    world_yaml: dict[str, Any] = {"schemaVersion": "1.0", "id": manifest["id"], "name": manifest["name"], "version": "0.1.0",
                                  "summary": manifest["summary"], "defaultLocale": job["locale"],
                                  "supportedLocales": [job["locale"]], "tags": manifest["tags"]}
    pack_id = job["brief"].get("pack")
    if pack_id:
        world_yaml["pluginPolicy"] = {"presetId": pack_id}
        pack = packs_catalog().get(pack_id)
        if pack is not None and pack.default_view_mode:
            world_yaml["defaultViewMode"] = pack.default_view_mode
    files[wp.WORLD_FILE] = _dump_yaml(world_yaml)
    files[wp.LORE_FILE] = lore
    if manifest["dimensions"]:
        files["data/dimensions.yaml"] = _dump_yaml(manifest["dimensions"])
    if content.get("characters"):
        files["characters/characters.json"] = json.dumps(content["characters"], ensure_ascii=False, indent=2) + "\n"
    entries = content.get("lorebook", []) + content.get("rules", [])
    if entries:
        files["data/lorebook.yaml"] = _dump_yaml(entries)
    if contracts:
        sources: dict[str, Any] = {}
        if manifest["dimensions"]:
            sources["dimensions"] = {"kind": "yaml", "path": "data/dimensions.yaml", "schema": "covel://world/dimensions",
                                     "to": wp.DIMENSIONS_TARGET}
        if entries:
            sources["lore"] = {"kind": "yaml", "path": "data/lorebook.yaml", "to": "lorebook", "key": "id"}
        if content.get("characters"):
            sources["characters"] = {"kind": "json", "path": "characters/characters.json", "to": "characters", "key": "id"}
        for contract_id, data in contracts.items():
            source = catalog[contract_id].get("source") or {}
            source_entry = dict(source.get("entry") or {})
            path = source_entry.get("path") or f"data/{contract_id.split('@')[0]}.json"
            source_entry.setdefault("kind", "json" if path.endswith(".json") else "yaml")
            source_entry.update({"path": path, "schema": f"contract:{contract_id}", "to": f"contract:{contract_id}"})
            sources[source.get("id") or contract_id.split("@")[0].replace(".", "-")] = source_entry
            files[path] = (json.dumps(data, ensure_ascii=False, indent=2) + "\n") if path.endswith(".json") else _dump_yaml(data)
        files[wp.DESCRIPTOR_DEFAULT] = _dump_yaml({"schemaVersion": 1, "sources": sources})
    for rel, text in files.items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    marker = {"generator": "covel", "files": {rel: "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()
                                              for rel, text in sorted(files.items())}}
    (root / GENERATED_MARKER).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")
    return root


def _storage(backend: str) -> dict[str, Any]:
    return {"scope": "server", "backend": backend, "durable": True}


def _record_metadata(package: wp.WorldPackage) -> dict[str, Any]:
    meta = package.record_metadata()
    for key in ("worldData", "worldDataPath", "packageDigest"):
        meta.pop(key, None)
    meta["generated"] = True
    return meta


def _save(package: wp.WorldPackage, staging: Path, save_target: str) -> tuple[dict[str, Any], str | None]:
    """(WorldRecord for the done frame, failure message or None)."""
    from sessions import world_selectors
    from sessions.models import World

    record = package.record()
    if save_target == SAVE_RETURN_ONLY:
        return {**record, "metadata": _record_metadata(package)}, None
    with _publish_lock:
        if world_selectors.world_get(package.id) is not None:
            return {}, f"world already exists: {package.id}"
        if save_target == SAVE_SERVER_FILE:
            target = wp.user_worlds_dir(settings.COVEL_HOME) / package.id
            try:
                staging.rename(target)
            except OSError:
                return {}, f"world already exists: {package.id}"
            view = world_selectors.world_get(package.id)
            saved = copy.deepcopy(view.record) if view is not None else record
            saved["metadata"].update({"generated": True, "storage": _storage("file")})
            return saved, None
        meta = _record_metadata(package)
        meta.update({"source": "store", "storage": _storage(settings.STORE_BACKEND), "packageManaged": False})
        with transaction.atomic():
            if World.objects.filter(pk=package.id).exists():
                return {}, f"world already exists: {package.id}"
            row = World.objects.create(id=package.id, name=package.name, metadata=meta, package={
                "description": package.summary, "locale": package.default_locale, "lore": package.lore})
        return world_selectors.row_record(row), None
