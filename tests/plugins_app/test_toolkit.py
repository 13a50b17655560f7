"""The plugin toolkit (spec 000 §创建新工具, §短 ID, §数据集工具 键的规则): what plugin code imports,
and the helpers it offers behave as the spec states."""
from __future__ import annotations

import ast
import random
import re
import sys
from pathlib import Path

import pytest

import plugins_app.toolkit as toolkit
from plugins_app.registry import registry_build
from plugins_app.toolkit import dataset_key, short_id, short_id_batch, word_id
from turns.engine.tools import InMemoryStateView, ToolCall, ToolContext, ToolExecutor
from turns.engine.tools.registry import ToolRegistry

BUILTIN_DIR = Path(__file__).resolve().parents[2] / "plugins_app" / "builtin"
FIRST_PARTY = {"covel", "sessions", "plugins_app", "turns", "jobs", "media", "tests"}
FRAMEWORKS = {"django", "celery", "kombu", "channels", "ninja", "daphne"}


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module) of every non-relative import in a file, nested ones included."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.lineno, node.module))
    return out


def test_builtin_plugins_import_only_the_toolkit_from_the_host():
    # given every Python file of every builtin plugin
    files = sorted(BUILTIN_DIR.rglob("*.py"))
    assert len(files) > 20
    # when their imports are read
    offending = [
        f"{path.relative_to(BUILTIN_DIR)}:{line} imports {module}"
        for path in files
        for line, module in _imports(path)
        if (module.split(".")[0] in FIRST_PARTY and module != "plugins_app.toolkit")
        or module.split(".")[0] in FRAMEWORKS
    ]
    # then nothing but plugins_app.toolkit (and the standard library / plain libraries) is used
    assert offending == []


def test_the_toolkit_exports_what_it_lists():
    missing = [name for name in toolkit.__all__ if not hasattr(toolkit, name)]
    assert missing == []
    assert {"tool", "Tool", "ToolResult", "ToolError", "Proposal", "CallContext", "short_id", "short_id_batch",
            "dataset_key", "word_id", "instruction_locale_for", "module_load_by_path"} <= set(toolkit.__all__)


def test_short_id_is_label_words_plus_eight_random_hex_digits():
    source = random.Random(7)
    first = short_id("item", "Dragon Sword", "sess-1", source)
    again = short_id("item", "Dragon Sword", "sess-1", source)
    assert re.fullmatch(r"item-dragon-sword-[0-9a-f]{8}", first)
    assert first != again  # every call draws a new id, also for the same label
    assert re.fullmatch(r"item-[0-9a-f]{8}", short_id("item", "龙息术", "sess-1"))
    long_label = "word " * 20
    slug = short_id("item", long_label).split("-", 1)[1].rsplit("-", 1)[0]
    assert len(slug) <= 32 and not slug.endswith("-")


def test_short_id_does_not_depend_on_the_session_or_on_process_state():
    # the same seeded random with different session ids draws the same suffix: the session takes no part
    assert short_id("npc", "Lin", "a", random.Random(1)) == short_id("npc", "Lin", "b", random.Random(1))
    # the default source is the system CSPRNG: two fresh calls do not collide
    assert len({short_id("npc", "Lin") for _ in range(200)}) == 200


def test_short_id_batch_never_repeats_within_a_batch():
    class Stuck(random.Random):
        """A random source that repeats its first draw once, as a colliding source would."""

        def __init__(self):
            super().__init__(3)
            self.draws: list[int] = []

        def getrandbits(self, k):
            value = super().getrandbits(k) if len(self.draws) != 1 else self.draws[0]
            self.draws.append(value)
            return value

    ids = short_id_batch("item", ["Sword", "Sword", "sword!"], "s", Stuck())
    assert len(ids) == 3 and len(set(ids)) == 3
    assert all(re.fullmatch(r"item-sword-[0-9a-f]{8}", i) for i in ids)


def test_word_id_and_dataset_key_follow_the_spec():
    assert word_id("npc", "Lin Yao", set()) == "npc-lin-yao"
    assert word_id("npc", "Lin Yao", {"npc-lin-yao"}) == "npc-lin-yao-2"
    assert re.fullmatch(r"char-[0-9a-f]{8}", word_id("char", "林瑶", set()))
    assert word_id("char", "林瑶", set()) == word_id("char", "林瑶", {"other"})  # stable digest
    assert dataset_key("  Iron\u3000 Sword ") == "iron sword"
    assert dataset_key("ＳＷＯＲＤ_01") == "sword_01"


def _community_plugin(root: Path) -> Path:
    plugin = root / "stamp"
    (plugin / "server").mkdir(parents=True)
    (plugin / "PLUGIN.md").write_text(
        "---\nid: stamp\nkind: plugin\ndescription: Stamps a note.\nentry: ./server/entry.py\n"
        "contributes:\n  tools: [stamp-note]\n  data:\n    notes: {}\n---\nStamp notes.\n", encoding="utf-8")
    (plugin / "server" / "entry.py").write_text(
        "from plugins_app.toolkit import PLUGIN_DATA, Proposal, ToolResult, instruction_locale_for, short_id, tool\n"
        "\n"
        "def _execute(args, ctx):\n"
        "    key = short_id('note', args['text'], ctx.session_id)\n"
        "    done = '已记下。' if instruction_locale_for(ctx.locale) == 'zh-CN' else 'Noted.'\n"
        "    return ToolResult(content={'key': key}, summary=done, proposals=[Proposal(kind=PLUGIN_DATA, payload={\n"
        "        'namespace': 'notes', 'key': key, 'value': args['text']})])\n"
        "\n"
        "def register(api):\n"
        "    api.register_tool(tool(name='stamp-note', description='Write one note.', execute=_execute,\n"
        "        parameters={'type': 'object', 'required': ['text'], 'properties': {'text': {'type': 'string'}}}))\n",
        encoding="utf-8")
    return plugin


def test_a_community_plugin_built_on_the_toolkit_loads_and_its_tool_stages_a_proposal(tmp_path):
    # given a community plugin whose entry module uses only the toolkit
    _community_plugin(tmp_path / "plugins")
    registry = registry_build(builtin_dir=tmp_path / "no-builtins", community_dir=tmp_path / "plugins")
    record = registry.get("stamp")
    # a community entry is not imported at start: it waits for a session's server-code grant
    assert record is not None and record.is_code_pending and record.host_state == "installed"
    record = registry.entry_ensure("stamp")  # what the granted caller does
    assert record.host_state == "loaded", record.error
    # when its registered tool runs through the engine's executor
    definition = record.registrations.tools["stamp-note"].options["definition"]
    tools = ToolRegistry()
    tools.register_plugin_tools("stamp", [definition])
    executor = ToolExecutor(tools)
    context = ToolContext(session_id="s-1", plugin_id="stamp", runtime_id="stamp", state=InMemoryStateView(),
                          authorized_tool_names=frozenset({"stamp-note"}), locale="zh-CN")
    [outcome] = executor.execute_batch([ToolCall(call_id="c1", name="stamp-note", arguments='{"text": "Bell at dusk"}')], context)
    # then it answers in the instruction locale and stages one plugin.data proposal under a short id
    assert outcome.envelope == {"summary": "已记下。", "staged": {
        "count": 1, "kinds": ["plugin.data"], "notice": "已暂存，回合结束时生效（可能被拒绝）。"}}, outcome.envelope
    [proposal] = outcome.proposals
    assert proposal.kind == "plugin.data" and proposal.payload["value"] == "Bell at dusk"
    assert re.fullmatch(r"note-bell-at-dusk-[0-9a-f]{8}", proposal.payload["key"])
    assert "covel_plugin_stamp.server.entry" in sys.modules
