"""Scenario 2 (issue 9): the upstream fixture world ``emberback``, installed under
COVEL_HOME/worlds/ of the processes (conftest), played for three turns with the scripted provider,
alternating between the two web processes."""
from __future__ import annotations

from tests.e2e.client import Api
from tests.e2e.play import expect_committed, say, session_create, session_setup

WORLD = "emberback"
SAYS = (
    "I put on the headset and replay the distress call.",
    "I compare the call's timestamp with the relay clock.",
    "I ask the chief technician whether anyone else has heard it.",
)


def test_fixture_world_emberback_plays_three_turns(cluster, web1, web2):
    # given the fixture world installed as a user world, visible on both web processes
    for api in (web1, web2):
        worlds = {w["id"]: w for w in api.json("GET", "/api/worlds")["items"]}
        assert worlds[WORLD]["metadata"]["source"] == "user-file", worlds.get(WORLD)

    # when a session is created and set up on web #2
    played = session_create(web2, WORLD)
    session_setup(played)
    world = web2.json("GET", f"/api/worlds/{WORLD}")
    session = played.api.json("GET", f"/api/sessions/{played.id}")
    assert session["phase"] == "playing"
    assert session["locale"] in world["metadata"]["supportedLocales"]

    # and three say turns alternate between web #1 and web #2
    results = []
    for number, text in enumerate(SAYS):
        api = Api(cluster.base_urls[number % 2], played.token)
        try:
            results.append(expect_committed(say(played, text, api=api)))
        finally:
            api.close()

    # then each committed exactly once and the player-turn count is three
    session = played.api.json("GET", f"/api/sessions/{played.id}")
    assert session["completedPlayerTurns"] == 3
    with cluster.db() as conn:
        rows = conn.execute(
            "SELECT turn_id FROM turns_turnresult WHERE session_id = %s AND committed AND origin = 'player' "
            "AND player_turn_index IS NOT NULL ORDER BY player_turn_index",
            (played.id,),
        ).fetchall()
    assert [turn_id for (turn_id,) in rows][-3:] == [r.turn_ids[0] for r in results]

    # and the story is told from the world's own cast, imported from the package
    characters = played.api.json("GET", f"/api/sessions/{played.id}/characters")["items"]
    cast = {c["name"] for c in characters if c.get("type") != "player"}
    assert cast, characters
    prose = "".join(f["payload"]["text"] for r in results for f in r.of_type("narrative.completed"))
    assert any(name in prose for name in cast), f"no cast member of {sorted(cast)} in the narration: {prose[:2000]}"
    messages = played.api.json("GET", f"/api/sessions/{played.id}/messages")["items"]
    assert [m["content"] for m in messages if m.get("role") == "user"][-3:] == list(SAYS)
