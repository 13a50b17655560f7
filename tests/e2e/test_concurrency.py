"""Scenario 4 (issue 9): 20 sessions played concurrently (3 turns each) across both web processes.

Every turn commits exactly once (checked in the streams, the API and the database); no
``session_busy`` anywhere except in the one deliberate collision of two actions on one session.
Prints the per-turn latency (request sent → ``execution.completed`` received) and the number of
turns committed (``covel e2e figures`` at the end of the run).
"""
from __future__ import annotations

import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from tests.e2e.client import ActionResult, Api
from tests.e2e.play import PlayedSession, expect_committed, say, session_create, session_setup

SESSIONS = 20
TURNS_PER_SESSION = 3
BUILTIN_WORLD = "hollow-reach-light"
SESSION_BUSY = "session_busy"


def _busy(result: ActionResult) -> bool:
    if result.error and result.error.get("code") == SESSION_BUSY:
        return True
    return any(f["payload"].get("code") == SESSION_BUSY for f in result.of_type("error.occurred"))


def _play(cluster, index: int) -> tuple[PlayedSession, list[ActionResult]]:
    """Create, set up and play one session, its requests alternating between the web processes."""
    urls = cluster.base_urls
    creator = Api(urls[index % 2])
    try:
        played = session_create(creator, BUILTIN_WORLD)
    finally:
        creator.close()
    apis = [Api(url, played.token) for url in urls]
    played.api.close()
    try:
        played.api = apis[(index + 1) % 2]
        session_setup(played, player_name=f"Wren Talloway {index}")
        turns = []
        for number in range(TURNS_PER_SESSION):
            api = apis[(index + number) % 2]
            turns.append(say(played, f"Player {index} takes step {number + 1} along the cliff path.", api=api))
        return played, turns
    finally:
        apis[index % 2].close()
        played.api = apis[(index + 1) % 2]  # kept open for the checks; closed by the test


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def test_twenty_sessions_concurrently_commit_every_turn_exactly_once(cluster, figures):
    # given 20 sessions played at once, 3 say turns each, across both web processes
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=SESSIONS) as pool:
        outcomes = list(pool.map(lambda i: _play(cluster, i), range(SESSIONS)))
    wall_seconds = time.monotonic() - started

    # then no action met session_busy, and every stream committed its one turn
    results = [result for _, turns in outcomes for result in turns]
    busy = [r.describe() for r in results if _busy(r)]
    assert not busy, "session_busy without a competing action on the session:\n" + "\n".join(busy)
    for result in results:
        expect_committed(result)
        assert len(result.turn_ids) == 1, result.describe()

    # and each session counts exactly three player turns, each committed once in the database
    stream_turns = {played.id: [r.turn_ids[0] for r in turns] for played, turns in outcomes}
    with cluster.db() as conn:
        for played, turns in outcomes:
            session = played.api.json("GET", f"/api/sessions/{played.id}")
            assert session["completedPlayerTurns"] == TURNS_PER_SESSION, session
            rows = conn.execute(
                "SELECT turn_id, count(*) FROM turns_turnresult WHERE session_id = %s AND committed "
                "AND player_turn_index IS NOT NULL GROUP BY turn_id", (played.id,),
            ).fetchall()
            assert sorted(rows) == sorted((turn_id, 1) for turn_id in stream_turns[played.id])
            executions = conn.execute(
                "SELECT request_id, count(*) FROM turns_execution WHERE session_id = %s AND request_id = ANY(%s) "
                "GROUP BY request_id", (played.id, [r.request["requestId"] for r in turns]),
            ).fetchall()
            assert sorted(count for _, count in executions) == [1] * TURNS_PER_SESSION
    committed_turns = sum(len(turns) for turns in stream_turns.values())
    for other, _ in outcomes[1:]:
        other.api.close()

    # when two actions hit one session at the same moment, one on each web process
    played = outcomes[0][0]
    apis = [Api(url, played.token) for url in cluster.base_urls]
    barrier = threading.Barrier(2)

    def collide(api: Api) -> ActionResult:
        barrier.wait()
        return say(played, f"Two voices speak at once on {api.base_url}.", api=api)

    try:
        with ThreadPoolExecutor(max_workers=2) as pool:
            pair = list(pool.map(collide, apis))
    finally:
        for api in apis:
            api.close()

    # then they serialize on the session lock: each commits, or the loser is session_busy
    committed_pair = [r for r in pair if not _busy(r)]
    for result in committed_pair:
        expect_committed(result)
    assert len(committed_pair) >= 1, [r.describe() for r in pair]
    session = played.api.json("GET", f"/api/sessions/{played.id}")
    played.api.close()
    assert session["completedPlayerTurns"] == TURNS_PER_SESSION + len(committed_pair)
    with cluster.db() as conn:
        for result in committed_pair:
            count = conn.execute(
                "SELECT count(*) FROM turns_turnresult WHERE turn_id = %s AND committed", (result.turn_ids[0],)
            ).fetchone()[0]
            assert count == 1

    latencies_ms = [r.latency_seconds * 1000 for r in results]
    figures.append(
        f"scenario 4: {committed_turns} of {SESSIONS * TURNS_PER_SESSION} player turns committed exactly once "
        f"({SESSIONS} sessions x {TURNS_PER_SESSION} turns, 2 web + {len(cluster.workers)} workers, wall {wall_seconds:.1f} s); "
        f"per-turn latency median {statistics.median(latencies_ms):.0f} ms, p95 {_percentile(latencies_ms, 0.95):.0f} ms, "
        f"max {max(latencies_ms):.0f} ms; collision on one session: {len(committed_pair)} committed, "
        f"{2 - len(committed_pair)} session_busy"
    )
