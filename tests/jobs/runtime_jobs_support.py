"""Helpers of the runtime job tests (no tests here): a plugin with a detached post-turn function
runtime installed into COVEL_HOME/plugins (so in-process and real workers load it), sessions,
job rows in a given state, and the session's job events."""
from __future__ import annotations

import textwrap
import uuid
from pathlib import Path

from django.conf import settings

TALLY_MANIFEST = textwrap.dedent(
    """\
    ---
    id: tally
    kind: plugin
    version: 1.0.0
    description: Counts committed turns in the background (test plugin).
    runtime:
      type: function
      schedule:
        stage: post-turn
        trigger:
          type: auto
        detached: true
      function:
        handler: ./handler.py
    ---
    Tally.
    """
)

# config/sleepSeconds and config/explode (plugin data of the session) steer a run.
TALLY_HANDLER = textwrap.dedent(
    """\
    import os
    import time


    def handle(ctx):
        pause = ctx.plugin_data.get("config", "sleepSeconds", 0)
        if pause:
            time.sleep(pause)
        if ctx.plugin_data.get("config", "explode", False):
            raise RuntimeError("tally exploded")
        count = ctx.plugin_data.get("stats", "turns", 0) + 1
        ctx.plugin_data.set("stats", "turns", count)
        return {"count": count, "heard": ctx.player_message, "pid": os.getpid()}
    """
)


def tally_manifest(detached: dict | None = None) -> str:
    """TALLY_MANIFEST, with ``schedule.detached`` a mapping (e.g. ``{"maxExecutionMs": 500}``) when given."""
    if not detached:
        return TALLY_MANIFEST
    lines = "\n".join(f"      {key}: {value}" for key, value in detached.items())
    return TALLY_MANIFEST.replace("    detached: true", "    detached:\n" + lines)


def tally_plugin_install(*, detached: dict | None = None) -> None:
    """Write the tally plugin into COVEL_HOME/plugins and rebuild the registry; ``detached``: see
    ``tally_manifest``."""
    from plugins_app.registry import registry_reset

    root = Path(settings.COVEL_HOME) / "plugins" / "tally"
    root.mkdir(parents=True, exist_ok=True)
    (root / "PLUGIN.md").write_text(tally_manifest(detached), encoding="utf-8")
    (root / "handler.py").write_text(TALLY_HANDLER, encoding="utf-8")
    registry_reset()


def session_with_tally(**config):
    """An active playing session with narrator + tally and a player character; ``config`` is
    written as tally's ``config`` plugin data (sleepSeconds, explode)."""
    from plugins_app.models import PluginData
    from tests.sessions.grants_support import community_grants_allow
    from tests.turns.test_actions_helpers import session_make

    session = session_make(plugins=("narrator", "tally"), characters=[("hero", "Hero", "player")])
    # tally is a community plugin: its code runs only with the session's grants.
    community_grants_allow(session, "tally", ["tally"])
    for key, value in config.items():
        PluginData.objects.create(session=session, plugin_id="tally", namespace="config", key=key, value=value)
    return session


def job_make(session, *, status="queued", runtime_id="tally", plugin_id="tally", **fields):
    """A RuntimeJob row as a turn's commit writes it (origin stage, the session's incarnation)."""
    from jobs.models import RuntimeJob

    payload = {
        "origin": {"activation": "stage", "sourceTurnId": f"turn-{uuid.uuid4().hex[:8]}",
                   "sourceExecutionId": str(uuid.uuid4()), "sourceRuntimeId": runtime_id},
        "inputs": {"secret": "frozen-input"}, "userSettings": {"apiToken": "never-shown"},
        "incarnation": session.incarnation, "logicalTurn": 1, "stage": "post-turn", "completion": {"mode": "detached"},
    }
    payload.update(fields.pop("payload", {}))
    return RuntimeJob.objects.create(session=session, plugin_id=plugin_id, runtime_id=runtime_id, status=status,
                                     payload=payload, **fields)


def job_events(session_id: str) -> list[dict]:
    """Payloads of the session's ``job-status.updated`` events, in log order."""
    from turns.models import SessionEvent

    return [e.payload for e in SessionEvent.objects.filter(session_id=session_id, type="job-status.updated").order_by("seq")]


def tally_count(session_id: str):
    from plugins_app.models import PluginData

    row = PluginData.objects.filter(session_id=session_id, plugin_id="tally", namespace="stats", key="turns").first()
    return row.value if row else None
