"""A story runtime's prose reaches the action stream as ``narrative.delta`` frames joined per short
window (issue 18: one frame per streamed chunk cost a bus message, a relay wake-up and an SSE frame
each), against the HTTP model peer: the frames add up to exactly the streamed prose, a host that
streams fast costs a few frames instead of one per chunk, and a host that stalls mid-sentence does
not hold back what it already sent."""
from __future__ import annotations

from datetime import datetime

import pytest

from tests.e2e.play import expect_committed, session_create, session_setup
from tests.model_peer import ModelPeer, Quirks
from tests.turns.test_real_model_game import ClientApi, llm_toml

pytestmark = pytest.mark.django_db(transaction=True)

WORLD = "hollow-reach-light"
CHUNK_CHARS = 7


def _play(client, tmp_path, settings, quirks: Quirks):
    with ModelPeer(quirks=quirks) as peer:
        settings.COVEL_LLM_TOML = llm_toml(tmp_path, peer)
        settings.COVEL_OUTBOUND_ALLOW = ("127.0.0.1",)
        played = session_create(ClientApi(client), WORLD)
        session_setup(played)
        result = expect_committed(played.api.action("submit_actions", played.id,
                                                    {"actions": [{"kind": "say", "text": "I greet the harbour."}]}))
    turn_id = result.turn_ids[-1]
    deltas = [f for f in result.of_type("narrative.delta") if f["turnId"] == turn_id]
    story = [f for f in result.of_type("llm.responded")
             if f["turnId"] == turn_id and f["payload"].get("runtimeId") == deltas[0]["payload"]["runtimeId"]]
    return deltas, story[-1]["payload"]


def _at(frame) -> datetime:
    return datetime.fromisoformat(frame["timestamp"].replace("Z", "+00:00"))


def test_a_fast_host_s_prose_arrives_whole_in_a_few_frames(client, tmp_path, settings):
    # given a host streaming the story prose 7 characters a chunk, as fast as it can
    deltas, responded = _play(client, tmp_path, settings, Quirks(chunk_chars=CHUNK_CHARS))
    text = responded["text"]
    chunks = -(-len(text) // CHUNK_CHARS)
    # then the frames carry the prose exactly, in order
    assert "".join(f["payload"]["text"] for f in deltas) == text and chunks >= 10, (chunks, text)
    # and there is at most one frame per 50 ms window of the call (plus the first), not one per chunk
    assert len(deltas) <= 2 + responded["durationMs"] // 50, (len(deltas), responded["durationMs"])
    assert len(deltas) < chunks


def test_a_host_stalling_mid_sentence_does_not_hold_back_what_it_sent(client, tmp_path, settings):
    # given a host whose prose stops for 0.8 s after its first two chunks
    deltas, responded = _play(client, tmp_path, settings, Quirks(chunk_chars=CHUNK_CHARS, prose_pause=(2, 0.8)))
    text = responded["text"]
    # then the two chunks were on the stream within the pause, well before the rest
    first = _at(deltas[0])
    early = [f for f in deltas if (_at(f) - first).total_seconds() < 0.4]
    late = [f for f in deltas if (_at(f) - first).total_seconds() >= 0.6]
    assert "".join(f["payload"]["text"] for f in early) == text[:2 * CHUNK_CHARS], [f["payload"]["text"] for f in deltas]
    assert "".join(f["payload"]["text"] for f in late) == text[2 * CHUNK_CHARS:]
    assert len(early) + len(late) == len(deltas)
