"""guide: generate-guide through the ToolExecutor."""

from __future__ import annotations

from tests.plugins_app.builtin.support import error_of, payloads

ARGS = {
    "scene": "The lantern boat",
    "recap": "You boarded the drifting boat and found pebbles in the voucher box.",
    "decision": "Do you report to the inspector or search the hold first?",
    "prompts": [
        {"text": "I search the hold quietly.", "kind": "act"},
        {"text": "Ask the boatmen what they drank.", "kind": "ask"},
        {"text": "I wait and watch the lantern turn.", "kind": "observe"},
    ],
}


def test_manifest_loads(builtin_plugins):
    record = builtin_plugins.get("guide")
    assert record.host_state == "loaded" and list(record.registrations.tools) == ["generate-guide"]


def test_writes_the_latest_guide_once(run_tool):
    outcome = run_tool("guide", "generate-guide", ARGS)
    assert outcome.status == "success", outcome.envelope
    assert outcome.envelope["summary"] == "Guide saved: 3 quick replies."
    # one row, guides/latest; each turn's guide is on record in its message's ui block, not copied per turn
    assert payloads(outcome, "plugin.data.batch") == []
    [write] = payloads(outcome, "plugin.data")
    assert (write["namespace"], write["key"]) == ("guides", "latest")
    assert write["value"] == {**ARGS, "turn": 3}
    [ui] = payloads(outcome, "ui.render")
    assert ui["parts"][0]["type"] == "guide.block"
    assert {k: outcome.content[k] for k in ("scene", "recap", "decision", "prompts")} == ARGS
    assert run_tool("guide", "generate-guide", ARGS, locale="zh-CN").envelope["summary"] == "指引已保存：3 条快捷回复。"


def test_rejects_too_few_or_duplicate_prompts(run_tool):
    code, message = error_of(run_tool("guide", "generate-guide", {**ARGS, "prompts": ARGS["prompts"][:2]}))
    assert code == "invalid-input" and "prompts" in message
    dup = {**ARGS, "prompts": ARGS["prompts"] + [dict(ARGS["prompts"][0])]}
    outcome = run_tool("guide", "generate-guide", dup)
    assert error_of(outcome) == ("invalid-input", "prompts: the same reply appears twice (I search the hold quietly.); give distinct replies")
    assert outcome.proposals == []
