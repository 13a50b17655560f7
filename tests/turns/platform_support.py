"""Builtin test plugins for the plugin platform's remaining pieces (no tests here): the turn and
runtime hooks, the fault breaker, background followers, X-Plugin-User-Settings and world data for
late receivers. ``builtin_dir_with_platform(target)`` writes them next to the real narrator.

- ``warden``: hooks PreSchedule (drops ``tally/dropped``), PreRuntime (aborts ``tally/guarded``),
  PostContextAssembly (its own agent runtime: system prompt ``WARDEN SYSTEM PROMPT`` and a user
  message ``CONTEXT NOTE``), PreLLMCall (its runtime: a user message ``CALL NOTE`` on every call,
  model ``warden-model-x``) and PostRuntime (``tally/count``'s output becomes ``{count: 99}``).
  Every hook call appends ``{event, runtimeId, settings, activePluginIds}`` to
  ``COVEL_HOME/warden-hooks.jsonl``. Its agent runtime asks ``list-characters`` at step 1 and writes
  the messages of each model call to ``COVEL_HOME/warden-seen-<step>.json``.
- ``tally``: post-turn functions ``count`` (stores ``ctx.settings`` at ``seen/settings``), ``dropped``
  and ``guarded`` (each stores that it ran), and a manual ``echo`` (stores ``ctx.settings`` at
  ``seen/echo``). Settings: tone (default ``default``), depth (1), flavor (``plain``).
- ``fumble``: a post-turn function that raises while ``COVEL_HOME/fumble-breaks`` exists.
- ``herald``: manual sync ``herald/prompt`` (emits ``herald-call`` when ``payload.emit``) and the
  background follower ``herald/paint`` (``trigger: {type: event, topic: herald-call}``) that
  stores the trigger it got at ``painted/<eventId>``.
- ``almanac``: a data namespace ``calendar`` accepting ``world.time-definition@1``.
- ``sloth``: a manual background function ``sloth/nap`` that marks ``COVEL_HOME/sloth-napping``
  and then waits (at most 20 s) for ``COVEL_HOME/sloth-wake``; a SessionEnd hook that appends the
  reason to ``COVEL_HOME/sloth-ended-<sessionId>``.
"""
from __future__ import annotations

import shutil
from pathlib import Path

from tests.sessions.lantern_support import package_write

WARDEN_MD = """\
---
id: warden
kind: plugin
version: 1.0.0
description: Turn and runtime hooks (test plugin).
entry: ./server/entry.py
contributes:
  hooks:
    - event: PreSchedule
    - event: PreRuntime
    - event: PostContextAssembly
    - event: PreLLMCall
    - event: PostRuntime
  settings:
    - key: strict
      type: toggle
      default: true
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
      builtin:
        - list-characters
    loop:
      maxSteps: 3
---
You watch.
"""

WARDEN_ENTRY = """\
import json
import os
from pathlib import Path

HOME = Path(os.environ["COVEL_HOME"])


def _note(event):
    with open(HOME / "warden-hooks.jsonl", "a", encoding="utf-8") as handle:
        handle.write(json.dumps({"event": event["event"], "runtimeId": event.get("runtimeId"),
                                 "settings": event.get("settings"), "activePluginIds": event.get("activePluginIds")}) + "\\n")


def _pre_schedule(event):
    _note(event)
    names = [t["name"] for t in event["triggered"]]
    return {"action": "continue", "replace": {"triggered": [n for n in names if n != "tally/dropped"]}}


def _pre_runtime(event):
    _note(event)
    if event["runtimeId"] == "tally/guarded":
        return {"action": "abort", "reason": "guarded by warden"}
    return None


def _post_context_assembly(event):
    _note(event)
    if event["runtimeId"] != "warden":
        return None
    messages = event["messages"] + [{"role": "user", "content": "CONTEXT NOTE"}]
    return {"action": "continue", "replace": {"systemPrompt": "WARDEN SYSTEM PROMPT", "messages": messages}}


def _pre_llm_call(event):
    _note(event)
    if event["runtimeId"] != "warden":
        return None
    messages = event["messages"] + [{"role": "user", "content": "CALL NOTE"}]
    return {"action": "continue", "replace": {"messages": messages, "model": "warden-model-x"}}


def _post_runtime(event):
    _note(event)
    if event["runtimeId"] == "tally/count":
        return {"action": "continue", "replace": {"result": {"output": {"count": 99}}}}
    return None


def register(api):
    api.register_hook("PreSchedule", _pre_schedule)
    api.register_hook("PreRuntime", _pre_runtime)
    api.register_hook("PostContextAssembly", _post_context_assembly)
    api.register_hook("PreLLMCall", _pre_llm_call)
    api.register_hook("PostRuntime", _post_runtime)
"""

WARDEN_SCRIPTED = """\
import json
import os
from pathlib import Path


def respond(turn):
    if turn["runtime_id"] != "warden":
        return None
    (Path(os.environ["COVEL_HOME"]) / f"warden-seen-{turn['step']}.json").write_text(json.dumps(turn["messages"]), encoding="utf-8")
    if turn["step"] == 1:
        return {"tool_calls": [{"name": "list-characters", "arguments": {}}]}
    return {"text": "Watched."}
"""

TALLY_MD = """\
---
id: tally
kind: plugin
version: 1.0.0
description: Function runtimes the warden's hooks act on (test plugin).
contributes:
  settings:
    - key: tone
      type: text
      default: default
    - key: depth
      type: number
      default: 1
    - key: flavor
      type: text
      default: plain
---
Counts.
"""


def _tally_runtime(trigger: str, body: str) -> tuple[str, str]:
    schedule = ("  stage: post-turn\n  trigger:\n    type: auto\n" if trigger == "auto" else "  trigger:\n    type: manual\n")
    return (f"---\ntype: function\nschedule:\n{schedule}function:\n  handler: ./handler.py\n---\nTally.\n",
            f"def handle(ctx):\n{body}")


TALLY_RUNTIMES = {
    "count": _tally_runtime("auto", '    ctx.plugin_data.set("seen", "settings", ctx.settings)\n    return {"count": 1}\n'),
    "dropped": _tally_runtime("auto", '    ctx.plugin_data.set("ran", "dropped", True)\n    return {}\n'),
    "guarded": _tally_runtime("auto", '    ctx.plugin_data.set("ran", "guarded", True)\n    return {}\n'),
    "echo": _tally_runtime("manual", '    ctx.plugin_data.set("seen", "echo", ctx.settings)\n    return {"settings": ctx.settings}\n'),
}

FUMBLE_MD = """\
---
id: fumble
kind: plugin
version: 1.0.0
description: Fails on purpose (test plugin for the fault breaker).
runtime:
  type: function
  schedule:
    stage: post-turn
    trigger:
      type: auto
  function:
    handler: ./handler.py
---
Fumbles.
"""

FUMBLE_HANDLER = """\
import os
from pathlib import Path


def handle(ctx):
    if (Path(os.environ["COVEL_HOME"]) / "fumble-breaks").exists():
        raise RuntimeError("dropped the lantern")
    ctx.plugin_data.set("fumble", "ok", ctx.logical_turn)
    return {"ok": True}
"""

HERALD_MD = """\
---
id: herald
kind: plugin
version: 1.0.0
description: An entry runtime and its background follower (test plugin).
contributes:
  events:
    - topic: herald-call
      description: The herald calls the painter.
---
Heralds.
"""

HERALD_RUNTIMES = {
    "prompt": ("""\
---
type: function
schedule:
  trigger:
    type: manual
function:
  handler: ./handler.py
---
Writes the prompt.
""", """\
def handle(ctx):
    payload = ctx.manual_payload or {}
    ctx.plugin_data.set("prompts", "last", payload)
    out = {"prompt": "a lighthouse"}
    if payload.get("emit"):
        out["proposals"] = [{"type": "event.emit", "payload": {"topic": "herald-call", "data": {"prompt": "a lighthouse"}}}]
    return out
"""),
    "paint": ("""\
---
type: function
schedule:
  trigger:
    type: event
    topic: herald-call
  background: true
function:
  handler: ./handler.py
---
Paints in the background.
""", """\
def handle(ctx):
    ctx.plugin_data.set("painted", ctx.trigger_event["eventId"], ctx.trigger_event)
    return {"painted": True}
"""),
}

ALMANAC_MD = """\
---
id: almanac
kind: plugin
version: 1.0.0
description: Receives the world's time definition (test plugin).
contributes:
  data:
    calendar:
      version: 1
      description: The world's calendar.
      accepts:
        - world.time-definition@1
---
An almanac.
"""


SLOTH_MD = """\
---
id: sloth
kind: plugin
version: 1.0.0
description: A slow background job and a SessionEnd hook (test plugin).
entry: ./server/entry.py
contributes:
  hooks:
    - event: SessionEnd
---
Naps.
"""

SLOTH_ENTRY = """\
import os
from pathlib import Path


def _ended(event):
    with open(Path(os.environ["COVEL_HOME"]) / f"sloth-ended-{event['sessionId']}", "a", encoding="utf-8") as handle:
        handle.write(event["reason"] + "\\n")


def register(api):
    api.register_hook("SessionEnd", _ended)
"""

SLOTH_NAP = ("""\
---
type: function
schedule:
  trigger:
    type: manual
  background: true
function:
  handler: ./handler.py
---
Naps in the background.
""", """\
import os
import time
from pathlib import Path


def handle(ctx):
    home = Path(os.environ["COVEL_HOME"])
    (home / "sloth-napping").write_text("1", encoding="utf-8")
    deadline = time.monotonic() + 20
    while not (home / "sloth-wake").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return {"woke": True}
""")


def builtin_dir_with_platform(target: Path, *, with_world_time: bool = False) -> Path:
    """A builtin plugin folder: the real narrator (and world-time when asked) plus the plugins above."""
    from plugins_app.discovery import BUILTIN_DIR

    shutil.copytree(BUILTIN_DIR / "narrator", target / "narrator")
    if with_world_time:
        shutil.copytree(BUILTIN_DIR / "world-time", target / "world-time")
    package_write(target / "warden", {"PLUGIN.md": WARDEN_MD, "server/entry.py": WARDEN_ENTRY, "scripted.py": WARDEN_SCRIPTED})
    tally = {"PLUGIN.md": TALLY_MD}
    for name, (manifest, handler) in TALLY_RUNTIMES.items():
        tally[f"runtimes/{name}/RUNTIME.md"] = manifest
        tally[f"runtimes/{name}/handler.py"] = handler
    package_write(target / "tally", tally)
    package_write(target / "fumble", {"PLUGIN.md": FUMBLE_MD, "handler.py": FUMBLE_HANDLER})
    herald = {"PLUGIN.md": HERALD_MD}
    for name, (manifest, handler) in HERALD_RUNTIMES.items():
        herald[f"runtimes/{name}/RUNTIME.md"] = manifest
        herald[f"runtimes/{name}/handler.py"] = handler
    package_write(target / "herald", herald)
    package_write(target / "almanac", {"PLUGIN.md": ALMANAC_MD})
    package_write(target / "sloth", {"PLUGIN.md": SLOTH_MD, "server/entry.py": SLOTH_ENTRY,
                                     "runtimes/nap/RUNTIME.md": SLOTH_NAP[0], "runtimes/nap/handler.py": SLOTH_NAP[1]})
    return target
