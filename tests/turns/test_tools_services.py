"""Imported service tools over /api/actions with the scripted model (spec 000 §导入的服务工具): a read
service becomes a read-only tool with the provider's description and schema and reads the
provider's own snapshot; a write service stages the provider's writes into the caller's commit; an
import without a provider is not offered and answers `unavailable` with the reason. The plugins are
in tests/turns/tools_support.py (larder provides, cook imports)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from plugins_app.models import PluginData
from plugins_app.registry import registry_reset
from tests.turns.test_actions_helpers import action_body, post_action, session_make, stream_read
from tests.turns.tools_support import builtin_dir_with_tools
from turns.models import TurnResult

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def plugins(settings, tmp_path):
    settings.COVEL_BUILTIN_PLUGINS_DIR = str(builtin_dir_with_tools(tmp_path / "builtin"))
    home = Path(settings.COVEL_HOME)
    for path in home.glob("cook-step-*.json"):
        path.unlink()
    registry_reset()
    yield home
    registry_reset()


def _step(home: Path, n: int) -> dict:
    return json.loads((home / f"cook-step-{n}.json").read_text(encoding="utf-8"))


def _play(api, plugins_active=("narrator", "larder", "cook")):
    session = session_make(plugins=plugins_active, characters=[("hero", "Hero", "player")])
    PluginData.objects.create(session=session, plugin_id="larder", namespace="stock", key="bread", value=5)
    frames = stream_read(post_action(api, action_body(session.id)))
    assert frames[-1]["type"] == "execution.completed" and frames[-1]["payload"]["committed"] is True, frames[-1]
    return session, frames


def _calls(frames, tool_name):
    return [f for f in frames if f["type"] in ("tool.completed", "tool.failed") and f["payload"].get("tool") == tool_name]


def test_read_and_write_services_become_tools_of_the_importing_runtime(api, plugins):
    session, frames = _play(api)
    offered = _step(plugins, 1)["tools"]
    # the imports are offered under their derived / `as` names with the provider's description and schema;
    # the import without a provider is not offered
    assert set(offered) == {"larder-stock", "take-from-larder", "runtime-done"}
    assert offered["larder-stock"]["description"] == "How many of an item the larder holds."
    assert offered["larder-stock"]["parameters"]["required"] == ["item"]
    assert offered["take-from-larder"]["parameters"]["required"] == ["item", "count"]
    # the read service answered from the provider's own snapshot, with the caller passed along
    stock = _calls(frames, "larder-stock")
    assert stock[0]["type"] == "tool.completed"
    assert stock[0]["payload"]["output"] == {"data": {"item": "bread", "count": 5, "caller": "cook"}}
    # arguments are checked on the tool side first: the field is named, the provider never runs
    assert stock[1]["type"] == "tool.failed" and stock[1]["payload"]["error"]["code"] == "invalid-input"
    # the write service staged the provider's write and said so; it committed with the turn
    take = _calls(frames, "take-from-larder")[0]["payload"]["output"]
    assert take["data"] == {"item": "bread", "left": 3}
    assert take["staged"]["count"] == 1 and take["staged"]["kinds"] == ["plugin.data"]
    assert PluginData.objects.get(session=session, plugin_id="larder", namespace="stock", key="bread").value == 3
    assert not PluginData.objects.filter(session=session, plugin_id="cook").exists()
    # the absent import answers unavailable with the reason and no plugin id
    missing = _calls(frames, "pantry-missing")[0]["payload"]
    assert missing["error"] == {"code": "unavailable",
                                "message": 'The tool "pantry-missing" is unavailable in this session: '
                                           "no active provider offers pantry.missing@1."}
    result = {r["runtimeId"]: r for r in TurnResult.objects.get(session=session).summary["runtimeResults"]}["cook"]
    assert result["status"] == "success"


def test_without_the_provider_no_service_tool_is_offered_and_the_runtime_still_runs(api, plugins):
    session, frames = _play(api, plugins_active=("narrator", "cook"))
    assert set(_step(plugins, 1)["tools"]) == {"runtime-done"}
    stock = _calls(frames, "larder-stock")[0]["payload"]
    assert stock["error"]["code"] == "unavailable" and "no active provider offers larder.stock@1" in stock["error"]["message"]
    # the story still committed
    assert frames[-1]["payload"]["committed"] is True
