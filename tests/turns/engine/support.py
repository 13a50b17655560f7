"""Helpers for engine tests: write small plugin packages into a temp dir, build a registry from
them, create sessions and executions."""

from __future__ import annotations

import textwrap
import uuid
from pathlib import Path

from plugins_app.registry import registry_build
from sessions.models import Session
from turns.models import Execution


def plugin_write(root: Path, plugin_id: str, manifest: str, files: dict[str, str] | None = None) -> Path:
    folder = root / plugin_id
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "PLUGIN.md").write_text(textwrap.dedent(manifest).lstrip(), encoding="utf-8")
    for rel, text in (files or {}).items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    return folder


def registry_from(root: Path):
    registry = registry_build(builtin_dir=root, community_dir=None)
    broken = {r.id: r.error for r in registry.all() if not r.is_loaded}
    assert not broken, broken
    return registry


def session_create(*, plugins: list[str], locale: str = "en-US", phase: str = "playing", world_id: str = "", **extra) -> Session:
    return Session.objects.create(
        id=f"s-{uuid.uuid4().hex[:8]}", world_id=world_id, locale=locale, phase=phase, active_plugins=plugins,
        incarnation=uuid.uuid4().hex, event_epoch="e1",
        seats=[{"id": "main", "controller": "human", "role": "player", "characters": "auto"}], **extra,
    )


def execution_create(session: Session, type: str, payload: dict) -> Execution:
    return Execution.objects.create(session=session, request_id=f"req-{uuid.uuid4().hex[:8]}", type=type, payload=payload,
                                    trace_id=str(uuid.uuid4()))


STORY_PLUGIN = """
---
id: teller
kind: plugin
version: 1.0.0
description: Tells the story.
runtime:
  type: agent
  schedule:
    stage: narrative
    trigger:
      type: auto
  io:
    visibility: story
  agent:
    tools:
      builtin:
        - list-characters
    loop:
      maxSteps: 4
---
You narrate {{ world.name }}.
"""

GATE_PLUGIN = """
---
id: gate
kind: plugin
version: 1.0.0
description: Asks the hero's name during setup.
runtime:
  type: function
  schedule:
    stage: setup
    trigger:
      type: auto
  function:
    handler: ./handler.py
---
Setup gate.
"""

GATE_HANDLER = """
def handle(ctx):
    answer = next((s for s in ctx.submissions if s["interactionId"] == "hero"), None)
    if answer is None:
        return {"interaction": {"type": "form", "interactionId": "hero", "title": "Hero",
                                "fields": [{"type": "text", "name": "name", "label": "Name", "required": True}],
                                "submitLabel": "Go", "narrativeTemplate": "I am {{name}}."}}
    name = answer["values"]["name"]
    return {"preGameDone": True, "hero": name,
            "proposals": [{"type": "character.upsert", "payload": {"id": "hero", "name": name, "type": "player"}}]}
"""

NOTES_PLUGIN = """
---
id: notes
kind: plugin
version: 1.0.0
description: Counts turns in plugin data.
runtime:
  type: function
  schedule:
    stage: post-turn
    trigger:
      type: auto
  function:
    handler: ./handler.py
---
Notes.
"""

NOTES_HANDLER = """
def handle(ctx):
    count = ctx.plugin_data.get("stats", "turns", 0) + 1
    ctx.plugin_data.set("stats", "turns", count)
    return {"count": count}
"""

BOOM_PLUGIN = """
---
id: boom
kind: plugin
version: 1.0.0
description: Stages a write, then raises.
runtime:
  type: function
  schedule:
    stage: post-turn
    trigger:
      type: auto
  function:
    handler: ./handler.py
---
Boom.
"""

BOOM_HANDLER = """
def handle(ctx):
    ctx.plugin_data.set("stats", "exploded", True)
    raise RuntimeError("kaboom")
"""
