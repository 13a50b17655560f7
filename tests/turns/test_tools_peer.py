"""The issue-19 tool kinds against a model that is not ours: every slot points at
``tests.model_peer.ModelPeer`` (real HTTP on 127.0.0.1, tool-call arguments streamed in pieces
without ``index``), whose brain calls only what each request offers — search-tools and then the tool
it loaded, an imported read and write service, delegate (and, as the sub-agent, the write service),
an asset request. The plugins are in tests/turns/tools_support.py."""
from __future__ import annotations

import json
import time
from typing import Any

import pytest

from plugins_app.models import PluginData
from plugins_app.registry import registry_reset
from tests.model_peer import ModelPeer, Quirks, Reply
from tests.turns.test_actions_helpers import action_body, post_action, session_make, stream_read
from tests.turns.test_real_model_game import llm_toml
from tests.turns.tools_support import builtin_dir_with_tools
from turns.models import TurnResult

pytestmark = pytest.mark.django_db(transaction=True)


def _done(body: dict[str, Any]) -> list[str]:
    """Names of the tools already answered in this conversation."""
    calls = {c["id"]: c["function"]["name"] for m in body.get("messages") or [] if m.get("role") == "assistant"
             for c in m.get("tool_calls") or []}
    return [calls.get(m.get("tool_call_id"), "") for m in body.get("messages") or [] if m.get("role") == "tool"]


def brain(body: dict[str, Any]) -> Reply:
    """A model that uses what it is offered, one step at a time."""
    offered = [t["function"]["name"] for t in body.get("tools") or []]
    done = _done(body)
    system = (body.get("messages") or [{}])[0].get("content") or ""

    def next_of(*plan: tuple[str, dict]) -> Reply:
        for name, args in plan:
            if name in offered and name not in done:
                return Reply(calls=[(name, args)])
        return Reply(calls=[("runtime-done", {})]) if "runtime-done" in offered else Reply(text="Done.")

    if "keep watch from the tower" in system:
        return next_of(("search-tools", {"query": "ring the harbour bell"}), ("probe-17", {"notes": [{"id": "a"}]}))
    if "You cook." in system:
        return next_of(("larder-stock", {"item": "bread"}), ("take-from-larder", {"item": "bread", "count": 1}))
    if "You command the ship." in system:
        return next_of(("delegate", {"target": {"runtimeId": "scout"}, "brief": "Count the gulls."}))
    if "crow's nest" in system:
        if "take-bread" in offered and "take-bread" not in done:
            return Reply(calls=[("take-bread", {"item": "bread", "count": 1})])
        return Reply(text="Twelve gulls.")
    if "You paint." in system:
        return next_of(("paint-scene", {"prompt": "A harbour at dusk"}))
    return Reply(text="The harbour lies quiet under the gulls, and the bell hangs still.")


@pytest.fixture
def peer(tmp_path, settings):
    settings.COVEL_BUILTIN_PLUGINS_DIR = str(builtin_dir_with_tools(tmp_path / "builtin"))
    registry_reset()
    with ModelPeer(quirks=Quirks(indexless=True), brain=brain) as server:
        settings.COVEL_LLM_TOML = llm_toml(tmp_path, server)
        settings.COVEL_OUTBOUND_ALLOW = ("127.0.0.1",)
        yield server
    registry_reset()


def test_a_foreign_model_finds_deferred_tools_uses_services_delegates_and_paints(api, peer):
    session = session_make(plugins=("narrator", "lookout", "larder", "cook", "captain", "painter"),
                           characters=[("hero", "Hero", "player")])
    PluginData.objects.create(session=session, plugin_id="larder", namespace="stock", key="bread", value=5)
    frames = stream_read(post_action(api, action_body(session.id)))
    assert frames[-1]["type"] == "execution.completed" and frames[-1]["payload"]["committed"] is True, frames[-1]["payload"]
    results = {r["runtimeId"]: r["status"] for r in TurnResult.objects.get(session=session).summary["runtimeResults"]}
    assert results == {"narrator": "success", "lookout": "success", "cook": "success", "captain/bridge": "success",
                       "painter": "success"}
    # deferred: the lookout's first request had no probe; the tool it searched for came with the next
    lookout = [r for r in peer.requests if "keep watch from the tower" in r.system]
    assert "probe-17" not in lookout[0].tool_names and "search-tools" in lookout[0].tool_names
    assert "probe-17" in lookout[1].tool_names
    assert PluginData.objects.get(session=session, plugin_id="lookout", namespace="bell", key="rung").value == {"notes": [{"id": "a"}]}
    # services and delegate: cook and the scout (sub-agent of the bridge) each took one bread through
    # the write service; the two post-turn runtimes run in parallel on the same snapshot (5), so
    # both staged 4 and the stored value is 4
    takes = [f["payload"]["output"]["data"] for f in frames if f["type"] == "tool.completed"
             and f["payload"].get("tool") in ("take-from-larder", "take-bread")]
    assert takes == [{"item": "bread", "left": 4}] * 2
    assert PluginData.objects.get(session=session, plugin_id="larder", namespace="stock", key="bread").value == 4
    scout = [r for r in peer.requests if "crow's nest" in r.system]
    assert scout and "delegate" not in scout[0].tool_names
    # the painter's request became a real image
    deadline = time.monotonic() + 15
    record = None
    while time.monotonic() < deadline:
        row = PluginData.objects.filter(session=session, plugin_id="painter", namespace="_assets").first()
        if row is not None and row.value.get("status") == "done":
            record = row.value
            break
        time.sleep(0.05)
    assert record is not None and record["ref"]["mime"] == "image/png"
    assert not peer.errors, json.dumps(peer.errors)[:500]
