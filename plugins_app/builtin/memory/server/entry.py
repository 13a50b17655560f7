"""memory entry module: the prompt.segment@1 provider, the memory.block-definitions@1 service and
the panel's actions (`list-blocks`, `edit-block`). Rules in blocks.py and PLUGIN.md."""

from __future__ import annotations

from typing import Any

from plugins_app.toolkit import INVALID_INPUT, NOT_FOUND

from . import blocks as B


def _definitions(data: dict[str, Any]) -> list[dict[str, Any]]:
    return B.definitions_effective((data.get(B.DEFINITIONS_NAMESPACE) or {}).get(B.WORLD_KEY))


def prompt_segment(context: dict[str, Any]) -> dict[str, Any]:
    """prompt.segment@1: ``{"text"}`` — the committed blocks for the story prompt."""
    data = context.get("pluginData") or {}
    return {"text": B.segment_text(_definitions(data), data.get(B.BLOCKS_NAMESPACE) or {}, context.get("locale"))}


def block_definitions(context: dict[str, Any], args: dict[str, Any] | None = None) -> dict[str, Any]:
    """memory.block-definitions@1 (read-only): ``{"blocks": [definition]}`` of this session."""
    return {"blocks": _definitions(context.get("pluginData") or {})}


def list_blocks(ctx, payload: dict[str, Any] | None = None) -> dict[str, Any]:
    """Action `list-blocks`: ``{definitions, blocks}`` (blocks by label)."""
    world = ctx.store.getPluginData(B.DEFINITIONS_NAMESPACE, B.WORLD_KEY)
    return {"definitions": B.definitions_effective(world), "blocks": ctx.store.listPluginData(B.BLOCKS_NAMESPACE)}


def edit_block(ctx, payload: dict[str, Any] | None = None) -> dict[str, Any]:
    """Action `edit-block` ``{label, content}``: replace one block's content (cut to its maxChars;
    '' clears it). Returns ``{"updated": true, "block"}``, or ``{"updated": false, "error": {code,
    message}}`` (code ``invalid-input`` for a bad payload, ``not-found`` for a label no definition
    has) with nothing written — the plugin-rpc route turns a raising handler into a bare 500."""
    payload = payload if isinstance(payload, dict) else {}
    label, content = payload.get("label"), payload.get("content")
    if not isinstance(label, str) or not isinstance(content, str):
        return {"updated": False, "error": {"code": INVALID_INPUT, "message": "payload: {label: string, content: string}"}}
    world = ctx.store.getPluginData(B.DEFINITIONS_NAMESPACE, B.WORLD_KEY)
    definition = next((d for d in B.definitions_effective(world) if d["label"] == label), None)
    if definition is None:
        return {"updated": False, "error": {"code": NOT_FOUND, "message": f"label: no memory block {label!r}"}}
    block = B.block_make(definition, content, getattr(ctx, "locale", None))
    ctx.store.setPluginData(B.BLOCKS_NAMESPACE, label, block)
    return {"updated": True, "block": block}


def register(api) -> None:
    """Called once by the plugin loader with the host registration API."""
    api.register_extension("prompt.segment@1", "memory", prompt_segment)
    api.register_service(B.SERVICE, block_definitions)
    api.register_rpc("list-blocks", list_blocks)
    api.register_rpc("edit-block", edit_block)
