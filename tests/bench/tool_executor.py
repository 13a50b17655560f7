"""Benchmark: ToolExecutor overhead per tool call, and one delegate call, embedded shape.

Figures (milliseconds, median and p95), each beside an anchor measured in the same run:

- read-only batch of 8: ``execute_batch`` of 8 readOnly+concurrencySafe calls (one parallel pool),
  per call = batch time / 8; anchor: the same 8 tool functions called directly.
- write call: ``execute_one`` of a tool that stages one ``plugin.data`` proposal (repair, schema,
  proposal validation, envelope); anchor: the bare function call.
- delegate call: ``tool.completed.durationMs`` of ``captain/bridge``'s delegate to its scripted
  sub-agent (two scripted model calls, one write-service call, one read-only call) over
  POST /api/actions (tests/turns/tools_support.py plugins); anchor: a bare ``transaction.atomic()``
  writing one PluginData row.
- character delegate: the same for ``troupe/director``'s ``character-actor@1`` delegation
  (tests/turns/cast_support.py plugins).

Run: .venv/bin/python tests/bench/tool_executor.py [--calls 400] [--turns 15]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def _pct(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))]


def _line(label: str, values: list[float], anchor_label: str, anchor: list[float]) -> None:
    print(f"{label:<34} median {statistics.median(values):7.3f} ms  p95 {_pct(values, 0.95):7.3f} ms   |  "
          f"anchor {anchor_label}: median {statistics.median(anchor):7.4f} ms  p95 {_pct(anchor, 0.95):7.4f} ms"
          f"  (n={len(values)})")


def executor_figures(calls: int) -> None:
    from plugins_app.toolkit import PLUGIN_DATA, Proposal, ToolResult, tool
    from turns.engine.tools import InMemoryStateView, ToolCall, ToolContext, ToolExecutor, default_registry

    def read(args, ctx):
        return {"value": args.get("key"), "rows": [1, 2, 3]}

    def write(args, ctx):
        return ToolResult(content={"ok": True}, proposals=[Proposal(PLUGIN_DATA, {"namespace": "n", "key": args["key"],
                                                                                  "value": {"v": 1}})])

    params = {"type": "object", "required": ["key"], "properties": {"key": {"type": "string"}}}
    readers = [tool(name=f"read-{i}", description="Read.", parameters=params, execute=read,
                    annotations={"readOnly": True, "idempotent": True, "concurrencySafe": True}) for i in range(8)]
    writer = tool(name="write-one", description="Write.", parameters=params, execute=write)
    registry = default_registry()
    registry.register_plugin_tools("bench", readers + [writer])
    executor = ToolExecutor(registry)
    names = frozenset([t.name for t in readers] + [writer.name])
    ctx = ToolContext(session_id="s", plugin_id="bench", runtime_id="bench", state=InMemoryStateView(),
                      authorized_tool_names=names, locale="en-US")
    batch = [ToolCall(f"c{i}", f"read-{i}", '{"key":"k"}') for i in range(8)]
    rounds = max(10, calls // 8)
    per_call, bare_read = [], []
    for _ in range(rounds):
        t0 = time.perf_counter()
        executor.execute_batch(batch, ctx)
        per_call.append((time.perf_counter() - t0) * 1000 / 8)
        t0 = time.perf_counter()
        for _i in range(8):
            read({"key": "k"}, None)
        bare_read.append((time.perf_counter() - t0) * 1000 / 8)
    writes, bare_write = [], []
    for i in range(calls):
        t0 = time.perf_counter()
        executor.execute_one(ToolCall(f"w{i}", "write-one", '{"key":"k"}'), ctx)
        writes.append((time.perf_counter() - t0) * 1000)
        t0 = time.perf_counter()
        write({"key": "k"}, None)
        bare_write.append((time.perf_counter() - t0) * 1000)
    executor.close()
    _line("read-only batch of 8 (per call)", per_call, "bare function call", bare_read)
    _line("write call (plugin.data staged)", writes, "bare function call", bare_write)


def delegate_figures(turns: int) -> None:
    from django.db import connection, transaction
    from django.test import Client
    from django.test.utils import setup_test_environment

    setup_test_environment()
    connection.creation.create_test_db(verbosity=0)
    from django.conf import settings

    from plugins_app.models import PluginData
    from plugins_app.registry import registry_reset
    from tests.turns.test_actions_helpers import action_body, post_action, session_make, stream_read
    from tests.turns.tools_support import builtin_dir_with_tools
    from turns.models import TraceEvent

    settings.COVEL_BUILTIN_PLUGINS_DIR = str(builtin_dir_with_tools(Path(tempfile.mkdtemp()) / "builtin"))
    registry_reset()
    client = Client()
    durations, anchor = [], []
    for n in range(turns):
        session = session_make(plugins=("narrator", "larder", "captain"), characters=[("hero", "Hero", "player")])
        PluginData.objects.create(session=session, plugin_id="larder", namespace="stock", key="bread", value=5)
        stream_read(post_action(client, action_body(session.id)))
        rows = TraceEvent.objects.filter(session=session, type="tool.completed", runtime_id="captain/bridge")
        durations += [r.payload["durationMs"] for r in rows if r.payload.get("tool") == "delegate"]
        t0 = time.perf_counter()
        with transaction.atomic():
            PluginData.objects.update_or_create(session=session, plugin_id="bench", namespace="n", key=str(n),
                                                defaults={"value": {"v": n}})
        anchor.append((time.perf_counter() - t0) * 1000)
    if n >= 0 and durations:
        _line("delegate call (scripted sub-agent)", [float(d) for d in durations], "bare transaction", anchor)
    character_delegate_figures(turns, client, anchor)


def character_delegate_figures(turns: int, client, anchor: list[float]) -> None:
    """tool.completed.durationMs of troupe/director's character delegation (name resolution, profile
    and history, one scripted model call, segment check; tests/turns/cast_support.py plugins)."""
    from django.conf import settings

    from plugins_app.registry import registry_reset
    from sessions.models import Character
    from tests.turns.cast_support import builtin_dir_with_cast
    from tests.turns.test_actions_helpers import action_body, post_action, session_make, stream_read
    from turns.models import TraceEvent

    settings.COVEL_BUILTIN_PLUGINS_DIR = str(builtin_dir_with_cast(Path(tempfile.mkdtemp()) / "builtin"))
    registry_reset()
    durations = []
    for _ in range(turns):
        session = session_make(plugins=("narrator", "troupe", "casting"), characters=[("hero", "Hero", "player")])
        Character.objects.create(session=session, character_id="mara-id", name="Mara", type="npc", aliases=["The Lamplighter"])
        stream_read(post_action(client, action_body(session.id)))
        rows = TraceEvent.objects.filter(session=session, type="tool.completed", runtime_id="troupe/director")
        durations += [r.payload["durationMs"] for r in rows if r.payload.get("tool") == "delegate"]
    if durations:
        _line("character delegate (scripted actor)", [float(d) for d in durations], "bare transaction", anchor)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--turns", type=int, default=15)
    args = parser.parse_args()
    home = tempfile.mkdtemp(prefix="covel-bench-tools-")
    os.environ.setdefault("COVEL_HOME", home)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "covel.settings.test")
    import django

    django.setup()
    executor_figures(args.calls)
    delegate_figures(args.turns)


if __name__ == "__main__":
    main()
