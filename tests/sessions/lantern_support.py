"""Test plugins for approvals and plugin-rpc (no tests here).

``lantern`` is a community plugin (installed from a zip or copied into COVEL_HOME/plugins). Every
module of it leaves a marker file in ``COVEL_HOME/lantern-marks/`` when it is imported, named
``<module>-<pid>``, so a test can prove a module was (not) imported and by which process:

- entry ``server/entry.py`` registers the RPC actions ``ping`` (echo), ``stash`` (store calls),
  ``nap`` (writes, sleeps ``seconds``, then tries to write again; a refused late write leaves the
  marker ``nap-refused``) and the command ``/roll <notation> [times]`` (action ``ping``);
- runtime ``lantern/watch``: auto post-turn function; counts turns in plugin data ``stats/turns``;
- runtime ``lantern/manual``: manual function; echoes ``ctx.manual_payload`` and stores it;
- runtime ``lantern/later``: manual background function (a runtime job);
- runtime ``lantern/listener``: subscribes to the event topic ``lantern-lit`` (payload schema
  ``{brightness: integer}``), stores the trigger it got;
- runtime ``lantern/helper``: subagentOnly.

``beacon`` is the same entry as a builtin plugin (no approvals), for the builtin RPC paths.
``quill`` (builtin) and ``lantern-bell`` (community) exercise hooks (see "hooks" below).
"""
from __future__ import annotations

import io
import shutil
import textwrap
import zipfile
from pathlib import Path

from django.conf import settings

PLUGIN_MD = """\
---
id: {id}
kind: plugin
version: 1.0.0
description: Lights a lantern (test plugin for approvals and plugin-rpc).
entry: ./server/entry.py
contributes:
  actions:
    - ping
    - stash
    - nap
  commands:
    - name: roll
      description: Roll some dice.
      action: ping
      arguments:
        - name: notation
          type: string
          required: true
        - name: times
          type: integer
  events:
    - topic: lantern-lit
      schema: ./schemas/lit.json
      description: The lantern was lit from its panel.
---
A lantern.
"""

MARK = """\
import os
from pathlib import Path

_MARKS = Path(os.environ["COVEL_HOME"]) / "lantern-marks"
_MARKS.mkdir(parents=True, exist_ok=True)
(_MARKS / f"{name}-{{os.getpid()}}").write_text("imported", encoding="utf-8")
"""

ENTRY_PY = MARK.format(name="entry") + """\
import time


def _ping(ctx, payload):
    return {"pong": payload, "plugin": ctx.plugin_id, "command": ctx.command and ctx.command.get("args")}


def _stash(ctx, payload):
    written = ctx.store.setPluginData("notes", payload["key"], payload["value"])
    refused = None
    try:
        ctx.store.setPluginData("_hidden", "x", 1)
    except Exception as exc:
        refused = getattr(exc, "code", type(exc).__name__)
    return {"written": written, "notes": ctx.store.listPluginData("notes"),
            "read": ctx.store.getPluginData("notes", payload["key"]),
            "messages": len(ctx.store.listTurnMessages(500)), "session": ctx.store.getSession()["id"],
            "refused": refused, "hasSavePlayerInput": hasattr(ctx.store, "savePlayerInput")}


def _nap(ctx, payload):
    ctx.store.setPluginData("notes", "before", True)
    time.sleep(payload.get("seconds", 1))
    try:
        ctx.store.setPluginData("notes", "after", True)
    except Exception as exc:
        (_MARKS / "nap-refused").write_text(f"{getattr(exc, 'code', '')}:{ctx.signal.is_aborted}", encoding="utf-8")
        return None
    return {"late": True}


def register(api):
    api.register_rpc("ping", _ping)
    api.register_rpc("stash", _stash)
    api.register_rpc("nap", _nap)
"""

RUNTIMES = {
    "watch": ("""\
---
type: function
schedule:
  stage: post-turn
  trigger:
    type: auto
function:
  handler: ./handler.py
---
Counts turns.
""", MARK.format(name="watch") + """\


def handle(ctx):
    count = ctx.plugin_data.get("stats", "turns", 0) + 1
    ctx.plugin_data.set("stats", "turns", count)
    ctx.plugin_data.set("stats", "pid", os.getpid())
    return {"count": count}
"""),
    "manual": ("""\
---
type: function
schedule:
  trigger:
    type: manual
function:
  handler: ./handler.py
---
Echoes its payload.
""", MARK.format(name="manual") + """\


def handle(ctx):
    ctx.plugin_data.set("manual", "last", ctx.manual_payload)
    return {"echo": ctx.manual_payload, "origin": ctx.origin}
"""),
    "later": ("""\
---
type: function
schedule:
  trigger:
    type: manual
  background: true
function:
  handler: ./handler.py
---
Runs as a job.
""", MARK.format(name="later") + """\


def handle(ctx):
    ctx.plugin_data.set("later", "ran", {"payload": ctx.manual_payload, "pid": os.getpid()})
    return {"ok": True}
"""),
    "listener": ("""\
---
type: function
schedule:
  trigger:
    type: event
    topic: lantern-lit
function:
  handler: ./handler.py
---
Hears the lantern.
""", MARK.format(name="listener") + """\


def handle(ctx):
    ctx.plugin_data.set("heard", ctx.trigger_event["eventId"], ctx.trigger_event)
    return {"heard": True}
"""),
    "helper": ("""\
---
type: function
schedule:
  trigger:
    type: manual
  subagentOnly: true
function:
  handler: ./handler.py
---
Only a subagent.
""", MARK.format(name="helper") + """\


def handle(ctx):
    return {}
"""),
}

LIT_SCHEMA = """\
{"type": "object", "required": ["brightness"], "properties": {"brightness": {"type": "integer", "minimum": 0}},
 "additionalProperties": false}
"""


def lantern_files(plugin_id: str = "lantern", *, runtimes=tuple(RUNTIMES)) -> dict[str, str]:
    """The package's files (package-relative path → text)."""
    files = {"PLUGIN.md": PLUGIN_MD.format(id=plugin_id), "server/entry.py": ENTRY_PY, "schemas/lit.json": LIT_SCHEMA}
    for name in runtimes:
        manifest, handler = RUNTIMES[name]
        files[f"runtimes/{name}/RUNTIME.md"] = manifest
        files[f"runtimes/{name}/handler.py"] = handler
    return files


def lantern_zip(plugin_id: str = "lantern", **kwargs) -> bytes:
    """The package as a zip with one top folder (what POST /api/install/plugin takes)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for rel, text in lantern_files(plugin_id, **kwargs).items():
            archive.writestr(f"{plugin_id}/{rel}", text)
    return buffer.getvalue()


def package_write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    return root


def lantern_install(plugin_id: str = "lantern", **kwargs) -> Path:
    """Copy lantern into COVEL_HOME/plugins and rebuild the registry (a restart after an install)."""
    from plugins_app.registry import registry_reset

    target = Path(settings.COVEL_HOME) / "plugins" / plugin_id
    shutil.rmtree(target, ignore_errors=True)
    root = package_write(target, lantern_files(plugin_id, **kwargs))
    registry_reset()
    return root


def lantern_uninstall() -> None:
    """Remove every lantern package from COVEL_HOME/plugins (tests share one COVEL_HOME)."""
    from plugins_app.registry import registry_reset

    for folder in (Path(settings.COVEL_HOME) / "plugins").glob("lantern*"):
        shutil.rmtree(folder, ignore_errors=True)
    registry_reset()


def marks_dir() -> Path:
    return Path(settings.COVEL_HOME) / "lantern-marks"


def marks() -> list[str]:
    """Marker names left so far (``entry-<pid>``, ``watch-<pid>``, ``nap-refused`` ...)."""
    directory = marks_dir()
    return sorted(p.name for p in directory.iterdir()) if directory.is_dir() else []


def marks_of(module: str) -> list[str]:
    return [m for m in marks() if m.startswith(f"{module}-")]


def marks_clear() -> None:
    shutil.rmtree(marks_dir(), ignore_errors=True)


def builtin_dir_with_beacon(target: Path) -> Path:
    """A builtin plugin folder: the real narrator plus ``beacon`` (lantern's entry and runtimes, as builtin)."""
    from plugins_app.discovery import BUILTIN_DIR

    shutil.copytree(BUILTIN_DIR / "narrator", target / "narrator")
    package_write(target / "beacon", lantern_files("beacon"))
    return target


def pid_marks(module: str) -> set[int]:
    return {int(m.rsplit("-", 1)[1]) for m in marks_of(module)}



# --- hooks ------------------------------------------------------------------------------------------
#
# ``quill`` (builtin in a test builtin dir) registers SessionStart / SessionEnd / TurnStart /
# PreToolUse / PostToolUse hooks and has an agent runtime whose scripted model asks, in one reply:
# get-character {id: secret} (PreToolUse refuses it), get-character {id: nobody} (PreToolUse
# rewrites it to {id: hero}; PostToolUse then stops the batch) and list-characters (cancelled).
# Its second model call saves the messages it was given to COVEL_HOME/quill-seen.json.
# SessionStart/SessionEnd append to COVEL_HOME/quill-events/<event>-<sessionId>; SessionStart
# sleeps 1.5 s while COVEL_HOME/quill-slow exists (and first writes <...>-started).

QUILL_MD = """\
---
id: quill
kind: plugin
version: 1.0.0
description: Hooks test plugin.
entry: ./server/entry.py
contributes:
  hooks:
    - event: SessionStart
    - event: SessionEnd
    - event: TurnStart
    - event: PreToolUse
    - event: PostToolUse
      enforce: post
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
        - get-character
        - list-characters
    loop:
      maxSteps: 3
---
You check characters.
"""

QUILL_ENTRY = """\
import os
import time
from pathlib import Path

HOME = Path(os.environ["COVEL_HOME"])


def _log(event):
    folder = HOME / "quill-events"
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / f"{event['event']}-{event['sessionId']}", "a", encoding="utf-8") as handle:
        handle.write(event.get("reason", "-") + "\\n")


def _session_start(event):
    if (HOME / "quill-slow").exists():
        (HOME / "quill-events").mkdir(parents=True, exist_ok=True)
        (HOME / "quill-events" / f"started-{event['sessionId']}").write_text("1", encoding="utf-8")
        time.sleep(1.5)
    _log(event)


def _pre_tool_use(event):
    args = event.get("input") or {}
    if event["tool"] == "get-character" and args.get("id") == "secret":
        return {"action": "abort", "reason": "secret is off limits; ask about the hero instead"}
    if event["tool"] == "get-character" and args.get("id") == "nobody":
        return {"action": "rewrite", "input": {"id": "hero"}}
    return None


def _post_tool_use(event):
    if event["tool"] == "get-character" and event["status"] == "success":
        return {"action": "abort", "reason": "one character is enough"}
    return {"action": "continue"}


def register(api):
    api.register_hook("SessionStart", _session_start)
    api.register_hook("SessionEnd", _log)
    api.register_hook("TurnStart", lambda event: None)
    api.register_hook("PreToolUse", _pre_tool_use)
    api.register_hook("PostToolUse", _post_tool_use, enforce="post")
"""

QUILL_SCRIPTED = """\
import json
import os
from pathlib import Path


def respond(turn):
    if turn["runtime_id"] != "quill":
        return None
    if turn["step"] == 1:
        return {"tool_calls": [
            {"name": "get-character", "arguments": {"id": "secret"}},
            {"name": "get-character", "arguments": {"id": "nobody"}},
            {"name": "list-characters", "arguments": {}},
        ]}
    (Path(os.environ["COVEL_HOME"]) / "quill-seen.json").write_text(json.dumps(turn["messages"]), encoding="utf-8")
    return {"text": "Checked."}
"""

BELL_MD = """\
---
id: bell
kind: plugin
version: 1.0.0
description: A community plugin with only an entry (a TurnStart hook and an action).
entry: ./server/entry.py
contributes:
  actions:
    - ring
  hooks:
    - event: TurnStart
---
A bell.
"""

BELL_ENTRY = MARK.format(name="bell") + """\


def _turn_start(event):
    (_MARKS / f"bell-turnstart-{event['turnId']}").write_text("rang", encoding="utf-8")


def register(api):
    api.register_rpc("ring", lambda ctx, payload: {"rang": True})
    api.register_hook("TurnStart", _turn_start)
"""


def builtin_dir_with_quill(target: Path) -> Path:
    """A builtin plugin folder: the real narrator plus ``quill``."""
    from plugins_app.discovery import BUILTIN_DIR

    shutil.copytree(BUILTIN_DIR / "narrator", target / "narrator")
    package_write(target / "quill", {"PLUGIN.md": QUILL_MD, "server/entry.py": QUILL_ENTRY, "scripted.py": QUILL_SCRIPTED})
    package_write(target / "quill-fn", {"PLUGIN.md": QUILL_FN_MD, "handler.py": QUILL_FN_HANDLER})
    return target


# A function runtime whose ctx.tools.call meets quill's PreToolUse hook (refused → the runtime fails).
QUILL_FN_MD = """\
---
id: quill-fn
kind: plugin
version: 1.0.0
description: Calls a tool from a function runtime.
runtime:
  type: function
  schedule:
    stage: post-turn
    trigger:
      type: auto
  function:
    handler: ./handler.py
    tools:
      builtin:
        - get-character
---
Asks for the secret.
"""

QUILL_FN_HANDLER = """\
def handle(ctx):
    ctx.tools.call("get-character", {"id": "secret"})
    return {"asked": True}
"""


def bell_install() -> Path:
    from plugins_app.registry import registry_reset

    target = Path(settings.COVEL_HOME) / "plugins" / "lantern-bell"
    shutil.rmtree(target, ignore_errors=True)
    root = package_write(target, {"PLUGIN.md": BELL_MD.replace("id: bell", "id: lantern-bell"), "server/entry.py": BELL_ENTRY})
    registry_reset()
    return root
