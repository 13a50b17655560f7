"""memory-search: BM25 tokenisation, sources, interleaving and excerpts."""

from tests.turns.engine.tools.support import run
from turns.engine.tools import CharacterRecord, InMemoryStateView, LorebookEntry, MemoryMessage, SearchableRecord
from turns.engine.tools.builtin.memory_search import excerpt, interleave, tokenize


def test_tokenize_uses_cjk_bigrams_and_folds_plurals_and_possessives():
    assert tokenize("灯塔守人") == ["灯塔", "塔守", "守人"]
    assert tokenize("The lamp's lamps cities boxes") == ["the", "lamp", "lamp", "city", "box"]


def test_recall_finds_messages_and_summaries():
    state = InMemoryStateView(
        messages=[MemoryMessage("user", "We reached the lighthouse at dusk."), MemoryMessage("assistant", "The sea was calm.")],
        summaries=[MemoryMessage("summary", "Earlier, Mira lost her brass key.")],
    )
    out = run("memory-search", {"query": "Mira key", "scope": "recall"}, state)
    assert out.content["results"][0]["role"] == "summary"
    assert out.envelope["summary"].startswith('Memories matching "Mira key" (1):\n1. [recall] summary: Earlier, Mira')


def test_recall_only_reads_the_last_500_messages():
    old = [MemoryMessage("user", "the ancient zeppelin")] + [MemoryMessage("user", f"filler {i}") for i in range(500)]
    assert run("memory-search", {"query": "zeppelin"}, InMemoryStateView(messages=old)).content["results"] == []


def test_archival_skips_disabled_lorebook_and_uuid_keys():
    state = InMemoryStateView(
        lorebook=[
            LorebookEntry("0b9a3c52-8f6e-4a51-9f7e-0d1c2b3a4f5e", ("",), "The lighthouse keeper guards the lamp."),
            LorebookEntry("lore-off", ("lamp",), "A disabled lamp story.", enabled=False),
        ],
        characters=[CharacterRecord(id="npc-ysolde", name="Ysolde", description="Keeper of the lamp")],
        searchable=[SearchableRecord("memory", "facts", "0b9a3c52-8f6e-4a51-9f7e-0d1c2b3a4f5f", "Ysolde fears the sea")],
    )
    out = run("memory-search", {"query": "lamp keeper Ysolde", "scope": "archival", "limit": 10}, state)
    texts = [r["text"] for r in out.content["results"]]
    assert "A disabled lamp story." not in texts
    keys = {r["kind"]: r.get("key") for r in out.content["results"]}
    assert keys == {"lorebook": None, "character": "Ysolde", "memory/facts": None}


def test_all_scope_interleaves_recall_first():
    assert interleave(["r1", "r2", "r3"], ["a1"], 10) == ["r1", "a1", "r2", "r3"]
    state = InMemoryStateView(
        messages=[MemoryMessage("user", "dragon attack"), MemoryMessage("user", "dragon sleeps")],
        lorebook=[LorebookEntry("dragons", ("dragon",), "Dragons hoard gold.")],
    )
    out = run("memory-search", {"query": "dragon"}, state)
    assert [r["source"] for r in out.content["results"]] == ["recall", "archival", "recall"]


def test_excerpt_is_at_most_500_chars_around_the_hit():
    text = "a" * 1000 + " needle " + "b" * 1000
    cut = excerpt(text, "needle")
    assert "needle" in cut and cut.startswith("…") and cut.endswith("…")
    assert len(cut) == 502
    assert excerpt("c" * 800, "zzz").startswith("ccc")


def test_no_hit_and_bad_limit():
    assert run("memory-search", {"query": "nothing"}).envelope == {
        "summary": 'No memories matched "nothing". Try other names or phrasings of the same thing.'}
    assert run("memory-search", {"query": "x", "limit": 21}).envelope["error"]["code"] == "invalid-input"
