"""Registry: the spec overview table, FRAMEWORK_TOOL_NAMES and atomic plugin batches."""

import glob

import pytest

from turns.engine.tools import FRAMEWORK_TOOL_NAMES, ToolRegistrationError, ToolRegistry, default_registry, tool
from turns.engine.tools.registry import LOOP_HANDLED_TOOL_NAMES
from tests.shared_paths import SPEC_DIR

SPEC_PATH = glob.glob(str(SPEC_DIR / "000_*.txt"))[0]


def _overview_rows():
    lines = open(SPEC_PATH, encoding="utf-8").read().split("\n")
    start = lines.index("概览") + 2  # skip the header row
    rows = []
    for line in lines[start:]:
        if not line.strip():
            break
        cells = line.split("\t")
        rows.append((cells[0], cells[1]))
    return rows


def test_framework_names_match_the_overview_table_both_ways():
    table = {name for name, source in _overview_rows() if source in ("builtin", "注入")}
    assert FRAMEWORK_TOOL_NAMES == table


def test_every_builtin_row_except_loop_handled_ones_is_registered():
    table = {name for name, source in _overview_rows() if source == "builtin"}
    assert default_registry().builtin_names() == table - LOOP_HANDLED_TOOL_NAMES


def _t(name):
    return tool(name=name, description="d", execute=lambda a, c: None)


def test_plugin_tools_resolve_only_for_their_plugin():
    reg = ToolRegistry()
    reg.register_plugin_tools("codex", [_t("sync-codex-entries")])
    reg.register_plugin_tools("other", [_t("sync-codex-entries")])
    assert reg.resolve("sync-codex-entries", "codex").plugin_id == "codex"
    assert reg.resolve("sync-codex-entries", "guide") is None
    assert reg.resolve("sync-codex-entries", None) is None


def test_duplicate_name_rolls_back_the_whole_batch():
    reg = ToolRegistry()
    with pytest.raises(ToolRegistrationError):
        reg.register_plugin_tools("codex", [_t("a"), _t("b"), _t("a")])
    assert reg.plugin_tool_names("codex") == frozenset()


def test_reserved_framework_name_rolls_back_the_whole_batch():
    reg = default_registry()
    with pytest.raises(ToolRegistrationError) as info:
        reg.register_plugin_tools("codex", [_t("a"), _t("search-tools")])
    assert "reserved" in str(info.value)
    assert reg.plugin_tool_names("codex") == frozenset()


def test_builtins_resolve_with_builtin_source_without_context():
    resolved = default_registry().resolve("create-form", None)
    assert resolved.source == "builtin"
