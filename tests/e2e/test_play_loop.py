"""Scenario 1 (issue 9): the turn-engine play loop over HTTP against daphne #1 while subscribers on
daphne #1 and daphne #2 receive the same turns' events (spec 004 §快速开始, §开场接力, §事件系统)."""
from __future__ import annotations

from tests.e2e.client import Subscriber
from tests.e2e.play import expect_committed, say, session_create, session_setup

BUILTIN_WORLD = "hollow-reach-light"
SAYS = (
    "I climb the lighthouse stair and look for the keeper's log.",
    "I signal toward the green light with the hand lamp.",
    "I ask whoever is listening what happened to the keeper.",
)


def narration(result, turn_id: str) -> str:
    """The turn's story prose: the streamed ``narrative.delta`` texts, which must add up to the
    ``narrative.completed`` text of the same turn."""
    deltas = "".join(f["payload"]["text"] for f in result.of_type("narrative.delta") if f["turnId"] == turn_id)
    completed = [f["payload"]["text"] for f in result.of_type("narrative.completed") if f["turnId"] == turn_id]
    assert len(completed) == 1, result.describe()
    assert deltas == completed[0], f"streamed {deltas!r} but completed {completed[0]!r}"
    return completed[0]


def _cursor_seq(event_id: str) -> int:
    return int(event_id.rsplit(":", 1)[1])


def _logged_events(cluster, session_id: str, turn_id: str) -> list[tuple[int, str]]:
    with cluster.db() as conn:
        return conn.execute(
            "SELECT seq, type FROM turns_sessionevent WHERE session_id = %s AND turn_id = %s ORDER BY seq",
            (session_id, turn_id),
        ).fetchall()


def test_play_loop_on_web1_is_seen_by_subscribers_on_both_web_processes(cluster, web1):
    # given a session in a builtin world, created on web #1, and a subscriber on each web process
    # (issue 8: two subscribers on two processes both receive a Celery-run turn's events, in order)
    played = session_create(web1, BUILTIN_WORLD)
    assert played.created["phase"] == "setup"
    subscribers = [Subscriber(url, played.id, played.token).start() for url in cluster.base_urls[:2]]
    try:
        # when setup runs (start_session), its forms are answered, and the opening follows
        setup = session_setup(played)

        # then the first stream asked for the setup forms and the last one ran the opening continuation
        assert setup[0].of_type("interaction.requested"), setup[0].describe()
        opening = setup[-1]
        assert len(opening.turn_ids) == 2, opening.describe()
        setup_turn, opening_turn = opening.turn_ids
        assert opening.completed["turnId"] == opening_turn
        assert opening.completed["payload"].get("origin") == "continuation", opening.describe()
        assert narration(opening, opening_turn).strip(), opening.describe()
        session = played.api.json("GET", f"/api/sessions/{played.id}")
        assert (session["phase"], session["completedPlayerTurns"]) == ("playing", 0)

        # when three say turns are played on web #1
        turns = []
        for number, text in enumerate(SAYS, start=1):
            result = expect_committed(say(played, text))
            turns.append(result)
            # then each commits once, streams narration and advances the player-turn count by one
            assert len(result.turn_ids) == 1, result.describe()
            assert narration(result, result.turn_ids[0]).strip(), result.describe()
            session = played.api.json("GET", f"/api/sessions/{played.id}")
            assert session["completedPlayerTurns"] == number

        # then both subscribers received every logged event of every turn, in order, exactly once
        for subscriber in subscribers:
            for turn_id in [setup_turn, opening_turn, *(r.turn_ids[0] for r in turns)]:
                logged = _logged_events(cluster, played.id, turn_id)
                assert logged, f"no session events logged for turn {turn_id}"
                last_seq = logged[-1][0]
                subscriber.wait_for(lambda e: e["id"] and _cursor_seq(e["id"]) >= last_seq, timeout_seconds=15)
                received = [(_cursor_seq(e["id"]), e["event"]) for e in subscriber.events
                            if e["id"] and _cursor_seq(e["id"]) in {seq for seq, _ in logged}]
                assert received == logged
            completed = [e for e in subscriber.events if e["event"] == "execution.completed"]
            assert [e["data"]["payload"]["turnId"] for e in completed][-3:] == [r.turn_ids[0] for r in turns]
            assert all(e["data"]["payload"]["committed"] is True for e in completed)
    finally:
        for subscriber in subscribers:
            subscriber.close()

    # then messages, characters, turn results and traces are persisted
    messages = played.api.json("GET", f"/api/sessions/{played.id}/messages")["items"]
    player_texts = [m["content"] for m in messages if m.get("role") == "user"]
    assert player_texts[-3:] == list(SAYS)
    characters = played.api.json("GET", f"/api/sessions/{played.id}/characters")["items"]
    assert any(c.get("name") == "Wren Talloway" for c in characters), characters
    with cluster.db() as conn:
        committed_turns = conn.execute(
            "SELECT turn_id, count(*) FROM turns_turnresult WHERE session_id = %s AND committed GROUP BY turn_id", (played.id,)
        ).fetchall()
        traces = conn.execute("SELECT count(*) FROM turns_traceevent WHERE session_id = %s", (played.id,)).fetchone()[0]
    results_per_turn = dict(committed_turns)
    for result in turns:
        assert results_per_turn.get(result.turn_ids[0]) == 1, committed_turns
    assert traces > 0
