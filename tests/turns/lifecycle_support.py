"""Test plugins for the turn-lifecycle tests (retries, interaction answers, auto snapshots; issue 17),
all builtin so no approval is asked, and all function runtimes so no model is called:

- ``teller`` (runtime id ``teller``): the story (``io.visibility: story``), output
  ``{narrativeOutput}`` (contract ``tale@1``) and plugin data ``seen/<logicalTurn>`` = the player
  message it read.
- ``flaky`` (``flaky/echo``, ``flaky/tally``): post-turn; ``echo`` reads the story through
  ``io.inputs`` (required) and stores it in ``echo/<logicalTurn>``; ``tally`` counts its runs.
- ``solo`` (``solo``): post-turn, counts its runs.
- ``asker`` (``asker``): post-turn; when ``COVEL_HOME/asker.json`` exists it calls the builtin
  ``create-form`` / ``create-choices`` tools and returns the extra interactions listed there (then
  deletes the file). Its entry registers the form validator ``no-bob`` (declared in
  ``contributes.forms``): ``Bob`` is a field issue, ``Boom`` makes it raise.

Any runtime fails on demand: ``fail(runtime_id, "raise" | "report")`` (``report`` returns
``{"status": "failed", "error": ...}``, the runtime reporting its own failure); ``heal()`` clears it.
"""
from __future__ import annotations

import json
from pathlib import Path

from django.conf import settings

HANDLERS = '''
import json
import os
from pathlib import Path

HOME = Path(os.environ["COVEL_HOME"])


def _failure(name):
    path = HOME / "lifecycle-flags.json"
    mode = json.loads(path.read_text(encoding="utf-8")).get(name) if path.exists() else None
    if mode == "raise":
        raise RuntimeError(name + " failed on demand")
    if mode == "report":
        return {"status": "failed", "error": {"message": name + " reported a failure"}}
    return None


def _count(ctx, namespace):
    count = (ctx.plugin_data.get(namespace, "runs", 0) or 0) + 1
    ctx.plugin_data.set(namespace, "runs", count)
    return count
'''

TELLER_MD = """\
---
id: teller
kind: plugin
version: 1.0.0
description: Tells the story (test plugin).
runtime:
  type: function
  schedule:
    stage: narrative
    trigger:
      type: auto
  io:
    output:
      contract: tale@1
    visibility: story
  function:
    handler: ./handler.py:story
---
Test story.
"""

TELLER_PY = HANDLERS + '''

def story(ctx):
    failed = _failure("teller")
    if failed:
        return failed
    text = ("The tale goes on: " + ctx.player_message) if ctx.player_message else "The tale begins."
    ctx.plugin_data.set("seen", str(ctx.logical_turn), ctx.player_message)
    return {"narrativeOutput": text}
'''

FLAKY_MD = """\
---
id: flaky
kind: plugin
version: 1.0.0
description: Post-turn runtimes that fail on demand (test plugin).
---
Flaky.
"""

ECHO_MD = """\
---
type: function
schedule:
  stage: post-turn
  trigger:
    type: auto
io:
  inputs:
    narrative:
      from:
        contract: tale@1
        cardinality: one
      select: /narrativeOutput
      required: true
function:
  handler: ../../handler.py:echo
---
Echo.
"""

TALLY_MD = """\
---
type: function
schedule:
  stage: post-turn
  trigger:
    type: auto
function:
  handler: ../../handler.py:tally
---
Tally.
"""

FLAKY_PY = HANDLERS + '''

def echo(ctx):
    failed = _failure("flaky/echo")
    if failed:
        return failed
    ctx.plugin_data.set("echo", str(ctx.logical_turn), ctx.inputs.get("narrative"))
    return {"echoed": ctx.inputs.get("narrative")}


def tally(ctx):
    failed = _failure("flaky/tally")
    if failed:
        return failed
    return {"runs": _count(ctx, "tally")}
'''

SOLO_MD = """\
---
id: solo
kind: plugin
version: 1.0.0
description: One post-turn runtime (test plugin).
runtime:
  type: function
  schedule:
    stage: post-turn
    trigger:
      type: auto
  function:
    handler: ./handler.py:solo
---
Solo.
"""

SOLO_PY = HANDLERS + '''

def solo(ctx):
    failed = _failure("solo")
    if failed:
        return failed
    return {"runs": _count(ctx, "solo")}
'''

ASKER_MD = """\
---
id: asker
kind: plugin
version: 1.0.0
description: Asks the player on demand (test plugin).
entry: ./server/entry.py
contributes:
  forms:
    - no-bob
runtime:
  type: function
  schedule:
    stage: post-turn
    trigger:
      type: auto
  function:
    handler: ./handler.py:ask
    tools:
      builtin:
        - create-form
        - create-choices
---
Asker.
"""

ASKER_PY = HANDLERS + '''

def ask(ctx):
    path = HOME / "asker.json"
    if not path.exists():
        return None
    plan = json.loads(path.read_text(encoding="utf-8"))
    path.unlink()
    for call in plan.get("tools") or []:
        ctx.tools.call(call["tool"], call["args"])
    return {"interactions": plan.get("interactions") or []}
'''

ASKER_ENTRY = '''
def no_bob(values, data, context):
    if values.get("name") == "Boom":
        raise RuntimeError("validator exploded: internal detail")
    if values.get("name") == "Bob":
        return {"field": "name", "message": "Bob is taken"}
    return None


def register(api):
    api.register_form_validator("no-bob", no_bob)
'''

PLUGINS = ("teller", "flaky", "solo", "asker")


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def builtin_dir_with_lifecycle_plugins(target: Path) -> Path:
    """A builtin plugin folder holding the four test plugins (module docstring)."""
    _write(target / "teller", {"PLUGIN.md": TELLER_MD, "handler.py": TELLER_PY})
    _write(target / "flaky", {"PLUGIN.md": FLAKY_MD, "handler.py": FLAKY_PY, "runtimes/echo/RUNTIME.md": ECHO_MD,
                              "runtimes/tally/RUNTIME.md": TALLY_MD})
    _write(target / "solo", {"PLUGIN.md": SOLO_MD, "handler.py": SOLO_PY})
    _write(target / "asker", {"PLUGIN.md": ASKER_MD, "handler.py": ASKER_PY, "server/entry.py": ASKER_ENTRY})
    return target


def home() -> Path:
    return Path(settings.COVEL_HOME)


def fail(runtime_id: str, mode: str = "raise") -> None:
    """Make ``runtime_id`` fail from its next run on (``raise`` or ``report``)."""
    path = home() / "lifecycle-flags.json"
    flags = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    flags[runtime_id] = mode
    path.write_text(json.dumps(flags), encoding="utf-8")


def heal() -> None:
    """Every runtime works again."""
    (home() / "lifecycle-flags.json").unlink(missing_ok=True)


def ask(*, tools: list[dict] | None = None, interactions: list[dict] | None = None) -> None:
    """Have ``asker`` call these tools / return these interactions in the next turn."""
    (home() / "asker.json").write_text(json.dumps({"tools": tools or [], "interactions": interactions or []}),
                                       encoding="utf-8")


def reset_files() -> None:
    heal()
    (home() / "asker.json").unlink(missing_ok=True)



def act(api, session_id: str, type: str = "submit_actions", payload: dict | None = None, **extra) -> list[dict]:
    """POST one action and return its stream's frames (the request must open a stream)."""
    from tests.turns.test_actions_helpers import action_body, post_action, stream_read

    response = post_action(api, action_body(session_id, type=type, payload=payload, **extra))
    assert response.status_code == 200, getattr(response, "content", b"")[:500]
    return stream_read(response)


def say(api, session_id: str, text: str = "I look around.") -> list[dict]:
    return act(api, session_id, payload={"actions": [{"kind": "say", "text": text}]})


def completed(frames: list[dict]) -> dict:
    """The payload of the stream's one execution.completed (asserting it is the last frame)."""
    assert frames and frames[-1]["type"] == "execution.completed", [f["type"] for f in frames]
    return frames[-1]["payload"]


def rejected(frames: list[dict]) -> dict:
    """The payload of a stream refused before anything ran: exactly one error.occurred."""
    assert [f["type"] for f in frames] == ["error.occurred"], [(f["type"], f["payload"]) for f in frames]
    return frames[0]["payload"]
