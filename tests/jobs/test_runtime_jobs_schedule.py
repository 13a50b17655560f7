"""Which detached declarations become runtime jobs (spec 004 §Turn 执行: schedule.detached only for
safe post-turn / audit function leaf runtimes; unsafe ones run in the foreground with a diagnostic),
and what a job freezes from its turn. Engine-level: execution_run with a test plugin registry."""
from __future__ import annotations

import pytest

from jobs.models import RuntimeJob
from tests.turns.engine.support import STORY_PLUGIN, execution_create, plugin_write, registry_from, session_create
from turns.engine.run import execution_run
from turns.engine.trace import RecordingSink
from turns.models import TraceEvent

pytestmark = pytest.mark.django_db

SOURCE = """
---
id: source
kind: plugin
version: 1.0.0
description: Produces a value for later runtimes.
runtime:
  type: function
  schedule:
    stage: post-turn
    trigger:
      type: auto
  function:
    handler: ./handler.py
---
Source.
"""

DETACHED_READER = """
---
id: reader
kind: plugin
version: 1.0.0
description: Reads the source's output in the background.
runtime:
  type: function
  schedule:
    stage: post-turn
    trigger:
      type: auto
    needs: [source]
    detached:
      maxQueueMs: 60000
  io:
    inputs:
      mood:
        from: {runtime: source}
        select: /mood
        required: true
  function:
    handler: ./handler.py
---
Reader.
"""

DETACHED_AGENT = """
---
id: critic
kind: plugin
version: 1.0.0
description: An agent runtime that asks to be detached.
runtime:
  type: agent
  schedule:
    stage: audit
    trigger:
      type: auto
    detached: true
  agent:
    loop:
      maxSteps: 1
---
You review the turn.
"""

DEPENDED_ON = """
---
id: base
kind: plugin
version: 1.0.0
description: Detached, but another runtime needs it.
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
Base.
"""

DEPENDANT = """
---
id: follower
kind: plugin
version: 1.0.0
description: Needs base.
runtime:
  type: function
  schedule:
    stage: post-turn
    trigger:
      type: auto
    needs: [base]
  function:
    handler: ./handler.py
---
Follower.
"""


def _run(session, registry, text="Hello"):
    sink = RecordingSink()
    execution = execution_create(session, "submit_actions", {"actions": [{"kind": "say", "text": text}]})
    outcome = execution_run(str(execution.pk), sink, plugin_registry=registry)
    assert outcome.committed, outcome
    return outcome, sink


def test_detached_leaf_freezes_its_resolved_inputs_and_turn_context(tmp_path):
    # given a detached reader that needs the output of a foreground runtime of the same stage
    plugin_write(tmp_path, "teller", STORY_PLUGIN)
    plugin_write(tmp_path, "source", SOURCE, {"handler.py": "def handle(ctx):\n    return {'mood': 'tense'}\n"})
    plugin_write(tmp_path, "reader", DETACHED_READER, {"handler.py": "def handle(ctx):\n    return {}\n"})
    registry = registry_from(tmp_path)
    session = session_create(plugins=["teller", "source", "reader"])

    # when a turn runs
    outcome, sink = _run(session, registry, "Whisper")

    # then the reader is a job carrying the frozen inputs, turn and origin; it did not run
    job = RuntimeJob.objects.get(session=session)
    assert job.runtime_id == "reader" and job.status == "queued"
    assert job.payload["inputs"] == {"mood": "tense"}
    assert job.payload["origin"]["sourceTurnId"] == outcome.turn_id and job.payload["origin"]["activation"] == "stage"
    assert job.payload["logicalTurn"] == 1 and job.payload["incarnation"] == session.incarnation
    assert job.payload["completion"]["maxQueueMs"] == 60000
    assert "reader" not in [p["runtimeId"] for t, p, *_ in sink.frames if t == "runtime.started"]
    assert [p["jobId"] for t, p, *_ in sink.frames if t == "runtime.deferred"] == [str(job.id)]


def test_detached_agent_runtime_runs_in_the_foreground_with_a_diagnostic(tmp_path):
    plugin_write(tmp_path, "teller", STORY_PLUGIN)
    plugin_write(tmp_path, "critic", DETACHED_AGENT)
    registry = registry_from(tmp_path)
    session = session_create(plugins=["teller", "critic"])
    _, sink = _run(session, registry)
    assert not RuntimeJob.objects.exists()
    assert "critic" in [p["runtimeId"] for t, p, *_ in sink.frames if t == "runtime.started"]
    diagnostic = TraceEvent.objects.get(session=session, type="runtime.detach.rejected")
    assert diagnostic.payload == {"runtimeId": "critic", "pluginId": "critic", "reason": "not-a-function-runtime"}


def test_detached_runtime_another_runtime_needs_runs_in_the_foreground(tmp_path):
    plugin_write(tmp_path, "teller", STORY_PLUGIN)
    plugin_write(tmp_path, "base", DEPENDED_ON, {"handler.py": "def handle(ctx):\n    return {'ok': True}\n"})
    plugin_write(tmp_path, "follower", DEPENDANT, {"handler.py": "def handle(ctx):\n    return {}\n"})
    registry = registry_from(tmp_path)
    session = session_create(plugins=["teller", "base", "follower"])
    _, sink = _run(session, registry)
    assert not RuntimeJob.objects.exists()
    completed = {p["runtimeId"]: p["status"] for t, p, *_ in sink.frames if t == "runtime.completed"}
    assert completed["base"] == "success" and completed["follower"] == "success"
    assert TraceEvent.objects.get(session=session, type="runtime.detach.rejected").payload["reason"] == "not-a-leaf"
