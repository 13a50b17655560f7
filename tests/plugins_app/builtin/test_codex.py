"""codex: sync-codex-entries through the ToolExecutor."""

from __future__ import annotations

from turns.engine.tools.context import InMemoryStateView
from tests.plugins_app.builtin.support import error_of, payloads

EXISTING = {
    "codex-water-gate": {"key": "codex-water-gate", "title": "Water Gate", "category": "location",
                         "content": "Closes at the second watch.", "tags": ["gate"], "rarity": "rare", "turn": 1},
}


def _entry(title: str, **extra) -> dict:
    return {"category": "lore", "title": title, "content": f"About {title}.", **extra}


def test_manifest_loads(builtin_plugins):
    record = builtin_plugins.get("codex")
    assert record.host_state == "loaded" and list(record.registrations.tools) == ["sync-codex-entries"]


def test_creates_by_title_extends_matches_and_caps_new_entries(run_tool):
    state = InMemoryStateView(plugin_data={("codex", "entries"): EXISTING})
    entries = [
        {"category": "item", "title": "  water gate ", "content": "Opens with the temple bell.", "tags": ["bell", "gate"], "rarity": "common"},
        _entry("Salt Voucher", tags=["salt"]),
        _entry("西侧旧药园"),
        {"category": "lore", "title": "Salt voucher", "content": "Stamped across the seam.", "rarity": "legendary"},
        _entry("Reed Marsh"),
        _entry("Canal Gang"),
    ]
    outcome = run_tool("codex", "sync-codex-entries", {"entries": entries}, state)
    assert outcome.status == "success", outcome.envelope
    assert outcome.content["created"] == ["codex-salt-voucher", "codex-西侧旧药园", "codex-reed-marsh"]
    assert outcome.content["updated"] == ["codex-water-gate"]
    assert outcome.content["skipped"] == ["Canal Gang"]
    assert outcome.envelope["summary"] == (
        "Codex: 3 created, 1 updated. At most 3 new entries per turn; skipped: Canal Gang."
    )
    [batch] = payloads(outcome, "plugin.data.batch")
    values = {e["key"]: e["value"] for e in batch["entries"]}
    gate = values["codex-water-gate"]
    assert gate["content"] == "Closes at the second watch.\nOpens with the temple bell."
    assert gate["tags"] == ["gate", "bell"] and gate["rarity"] == "rare" and gate["category"] == "location"
    voucher = values["codex-salt-voucher"]
    assert voucher["content"] == "About Salt Voucher.\nStamped across the seam." and voucher["rarity"] == "legendary"
    assert values["codex-西侧旧药园"]["rarity"] == "common"
    assert len(payloads(outcome, "ui.render")) == 1


def test_key_collision_gets_a_suffix_and_chinese_summary(run_tool):
    state = InMemoryStateView(plugin_data={("codex", "entries"): {"codex-lamp": {"key": "codex-lamp", "title": "Old lamp"}}})
    outcome = run_tool("codex", "sync-codex-entries", {"entries": [_entry("Lamp")]}, state, locale="zh-CN")
    assert outcome.content["created"] == ["codex-lamp-2"]
    assert outcome.envelope["summary"] == "图鉴：新建 1 条，补充 0 条。"


def test_rejects_bad_entries(run_tool):
    code, _ = error_of(run_tool("codex", "sync-codex-entries", {"entries": []}))
    assert code == "invalid-input"
    code, message = error_of(run_tool("codex", "sync-codex-entries", {"entries": [{**_entry("X"), "category": "weather"}]}))
    assert code == "invalid-input" and "category" in message
