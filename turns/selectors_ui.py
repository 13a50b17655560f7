"""Session UI projections (spec 004 §Session UI projections, GET /api/sessions/:id/ui-slots): the value
each UI slot should show now. Slot names are contract-like; the host knows each one (UI_SLOT_NAMES).

Where a value comes from, per slot:

1. A plugin provider: an extension ``{point: "ui.slot@1", id, slot, order?}`` of one of the session's
   active plugins whose code is granted, with a provider registered for it
   (``api.register_extension("ui.slot@1", id, provider)``). Providers are asked in extension order;
   each gets 500 ms (plugins_app/extensions.py) and a failing or late one is skipped. A provider is
   called with ``{sessionId, pluginId, point, slot, key, pluginData}`` (``pluginData``: its plugin's
   committed rows of the namespaces the extension ``watch``es) and answers ``{value}``, or for a
   keyed slot ``{items: [{key, value}]}``; an answer without ``value`` passes the slot to the next
   provider. ``stage.cast@1``, ``stage.backdrop@1``, ``stage.dialogue@1`` and ``stage.music@1`` have
   providers only (scene-stage, soundtrack): null when none answers.
2. Otherwise the host's own projection of committed data, computed on every read:

   - ``stage.choices@1``: the quick replies stage mode offers, from the newest committed output of a
     runtime whose output contract is ``scene-prompts@1`` (found by contract, never by plugin id):
     ``{turnId, scene?, decision?, prompts: [{text, kind}]}``; null before one exists.
   - ``character.visual@1``, keyed by character id: ``{characterId, name, type, image}`` (``image``:
     the character's ``avatar`` / ``portrait`` / ``image`` field when it is a string, else null).

A key that names nothing (removed, or never there) is ``value: null``. Each snapshot is ``{slot,
key?, value, revision}``; ``revision`` is a digest of the value (equal values, equal revisions; it is
not a counter).
"""
from __future__ import annotations

import hashlib
import json
from typing import Any

from plugins_app.extensions import ExtensionFailed, extension_call, extension_providers
from plugins_app.models import PluginData
from sessions.errors import InvalidRequest
from sessions.grants import plugins_code_granted
from sessions.models import Character
from sessions.selectors import runnable_plugins
from sessions.world_data_contracts import HIDDEN_NAMESPACE_PREFIX
from turns.engine.runtime import STATUS_SUCCESS
from turns.models import RuntimeOutput

SLOT_STAGE_CHOICES = "stage.choices@1"
SLOT_CHARACTER_VISUAL = "character.visual@1"
#: Stage slots only plugin providers fill (scene-stage: cast, backdrop, dialogue; soundtrack: music);
#: without a provider that answers, their value is null.
SLOT_STAGE_CAST = "stage.cast@1"
SLOT_STAGE_BACKDROP = "stage.backdrop@1"
SLOT_STAGE_DIALOGUE = "stage.dialogue@1"
SLOT_STAGE_MUSIC = "stage.music@1"
PROVIDED_SLOTS = (SLOT_STAGE_CAST, SLOT_STAGE_BACKDROP, SLOT_STAGE_DIALOGUE, SLOT_STAGE_MUSIC)
UI_SLOT_NAMES = (SLOT_STAGE_CHOICES, SLOT_CHARACTER_VISUAL, *PROVIDED_SLOTS)
KEYED_SLOTS = frozenset({SLOT_CHARACTER_VISUAL})
UI_SLOT_POINT = "ui.slot@1"
SCENE_PROMPTS_CONTRACT = "scene-prompts@1"
IMAGE_FIELDS = ("avatar", "portrait", "image")
UNKNOWN_UI_SLOT = "unknown_ui_slot"
REVISION_HEX_CHARS = 16


def revision_of(value: Any) -> str:
    """The revision of a slot value: a digest of its canonical JSON."""
    canonical = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:REVISION_HEX_CHARS]


def _snapshot(slot: str, value: Any, key: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"slot": slot}
    if key is not None:
        out["key"] = key
    out["value"] = value
    out["revision"] = revision_of(value)
    return out


def _stage_choices(session, registry) -> Any:
    runnable, _ = runnable_plugins(session, registry)
    runtime_ids = [runtime.id for plugin_id in runnable for runtime in registry.get(plugin_id).manifest.runtimes
                   if runtime.output_contract == SCENE_PROMPTS_CONTRACT]
    if not runtime_ids:
        return None
    row = (RuntimeOutput.objects.filter(session=session, runtime_id__in=runtime_ids, status=STATUS_SUCCESS)
           .order_by("-created_at", "-id").first())
    results = (row.output or {}).get("results") if row is not None and isinstance(row.output, dict) else None
    structured = results[0].get("structured") if isinstance(results, list) and results and isinstance(results[0], dict) else None
    if not isinstance(structured, dict) or not isinstance(structured.get("prompts"), list):
        return None
    prompts = [{"text": p["text"], "kind": p.get("kind")} for p in structured["prompts"]
               if isinstance(p, dict) and isinstance(p.get("text"), str)]
    value: dict[str, Any] = {"turnId": row.turn_id}
    for name in ("scene", "decision"):
        if isinstance(structured.get(name), str):
            value[name] = structured[name]
    value["prompts"] = prompts
    return value


def _character_visual(character: Character) -> dict[str, Any]:
    fields = character.fields if isinstance(character.fields, dict) else {}
    image = next((fields[name] for name in IMAGE_FIELDS if isinstance(fields.get(name), str) and fields[name]), None)
    return {"characterId": character.character_id, "name": character.name, "type": character.type, "image": image}


def _watched_data(session, provider) -> dict[str, dict[str, Any]]:
    """The provider plugin's committed data of the namespaces its extension ``watch``es (hidden
    namespaces never): ``{namespace: {key: value}}``; empty without ``watch``."""
    watch = [ns for ns in provider.declaration.get("watch") or []
             if isinstance(ns, str) and not ns.startswith(HIDDEN_NAMESPACE_PREFIX)]
    out: dict[str, dict[str, Any]] = {ns: {} for ns in watch}
    if watch:
        for namespace, key, value in (PluginData.objects.filter(session=session, plugin_id=provider.plugin_id, namespace__in=watch)
                                      .order_by("id").values_list("namespace", "key", "value")):
            out[namespace][key] = value
    return out


def _provided(session, providers, slot: str, key: str | None) -> list[tuple[str | None, Any]] | None:
    """[(key, value)] from the first provider of ``slot`` that answers well, or None."""
    for provider in providers:
        if provider.declaration.get("slot") != slot:
            continue
        try:
            answer = extension_call(provider, {"sessionId": session.pk, "pluginId": provider.plugin_id,
                                               "point": UI_SLOT_POINT, "slot": slot, "key": key,
                                               "pluginData": _watched_data(session, provider)})
        except ExtensionFailed:
            continue
        if slot not in KEYED_SLOTS:
            if "value" in answer:
                return [(None, answer["value"])]
            continue
        items = answer.get("items")
        if not isinstance(items, list) or not all(isinstance(i, dict) and isinstance(i.get("key"), str) for i in items):
            continue
        values = {i["key"]: i.get("value") for i in items}
        return [(key, values.get(key))] if key is not None else list(values.items())
    return None


def _projected(session, registry, slot: str, key: str | None) -> list[tuple[str | None, Any]]:
    if slot in PROVIDED_SLOTS:
        return [(None, None)]
    if slot == SLOT_STAGE_CHOICES:
        return [(None, _stage_choices(session, registry))]
    characters = Character.objects.filter(session=session).order_by("created_at", "id")
    if key is not None:
        found = characters.filter(character_id=key).first()
        return [(key, _character_visual(found) if found else None)]
    return [(c.character_id, _character_visual(c)) for c in characters]


def ui_slots(session, registry, *, prefix: str | None = None, slot: str | None = None,
             key: str | None = None) -> list[dict[str, Any]]:
    """GET /api/sessions/:id/ui-slots items: every known slot (keyed slots once per key), narrowed by
    ``prefix`` (slot names starting with it), ``slot`` (one exact name; 400 unknown_ui_slot when the
    host has no such slot) and ``key`` (only keyed slots, only that key, null when it names nothing)."""
    if slot is not None and slot not in UI_SLOT_NAMES:
        raise InvalidRequest(code=UNKNOWN_UI_SLOT, message=f"Unknown UI slot: {slot}; known: {', '.join(UI_SLOT_NAMES)}")
    names = [n for n in UI_SLOT_NAMES if (slot is None or n == slot) and (prefix is None or n.startswith(prefix))]
    if key is not None:
        names = [n for n in names if n in KEYED_SLOTS]
    if not names:
        return []
    runnable, _ = runnable_plugins(session, registry)
    providers = extension_providers(registry, plugins_code_granted(session, registry, runnable), UI_SLOT_POINT)
    items: list[dict[str, Any]] = []
    for name in names:
        values = _provided(session, providers, name, key)
        if values is None:
            values = _projected(session, registry, name, key)
        items.extend(_snapshot(name, value, item_key) for item_key, value in values)
    return items
