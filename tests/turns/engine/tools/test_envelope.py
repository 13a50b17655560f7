"""The model-facing envelope and modelFacingJson."""

from turns.engine.tools.envelope import error_envelope, internal_message, model_facing_json, success_envelope


def test_done_summary_in_each_locale():
    assert success_envelope(content=None, locale="en-US") == {"summary": "Done."}
    assert success_envelope(content={}, locale="zh-CN") == {"summary": "完成。"}


def test_staged_counts_proposals_and_events_with_kinds_in_first_seen_order():
    env = success_envelope(
        content={"key": "gate"},
        locale="zh-CN",
        proposal_kinds=["plugin.data", "character.upsert", "plugin.data"],
        event_count=1,
        summary="Queued a note.",
        data={"key": "gate"},
        has_model_view=True,
    )
    assert list(env) == ["summary", "data", "staged"]
    assert env["staged"] == {
        "count": 4,
        "kinds": ["plugin.data", "character.upsert", "event"],
        "notice": "已暂存，回合结束时生效（可能被拒绝）。",
    }
    en = success_envelope(content=None, locale="en-US", proposal_kinds=["plugin.data"])
    assert en["staged"]["notice"] == "Staged: it takes effect when the turn ends and may still be rejected."


def test_data_drops_top_level_ui_and_bookkeeping():
    env = success_envelope(
        content={
            "ok": True,
            "ui": [{"parts": []}],
            "id": "0b9a3c52-8f6e-4a51-9f7e-0d1c2b3a4f5e",
            "createdAt": "2025-01-01T00:00:00Z",
            "items": [{"name": "lamp", "updated_at": 5, "seen": "2025-01-01T10:00:00+00:00"}],
            "slug": "npc-lin-yao",
        },
        locale="en-US",
    )
    assert env == {"data": {"ok": True, "items": [{"name": "lamp"}], "slug": "npc-lin-yao"}}


def test_a_model_view_with_only_a_summary_sends_no_body():
    env = success_envelope(content={"big": "x" * 100}, locale="en-US", summary="Short.", has_model_view=True)
    assert env == {"summary": "Short."}


def test_internal_message_keeps_first_line_replaces_uuids_and_cuts_to_300():
    text = "row 0b9a3c52-8f6e-4a51-9f7e-0d1c2b3a4f5e exploded " + "x" * 400 + "\nstack line"
    message = internal_message("lookup", RuntimeError(text))
    assert message.startswith('Tool "lookup" failed: row <id> exploded ')
    assert len(message) == len('Tool "lookup" failed: ') + 300
    assert "stack" not in message


def test_error_envelope_shape():
    assert error_envelope("not-found", "Nothing.", "Look again.") == {
        "error": {"code": "not-found", "message": "Nothing.", "hint": "Look again."}
    }
    assert error_envelope("timeout", "Slow.") == {"error": {"code": "timeout", "message": "Slow."}}


def test_model_facing_json_removes_uuid_items_from_arrays():
    assert model_facing_json(["a", "0b9a3c52-8f6e-4a51-9f7e-0d1c2b3a4f5e"]) == ["a"]
