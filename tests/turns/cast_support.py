"""Test plugins for character delegation, turn policies, cross-package delegation through a write
service and the function-runtime ``ctx.agents`` (issue 19's rest; no tests here).
``builtin_dir_with_cast(target)`` writes them next to the real narrator, for
``settings.COVEL_BUILTIN_PLUGINS_DIR``. Each scripted step writes what it saw to ``COVEL_HOME``.

- ``troupe``: ``troupe/director`` (post-turn agent, ``delegate`` + the ``turn-policy@1`` import) and
  ``troupe/actor`` (``schedule.subagentOnly``, ``io.output.contract: character-actor@1``). Director
  step 1: delegate to the actor as "the lamplighter" (Mara's alias) with an instruction; with
  ``data`` (invalid-input); by Mara's id (not-found); by ``runtimeId`` without ``character``
  (invalid-input). Step 2: ``turn-policy`` with ``present: [Mara, Bram]``. The actor answers JSON
  text: two segments (one with a speaker, dropped) and an intent. Files ``troupe-<director|actor>-<step>.json``.
- ``stagehand``: a post-turn agent with ``delegate`` in ``completion.afterTools``: it delegates to
  Mara once, so its output is the character's projection (``{segments}``).
- ``casting``: the ``turn-policy@1`` service ``spotlight``; it writes its request (and
  ``historyFor`` of the first present character, limit 1) to ``casting-request.json`` and answers
  Bram, Mara (by id), an unknown Ghost and Hero.
- ``granary``: the write service ``granary.take@1`` (``{count}`` → increments ``stock/barn.sacks`` by
  ``-count``) and the sub-agent ``granary/clerk`` (``io.output.contract: granary.clerk@1``) that
  imports it as ``take-sacks``, takes 2 sacks and answers "Took two sacks.". With
  ``COVEL_HOME/granary-hold`` present the clerk first writes ``granary-running-<uuid>`` and waits
  (at most 5 s) for ``granary-release``.
- ``miller`` (another package): a post-turn agent that delegates ``{contract: granary.clerk@1}``.
- ``steward``: function runtime ``steward/ledger`` (manual) that does, per its payload ``mode``:
  ``"all"`` — ``ctx.agents.run({contract: granary.clerk@1})``, ``ctx.tools.call("delegate", ...)``,
  ``ctx.tools.call("granary-take", {count: 1})`` and ``ctx.agents.run`` with a bad target, caught;
  ``"crowd"`` — 8 threads running ``ctx.agents.run`` while the clerk holds, then a 9th, then
  release; ``"quota"`` — two runs (the session's ``maxSubagentCalls`` is 1 in that test). It
  returns what happened.
"""
from __future__ import annotations

import shutil
from pathlib import Path

from tests.sessions.lantern_support import package_write

TROUPE_MD = """\
---
id: troupe
kind: plugin
version: 1.0.0
description: A director and its character actor (test plugin).
optional: [turn-policy@1]
provides: [character-actor@1]
---
The troupe.
"""

DIRECTOR_RUNTIME = """\
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
    services: [turn-policy@1]
  loop:
    maxSteps: 4
---
You direct the scene.
"""

ACTOR_RUNTIME = """\
---
type: agent
schedule:
  trigger:
    type: manual
  subagentOnly: true
io:
  visibility: system
  output:
    contract: character-actor@1
agent:
  loop:
    maxSteps: 2
---
You play one character.
"""

TROUPE_SCRIPTED = """\
import json
import os
from pathlib import Path


def respond(turn):
    rid = turn["runtime_id"]
    if rid not in ("troupe/director", "troupe/actor"):
        return None
    name = rid.split("/")[1]
    step = turn["step"]
    record = {"tools": [t["name"] for t in turn["tools"]], "messages": turn["messages"], "results": turn["tool_results"]}
    (Path(os.environ["COVEL_HOME"]) / f"troupe-{name}-{step}.json").write_text(json.dumps(record), encoding="utf-8")
    if name == "actor":
        return {"text": json.dumps({"segments": [{"type": "dialogue", "text": "Who goes there?", "speaker": "Mara"},
                                                 {"type": "action", "text": "She raises her lantern."}],
                                    "intent": "Find out whether the hero smuggles oil."})}
    if step == 1:
        target = {"contract": "character-actor@1"}
        return {"tool_calls": [
            {"name": "delegate", "arguments": {"target": target, "character": "the lamplighter",
                                               "brief": "The hero knocks at the lighthouse door.",
                                               "instruction": "Be wary of strangers."}},
            {"name": "delegate", "arguments": {"target": target, "character": "Mara", "brief": "Hello.", "data": {"a": 1}}},
            {"name": "delegate", "arguments": {"target": target, "character": "mara-id", "brief": "Hello."}},
            {"name": "delegate", "arguments": {"target": {"runtimeId": "actor"}, "brief": "Hello."}},
        ]}
    if step == 2:
        return {"tool_calls": [{"name": "turn-policy", "arguments": {
            "present": ["Mara", "Bram"], "recentSegments": [{"type": "dialogue", "text": "Who goes there?"}]}}]}
    return {"tool_calls": [{"name": "runtime-done", "arguments": {}}]}
"""

STAGEHAND_MD = """\
---
id: stagehand
kind: plugin
version: 1.0.0
description: Completes through a character delegation (test plugin).
optional: [character-actor@1]
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
      builtin: [delegate]
    completion:
      afterTools: [delegate]
    loop:
      maxSteps: 2
---
You set the stage.
"""

STAGEHAND_SCRIPTED = """\
def respond(turn):
    if turn["runtime_id"] != "stagehand":
        return None
    return {"tool_calls": [{"name": "delegate", "arguments": {
        "target": {"contract": "character-actor@1"}, "character": "Mara", "brief": "Greet the hero.",
        "instruction": "Whisper."}}]}
"""

CASTING_MD = """\
---
id: casting
kind: plugin
version: 1.0.0
description: A turn policy (test plugin).
entry: ./server/entry.py
contributes:
  services: [turn-policy@1]
---
Casting.
"""

CASTING_ENTRY = """\
import json
import os
from pathlib import Path


def choose(context, args):
    first = args["presentCharacters"][0]["id"]
    record = {"args": args, "history": context["historyFor"](first, {"limit": 1})}
    (Path(os.environ["COVEL_HOME"]) / "casting-request.json").write_text(json.dumps(record), encoding="utf-8")
    return {"actors": [{"character": "Bram", "why": "closest to the door"}, {"characterId": "mara-id"},
                       {"character": "Ghost"}, {"character": "Hero"}]}


def register(api):
    api.register_service("turn-policy@1", choose, name="spotlight", label={"en": "Spotlight"})
"""

GRANARY_MD = """\
---
id: granary
kind: plugin
version: 1.0.0
description: A write service and the sub-agent that uses it (test plugin).
entry: ./server/entry.py
provides: [granary.clerk@1]
optional: [granary.take@1]
contributes:
  services: [granary.take@1]
---
The granary.
"""

CLERK_RUNTIME = """\
---
type: agent
schedule:
  trigger:
    type: manual
  subagentOnly: true
io:
  visibility: system
  output:
    contract: granary.clerk@1
agent:
  tools:
    services:
      - {contract: granary.take@1, as: take-sacks}
  loop:
    maxSteps: 3
---
You keep the granary's books.
"""

GRANARY_ENTRY = """\
from plugins_app.toolkit import PLUGIN_DATA_UPDATE, Proposal, ToolResult


def take(context, args):
    return ToolResult(content={"took": args["count"]}, proposals=[Proposal(PLUGIN_DATA_UPDATE, {
        "namespace": "stock", "key": "barn", "ops": [{"op": "increment", "path": "sacks", "by": -args["count"]}]})])


def register(api):
    api.register_service("granary.take@1", take, description="Take sacks out of the barn.", write=True,
                         input_schema={"type": "object", "required": ["count"], "additionalProperties": False,
                                       "properties": {"count": {"type": "integer", "minimum": 1}}})
"""

GRANARY_SCRIPTED = """\
import os
import time
import uuid
from pathlib import Path


def respond(turn):
    if turn["runtime_id"] != "granary/clerk":
        return None
    home = Path(os.environ["COVEL_HOME"])
    if turn["step"] == 1:
        if (home / "granary-hold").exists():
            (home / f"granary-running-{uuid.uuid4().hex}").write_text("1")
            deadline = time.monotonic() + 5
            while not (home / "granary-release").exists() and time.monotonic() < deadline:
                time.sleep(0.01)
        if "take-sacks" in [t["name"] for t in turn["tools"]]:
            return {"tool_calls": [{"name": "take-sacks", "arguments": {"count": 2}}]}
    return {"text": "Took two sacks."}
"""

MILLER_MD = """\
---
id: miller
kind: plugin
version: 1.0.0
description: Delegates to another package's sub-agent (test plugin).
optional: [granary.clerk@1]
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
      builtin: [delegate]
    loop:
      maxSteps: 3
---
You grind the grain.
"""

MILLER_SCRIPTED = """\
import json
import os
from pathlib import Path


def respond(turn):
    if turn["runtime_id"] != "miller":
        return None
    step = turn["step"]
    (Path(os.environ["COVEL_HOME"]) / f"miller-{step}.json").write_text(json.dumps({"results": turn["tool_results"]}))
    if step == 1:
        return {"tool_calls": [{"name": "delegate", "arguments": {"target": {"contract": "granary.clerk@1"},
                                                                  "brief": "Fetch two sacks for the mill."}}]}
    return {"tool_calls": [{"name": "runtime-done", "arguments": {}}]}
"""

STEWARD_MD = """\
---
id: steward
kind: plugin
version: 1.0.0
description: A function runtime that runs sub-agents (test plugin).
optional: [granary.clerk@1, granary.take@1]
---
The steward.
"""

LEDGER_RUNTIME = """\
---
type: function
schedule:
  trigger:
    type: manual
io:
  visibility: system
function:
  handler: ./handler.py
  tools:
    builtin: [delegate]
    services: [granary.take@1]
---
"""

LEDGER_HANDLER = """\
import os
import threading
import time
from pathlib import Path

CLERK = {"contract": "granary.clerk@1"}


def handle(ctx):
    mode = (ctx.manual_payload or {}).get("mode")
    home = Path(os.environ["COVEL_HOME"])
    if mode == "all":
        ran = ctx.agents.run(CLERK, "Count and take two sacks.")
        tool = ctx.tools.call("delegate", {"target": CLERK, "brief": "Take two more."})
        direct = ctx.tools.call("granary-take", {"count": 1})
        try:
            ctx.agents.run({"runtimeId": "nobody"}, "Hello?")
            missing = None
        except Exception as exc:
            missing = [type(exc).__name__, exc.code]
        return {"ran": ran, "tool": tool, "direct": direct, "missing": missing}
    if mode == "crowd":
        outputs, errors = [], []

        def one():
            try:
                outputs.append(ctx.agents.run(CLERK, "Take two sacks."))
            except Exception as exc:
                errors.append(exc.code)

        threads = [threading.Thread(target=one) for _ in range(8)]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 5
        while len(list(home.glob("granary-running-*"))) < 8 and time.monotonic() < deadline:
            time.sleep(0.01)
        try:
            ctx.agents.run(CLERK, "A ninth.")
            ninth = "ran"
        except Exception as exc:
            ninth = [exc.code, exc.message]
        (home / "granary-release").write_text("1")
        for thread in threads:
            thread.join()
        return {"outputs": len(outputs), "errors": errors, "ninth": ninth}
    if mode == "quota":
        first = ctx.agents.run(CLERK, "Take two sacks.")
        try:
            ctx.agents.run(CLERK, "Again.")
            second = "ran"
        except Exception as exc:
            second = [exc.code, exc.message]
        return {"first": first, "second": second}
    return {}
"""


def builtin_dir_with_cast(target: Path) -> Path:
    """A builtin plugin folder: the real narrator plus the plugins above."""
    from plugins_app.discovery import BUILTIN_DIR

    shutil.copytree(BUILTIN_DIR / "narrator", target / "narrator")
    package_write(target / "troupe", {"PLUGIN.md": TROUPE_MD, "runtimes/director/RUNTIME.md": DIRECTOR_RUNTIME,
                                      "runtimes/actor/RUNTIME.md": ACTOR_RUNTIME, "scripted.py": TROUPE_SCRIPTED})
    package_write(target / "stagehand", {"PLUGIN.md": STAGEHAND_MD, "scripted.py": STAGEHAND_SCRIPTED})
    package_write(target / "casting", {"PLUGIN.md": CASTING_MD, "server/entry.py": CASTING_ENTRY})
    package_write(target / "granary", {"PLUGIN.md": GRANARY_MD, "runtimes/clerk/RUNTIME.md": CLERK_RUNTIME,
                                       "server/entry.py": GRANARY_ENTRY, "scripted.py": GRANARY_SCRIPTED})
    package_write(target / "miller", {"PLUGIN.md": MILLER_MD, "scripted.py": MILLER_SCRIPTED})
    package_write(target / "steward", {"PLUGIN.md": STEWARD_MD, "runtimes/ledger/RUNTIME.md": LEDGER_RUNTIME,
                                       "runtimes/ledger/handler.py": LEDGER_HANDLER})
    return target
