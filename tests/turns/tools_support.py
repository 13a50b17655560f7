"""Test plugins for the tool kinds of spec 000 (issue 19; no tests here). ``builtin_dir_with_tools(target)``
writes them next to the real narrator, for ``settings.COVEL_BUILTIN_PLUGINS_DIR``.

- ``lookout``: a post-turn agent (system) with ``tools.defer: true`` over 30 plugin tools
  ``probe-01`` … ``probe-30`` plus ``emit-event`` (``advertiseEvents: true``) and an unknown builtin
  ``weather-report``. Events: ``lookout.sighted`` (payload schema in ``schemas/sighted.json``:
  ``{ship: string}`` required), ``lookout.logged`` (inline schema) and the internal
  ``lookout.internal`` (``advertise: false``). ``probe-17`` ("ring the harbour bell") stages a
  ``plugin.data`` write ``bell/rung = {notes}``. Its script: step 1 ``search-tools`` "harbour bell"
  and "emit a domain event" (limit 1);
  step 2 ``probe-17`` with a stray ``}`` in the whole argument text and ``emit-event`` with a payload
  that breaks the schema; step 3 the valid ``emit-event``; then ``runtime-done``. Each step writes
  the request's tool names and system prompt to ``COVEL_HOME/lookout-step-<n>.json``.
- ``scribbler``: a post-turn agent whose one tool ``scribble`` stages an invalid ``plugin.data``
  proposal (no ``key``) next to a valid one: the call succeeds (staged), the commit rejects the
  runtime's writes as ``proposal-invalid``.
- ``larder``: provides the read service ``larder.stock@1`` (``{item}`` → the count in its own
  ``stock`` data) and the write service ``larder.take@1`` (``{item, count}`` stages ``stock/<item>``
  minus count in larder's own data; a count above the stock raises ``conflict``).
- ``cook``: a post-turn agent importing ``larder.stock@1``, ``{larder.take@1 as take-from-larder}`` and
  ``pantry.missing@1`` (no provider). Script: step 1 ``larder-stock`` twice (one without ``item``);
  step 2 ``take-from-larder``; step 3 ``pantry-missing``; then ``runtime-done``. Each step's request
  goes to ``COVEL_HOME/cook-step-<n>.json``.
- ``captain``: ``captain/bridge`` (post-turn agent with ``delegate``) delegates to its sub-agent
  ``captain/scout`` (``schedule.subagentOnly``; tools: ``list-characters``, ``sync-characters`` (a
  writer: cut from a sub-agent) and the write service ``larder.take@1``), with a brief and data;
  scout takes one bread through the service and answers "Twelve gulls.". Then bridge delegates to an
  unknown runtime (``not-found``) and ends with ``runtime-done``. Each model request of the two
  goes to ``COVEL_HOME/captain-<bridge|scout>-<step>.json``.
- ``painter``: a post-turn agent whose tool ``paint-scene`` stages ``asset.generate {kind: image,
  prompt}``; its script paints "A misty harbour stairway" and ends with ``runtime-done``.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.sessions.lantern_support import package_write

LOOKOUT_MD = """\
---
id: lookout
kind: plugin
version: 1.0.0
description: Deferred tools and event schemas (test plugin).
entry: ./server/entry.py
contributes:
  tools: [%(tools)s]
  events:
    - topic: lookout.sighted
      schema: ./schemas/sighted.json
      description: A ship was sighted from the tower.
    - topic: lookout.logged
      schema:
        type: object
        required: [line]
        properties:
          line: {type: string}
      description: A line was written in the log.
    - topic: lookout.internal
      advertise: false
      description: Internal bookkeeping.
runtime:
  type: agent
  schedule:
    stage: post-turn
    trigger:
      type: auto
  io:
    visibility: system
  agent:
    tools:
      builtin: [emit-event, weather-report]
      plugin: [%(tools)s]
      defer: true
    advertiseEvents: true
    loop:
      maxSteps: 6
---
You keep watch from the tower.
"""

PROBE_NAMES = [f"probe-{i:02d}" for i in range(1, 31)]
_TOPICS = ["lantern oil", "rope knots", "tide tables", "gull counts", "fog horn", "chart ink", "anchor chain",
           "sail patches", "rum barrels", "compass card", "lamp wicks", "net mending", "salt stores", "deck tar",
           "mast paint", "cargo tally", "harbour bell", "signal flags", "rain gauge", "wind vane", "hull barnacles",
           "crew roster", "galley fire", "bilge pump", "keel bolts", "oar locks", "dock fees", "pier lamps",
           "buoy colours", "reef marks"]

LOOKOUT_ENTRY = """\
from plugins_app.toolkit import PLUGIN_DATA, Proposal, ToolResult, tool

TOPICS = %(topics)r


def _probe(index, topic):
    def execute(args, ctx):
        if topic == "harbour bell":
            notes = args.get("notes") or []
            return ToolResult(content={"rang": True, "notes": notes},
                              proposals=[Proposal(PLUGIN_DATA, {"namespace": "bell", "key": "rung", "value": {"notes": notes}})])
        return {"checked": topic}
    description = ("Ring the harbour bell to warn the town" if topic == "harbour bell"
                   else "Check the " + topic + " of the watchtower")
    return tool(name="probe-%%02d" %% index, description=description, execute=execute,
                parameters={"type": "object", "properties": {"notes": {"type": "array", "items": {"type": "object"},
                                                                       "description": "What to note about the " + topic}}})


def register(api):
    for index, topic in enumerate(TOPICS, start=1):
        api.register_tool(_probe(index, topic))
""" % {"topics": _TOPICS}

LOOKOUT_SCRIPTED = """\
import json
import os
from pathlib import Path


def respond(turn):
    if turn["runtime_id"] != "lookout":
        return None
    step = turn["step"]
    record = {"tools": [t["name"] for t in turn["tools"]], "system": turn["messages"][0]["content"],
              "definitions": {t["name"]: t for t in turn["tools"]}, "results": turn["tool_results"]}
    (Path(os.environ["COVEL_HOME"]) / f"lookout-step-{step}.json").write_text(json.dumps(record), encoding="utf-8")
    if step == 1:
        return {"tool_calls": [{"name": "search-tools", "arguments": {"query": "harbour bell"}},
                               {"name": "search-tools", "arguments": {"query": "emit a domain event", "limit": 1}}]}
    if step == 2:
        return {"tool_calls": [
            {"name": "probe-17", "arguments": '{"notes":[{"id":"a"},{"id":"b"}}]}'},
            {"name": "emit-event", "arguments": {"topic": "lookout.sighted", "data": {"ship": 5}}},
        ]}
    if step == 3:
        return {"tool_calls": [{"name": "emit-event", "arguments": {"topic": "lookout.sighted", "data": {"ship": "Gull"}}}]}
    return {"tool_calls": [{"name": "runtime-done", "arguments": {}}]}
"""

SIGHTED_SCHEMA = {"type": "object", "required": ["ship"], "properties": {"ship": {"type": "string"}},
                  "additionalProperties": False}

SCRIBBLER_MD = """\
---
id: scribbler
kind: plugin
version: 1.0.0
description: Stages an invalid proposal (test plugin).
entry: ./server/entry.py
contributes:
  tools: [scribble]
runtime:
  type: agent
  schedule:
    stage: post-turn
    trigger:
      type: auto
  io:
    visibility: system
  agent:
    tools:
      plugin: [scribble]
    loop:
      maxSteps: 3
---
You scribble.
"""

SCRIBBLER_ENTRY = """\
from plugins_app.toolkit import PLUGIN_DATA, Proposal, ToolResult, tool


def _scribble(args, ctx):
    return ToolResult(content={"scribbled": True}, proposals=[
        Proposal(PLUGIN_DATA, {"namespace": "pad", "key": "good", "value": 1}),
        Proposal(PLUGIN_DATA, {"namespace": "pad", "value": 2}),
    ])


def register(api):
    api.register_tool(tool(name="scribble", description="Scribble on the pad.", execute=_scribble))
"""

SCRIBBLER_SCRIPTED = """\
def respond(turn):
    if turn["runtime_id"] != "scribbler":
        return None
    if turn["step"] == 1:
        return {"tool_calls": [{"name": "scribble", "arguments": {}}]}
    return {"tool_calls": [{"name": "runtime-done", "arguments": {}}]}
"""


LARDER_MD = """\
---
id: larder
kind: plugin
version: 1.0.0
description: Provides stock services (test plugin).
entry: ./server/entry.py
contributes:
  services: [larder.stock@1, larder.take@1]
---
The larder.
"""

LARDER_ENTRY = """\
from plugins_app.toolkit import CONFLICT, PLUGIN_DATA, Proposal, ToolError, ToolResult


def _count(context, item):
    return int((context["pluginData"].get("stock") or {}).get(item, 0))


def stock(context, args):
    return {"item": args["item"], "count": _count(context, args["item"]), "caller": context["callerPluginId"]}


def take(context, args):
    left = _count(context, args["item"]) - args["count"]
    if left < 0:
        raise ToolError(CONFLICT, "not enough " + args["item"])
    return ToolResult(content={"item": args["item"], "left": left},
                      proposals=[Proposal(PLUGIN_DATA, {"namespace": "stock", "key": args["item"], "value": left})])


def register(api):
    api.register_service("larder.stock@1", stock, description="How many of an item the larder holds.",
                         input_schema={"type": "object", "required": ["item"], "additionalProperties": False,
                                       "properties": {"item": {"type": "string", "minLength": 1}}})
    api.register_service("larder.take@1", take, description="Take items out of the larder.", write=True,
                         input_schema={"type": "object", "required": ["item", "count"], "additionalProperties": False,
                                       "properties": {"item": {"type": "string"}, "count": {"type": "integer", "minimum": 1}}})
"""

COOK_MD = """\
---
id: cook
kind: plugin
version: 1.0.0
description: Imports the larder's services (test plugin).
optional: [larder.stock@1, larder.take@1, pantry.missing@1]
runtime:
  type: agent
  schedule:
    stage: post-turn
    trigger:
      type: auto
  io:
    visibility: system
  agent:
    tools:
      services:
        - larder.stock@1
        - {contract: larder.take@1, as: take-from-larder}
        - pantry.missing@1
    loop:
      maxSteps: 6
---
You cook.
"""

COOK_SCRIPTED = """\
import json
import os
from pathlib import Path


def respond(turn):
    if turn["runtime_id"] != "cook":
        return None
    step = turn["step"]
    record = {"tools": {t["name"]: t for t in turn["tools"]}, "results": turn["tool_results"]}
    (Path(os.environ["COVEL_HOME"]) / f"cook-step-{step}.json").write_text(json.dumps(record), encoding="utf-8")
    if step == 1:
        return {"tool_calls": [{"name": "larder-stock", "arguments": {"item": "bread"}},
                               {"name": "larder-stock", "arguments": {}}]}
    if step == 2:
        return {"tool_calls": [{"name": "take-from-larder", "arguments": {"item": "bread", "count": 2}}]}
    if step == 3:
        return {"tool_calls": [{"name": "pantry-missing", "arguments": {}}]}
    return {"tool_calls": [{"name": "runtime-done", "arguments": {}}]}
"""


CAPTAIN_MD = """\
---
id: captain
kind: plugin
version: 1.0.0
description: Delegates to its sub-agent (test plugin).
optional: [larder.take@1]
---
The ship.
"""

BRIDGE_RUNTIME = """\
---
type: agent
schedule:
  stage: post-turn
  trigger:
    type: auto
io:
  visibility: system
agent:
  tools:
    builtin: [delegate]
  loop:
    maxSteps: 4
---
You command the ship.
"""

SCOUT_RUNTIME = """\
---
type: agent
schedule:
  trigger:
    type: manual
  subagentOnly: true
io:
  visibility: system
agent:
  tools:
    builtin: [list-characters, sync-characters]
    services:
      - {contract: larder.take@1, as: take-bread}
  loop:
    maxSteps: 5
---
You scout from the crow's nest.
"""

CAPTAIN_SCRIPTED = """\
import json
import os
from pathlib import Path


def respond(turn):
    rid = turn["runtime_id"]
    if rid not in ("captain/bridge", "captain/scout"):
        return None
    step = turn["step"]
    name = rid.split("/")[1]
    record = {"tools": [t["name"] for t in turn["tools"]], "messages": turn["messages"], "results": turn["tool_results"]}
    (Path(os.environ["COVEL_HOME"]) / f"captain-{name}-{step}.json").write_text(json.dumps(record), encoding="utf-8")
    if name == "scout":
        if step == 1:
            return {"tool_calls": [{"name": "take-bread", "arguments": {"item": "bread", "count": 1}},
                                   {"name": "list-characters", "arguments": {}}]}
        return {"text": "Twelve gulls."}
    if step == 1:
        return {"tool_calls": [{"name": "delegate", "arguments": {"target": {"runtimeId": "scout"}, "brief": "Count the gulls.",
                                                                  "data": {"harbour": "north"}}}]}
    if step == 2:
        return {"tool_calls": [{"name": "delegate", "arguments": {"target": {"runtimeId": "nobody"}, "brief": "Hello?"}}]}
    return {"tool_calls": [{"name": "runtime-done", "arguments": {}}]}
"""


PAINTER_MD = """\
---
id: painter
kind: plugin
version: 1.0.0
description: Requests an image (test plugin).
entry: ./server/entry.py
contributes:
  tools: [paint-scene]
runtime:
  type: agent
  schedule:
    stage: post-turn
    trigger:
      type: auto
  io:
    visibility: system
  agent:
    tools:
      plugin: [paint-scene]
    loop:
      maxSteps: 3
---
You paint.
"""

PAINTER_ENTRY = """\
from plugins_app.toolkit import ASSET_GENERATE, Proposal, ToolResult, tool


def _paint(args, ctx):
    return ToolResult(content={"requested": args["prompt"]},
                      proposals=[Proposal(ASSET_GENERATE, {"kind": "image", "prompt": args["prompt"]})])


def register(api):
    api.register_tool(tool(name="paint-scene", description="Paint the scene.", execute=_paint,
                           parameters={"type": "object", "required": ["prompt"],
                                       "properties": {"prompt": {"type": "string", "minLength": 1}}}))
"""

PAINTER_SCRIPTED = """\
def respond(turn):
    if turn["runtime_id"] != "painter":
        return None
    if turn["step"] == 1:
        return {"tool_calls": [{"name": "paint-scene", "arguments": {"prompt": "A misty harbour stairway"}}]}
    return {"tool_calls": [{"name": "runtime-done", "arguments": {}}]}
"""


def builtin_dir_with_tools(target: Path) -> Path:
    """A builtin plugin folder: the real narrator plus the plugins above."""
    from plugins_app.discovery import BUILTIN_DIR

    shutil.copytree(BUILTIN_DIR / "narrator", target / "narrator")
    tools = ", ".join(PROBE_NAMES)
    package_write(target / "lookout", {"PLUGIN.md": LOOKOUT_MD % {"tools": tools}, "server/entry.py": LOOKOUT_ENTRY,
                                       "scripted.py": LOOKOUT_SCRIPTED,
                                       "schemas/sighted.json": json.dumps(SIGHTED_SCHEMA)})
    package_write(target / "scribbler", {"PLUGIN.md": SCRIBBLER_MD, "server/entry.py": SCRIBBLER_ENTRY,
                                         "scripted.py": SCRIBBLER_SCRIPTED})
    package_write(target / "larder", {"PLUGIN.md": LARDER_MD, "server/entry.py": LARDER_ENTRY})
    package_write(target / "cook", {"PLUGIN.md": COOK_MD, "scripted.py": COOK_SCRIPTED})
    package_write(target / "captain", {"PLUGIN.md": CAPTAIN_MD, "runtimes/bridge/RUNTIME.md": BRIDGE_RUNTIME,
                                       "runtimes/scout/RUNTIME.md": SCOUT_RUNTIME, "scripted.py": CAPTAIN_SCRIPTED})
    package_write(target / "painter", {"PLUGIN.md": PAINTER_MD, "server/entry.py": PAINTER_ENTRY,
                                       "scripted.py": PAINTER_SCRIPTED})
    return target
