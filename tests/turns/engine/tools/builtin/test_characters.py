"""list-characters, get-character, sync-characters."""

from tests.turns.engine.tools.support import run
from turns.engine.tools import CharacterRecord, InMemoryStateView

SU = CharacterRecord(id="char-abc123", name="苏婉", type="npc", description="青萍宗外门首席弟子，冰灵根修士。", version=3,
                     fields={"hp": 100, "status": "alive"}, updated_at="2025-01-02T00:00:00Z")
LIU = CharacterRecord(id="char-def", name="柳娘", type="npc", description="药王谷谷主", version=2, updated_at="2025-01-03T00:00:00Z")
PLAYER = CharacterRecord(id="char-xyz", name="柳无痕", type="player", description="青萍宗外门弟子", version=1)
YSOLDE = CharacterRecord(id="npc-keeper-ysolde", name="守灯人伊索德", type="npc", aliases=("伊索德", "守灯人"), version=1)
SCHEMA = {"types": ["npc", "companion"], "attributes": [
    {"id": "hp", "type": "number", "min": 0, "max": 100, "defaultValue": 100},
    {"id": "status", "type": "enum", "options": ["alive", "wounded", "dead"], "defaultValue": "alive"},
]}


def _state(*chars, schema=SCHEMA):
    return InMemoryStateView(characters=list(chars), character_schema=schema)


def test_list_sorts_by_version_then_recency_with_the_spec_layout():
    out = run("list-characters", {}, _state(PLAYER, LIU, SU))
    assert out.envelope["summary"] == (
        "Characters in session (3 total, sorted by frequency then recency):\n"
        "1. 苏婉 [npc] char-abc123 (v3) — 青萍宗外门首席弟子，冰灵根修士。\n"
        "2. 柳娘 [npc] char-def (v2) — 药王谷谷主\n"
        "3. 柳无痕 [player] char-xyz (v1) — 青萍宗外门弟子"
    )
    assert out.content["count"] == 3


def test_list_filter_and_empty_filter_names_existing_types():
    assert run("list-characters", {"type": "player"}, _state(PLAYER, SU)).content["count"] == 1
    empty = run("list-characters", {"type": "all"}, _state(PLAYER, SU))
    assert empty.envelope["summary"] == 'No characters of type "all". Types in this session: npc, player.'
    assert run("list-characters", {"type": ""}, _state(SU)).envelope["error"]["code"] == "invalid-input"
    assert run("list-characters", {"type": None}, _state(SU)).envelope["error"]["code"] == "invalid-input"


def test_list_caps_at_fifty_and_says_how_many_are_left():
    chars = [CharacterRecord(id=f"npc-{i}", name=f"N{i}", version=1) for i in range(53)]
    out = run("list-characters", {}, _state(*chars))
    assert out.content["count"] == 53 and len(out.content["characters"]) == 50
    assert out.envelope["summary"].endswith("… 3 more not listed. Filter by type, or look one up by name with get-character.")


def test_get_character_partial_match_and_summary():
    out = run("get-character", {"name": "苏"}, _state(SU, LIU))
    assert out.envelope["summary"] == (
        "Character: 苏婉 [npc] char-abc123\nDescription: 青萍宗外门首席弟子，冰灵根修士。\nVersion: 3\n\n"
        "Attributes:\n  hp: 100\n  status: alive"
    )
    assert out.content["character"]["id"] == "char-abc123"
    assert run("get-character", {"name": "伊索德"}, _state(YSOLDE)).content["character"]["id"] == "npc-keeper-ysolde"


def test_get_character_not_found_ambiguous_and_missing_query():
    missing = run("get-character", {"name": "伊索尔德"}, _state(YSOLDE, SU))
    assert missing.envelope["error"] == {"code": "not-found", "message": (
        'Character "伊索尔德" not found. Closest known names: 守灯人伊索德 (aka 伊索德, 守灯人). If it is one of them, use that name.')}
    maud = _state(CharacterRecord(id="npc-a", name="Maud"), CharacterRecord(id="npc-b", name="maud ", type="companion"))
    amb = run("get-character", {"name": "Maud"}, maud)
    assert amb.envelope["error"] == {"code": "ambiguous", "message": '"Maud" names 2 characters: Maud [npc-a]; maud  [npc-b]. Pass the id of the one you mean.'}
    assert run("get-character", {}, _state(SU)).envelope["error"]["code"] == "invalid-input"


def test_sync_creates_with_defaults_and_a_readable_id():
    out = run("sync-characters", {"creates": [{"name": "Lin Yao", "type": "npc", "description": "A scout."}]}, _state())
    assert out.envelope["summary"] == 'Created npc "Lin Yao" as npc-lin-yao. — A scout.'
    payload = out.proposals[0].payload
    assert payload == {"id": "npc-lin-yao", "name": "Lin Yao", "type": "npc", "fields": {"hp": 100, "status": "alive"},
                       "version": 1, "description": "A scout."}
    assert out.content["created"] == [{"characterId": "npc-lin-yao", "name": "Lin Yao", "type": "npc"}]


def test_sync_create_of_existing_name_and_type_is_unchanged():
    out = run("sync-characters", {"creates": [{"name": " 苏 婉", "type": "npc", "description": "other"}]}, _state(SU))
    assert out.envelope == {"summary": 'Character "苏婉" (npc) already exists as char-abc123. No new record created. '
                                       "Use sync-characters updates to modify it."}
    assert out.content["unchanged"] == [{"characterId": "char-abc123", "name": "苏婉", "type": "npc"}]
    assert out.proposals == []


def test_sync_alias_taken_by_another_character_fails_with_the_spec_text():
    out = run("sync-characters", {"creates": [{"name": "老妇人", "type": "npc", "aliases": ["守灯人"]}]}, _state(YSOLDE))
    assert out.envelope["error"] == {"code": "invalid-input", "message": (
        'creates[0]: "守灯人" is already a name of 守灯人伊索德 (aka 伊索德, 守灯人) [npc-keeper-ysolde]. '
        "If 老妇人 is that person, update npc-keeper-ysolde and create nothing. If the alias is wrong for 守灯人伊索德, "
        "remove it there first: update npc-keeper-ysolde with removeAliases. Otherwise leave this alias out.")}


def test_sync_player_cannot_take_an_existing_name():
    out = run("sync-characters", {"creates": [{"name": "伊索德", "type": "player"}]}, _state(YSOLDE))
    assert out.envelope["error"]["code"] == "invalid-input"
    assert "ask the player for another name" in out.envelope["error"]["message"]


def test_sync_update_merges_fields_bumps_version_and_shows_changes():
    out = run("sync-characters", {"updates": [{"id": "苏婉", "fields": {"hp": 60, "status": "wounded"}}]}, _state(SU))
    assert out.envelope["summary"] == 'Updated npc "苏婉" (char-abc123) → v4.\n  hp: 100 → 60\n  status: alive → wounded'
    assert out.proposals[0].payload["expectedVersion"] == 3
    assert out.proposals[0].payload["fields"] == {"hp": 60, "status": "wounded"}
    assert out.content["updated"] == [{"characterId": "char-abc123", "version": 4}]


def test_sync_batch_is_all_or_nothing_and_sees_earlier_items():
    ok = run("sync-characters", {"creates": [{"name": "Mira", "type": "npc"}], "updates": [{"id": "Mira", "fields": {"hp": 5}}]}, _state())
    assert [p.payload["version"] for p in ok.proposals] == [1, 2]
    bad = run("sync-characters", {"creates": [{"name": "Mira", "type": "npc"}], "updates": [{"id": "Nobody"}]}, _state())
    assert bad.envelope["error"]["code"] == "not-found"
    assert bad.envelope["error"]["message"].startswith('updates[0]: Character "Nobody" not found.')
    assert bad.envelope["error"]["message"].endswith("Nothing was updated.")
    assert bad.proposals == []


def test_sync_rejects_bad_field_values_and_unknown_types():
    bad = run("sync-characters", {"updates": [{"id": "char-abc123", "fields": {"hp": "lots"}}]}, _state(SU))
    assert bad.envelope["error"]["code"] == "invalid-input"
    assert "updates[0].fields.hp" in bad.envelope["error"]["message"]
    kind = run("sync-characters", {"creates": [{"name": "X", "type": "dragon"}]}, _state())
    assert kind.envelope["error"]["message"] == 'creates[0]: unknown type "dragon"; use one of: player, npc, companion.'


def test_sync_undeclared_field_is_kept_with_a_warning():
    out = run("sync-characters", {"updates": [{"id": "char-abc123", "fields": {"mood": "calm"}}]}, _state(SU))
    assert "Warning: updates[0].fields.mood is not declared in the world schema; kept as is." in out.envelope["summary"]


def test_sync_remove_then_add_alias_moves_it_between_characters():
    out = run("sync-characters", {"updates": [
        {"id": "npc-keeper-ysolde", "removeAliases": ["守灯人"]},
        {"id": "char-abc123", "aliases": ["守灯人"]},
    ]}, _state(YSOLDE, SU))
    assert out.proposals[0].payload["aliases"] == ["伊索德"]
    assert out.proposals[1].payload["aliases"] == ["守灯人"]


def test_sync_ambiguous_update_target():
    maud = _state(CharacterRecord(id="npc-a", name="Maud"), CharacterRecord(id="npc-b", name="maud", type="companion"))
    out = run("sync-characters", {"updates": [{"id": "Maud"}]}, maud)
    assert out.envelope["error"] == {"code": "ambiguous", "message": (
        'updates[0]: "Maud" names 2 characters: Maud [npc-a]; maud [npc-b]. Pass the id of the one you mean. Nothing was updated.')}


def test_sync_empty_batch_succeeds_without_proposals():
    out = run("sync-characters", {}, _state(SU))
    assert out.status == "success" and out.proposals == []
    assert out.envelope == {"summary": "No character changes recorded."}


def test_sync_limits_batch_sizes():
    creates = [{"name": f"N{i}", "type": "npc"} for i in range(6)]
    assert run("sync-characters", {"creates": creates}, _state()).envelope["error"]["code"] == "invalid-input"
