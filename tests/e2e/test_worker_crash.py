"""Scenario 3 (issue 9): a Celery worker killed with SIGKILL in the middle of a turn.

The turn is held mid-way by a model that never answers (the ``stall`` slot, tests/e2e/fakes.py):
when the stalling server has the request, the worker is inside the turn with the session lock
held and nothing committed. Its whole process group is then SIGKILLed (spec 004 §刷新与未完成回合恢复:
a stopped process loses the in-memory execution; with no lock, no committed record and no terminal
record the state is ``interrupted``)."""
from __future__ import annotations

import os
import threading
import time
import uuid

from tests.e2e.client import Api
from tests.e2e.fakes import STALL_SLOT
from tests.e2e.play import expect_committed, say, session_create, session_setup

BUILTIN_WORLD = "hollow-reach-light"
KILLED_TEXT = "I reach for the lamp switch just as the floor shakes."
STATUS_SETTLE_SECONDS = 60
STREAM_END_SECONDS = 60


def _committed_state(cluster, api: Api, session_id: str) -> dict:
    session = api.json("GET", f"/api/sessions/{session_id}")
    with cluster.db() as conn:
        results = conn.execute(
            "SELECT count(*) FROM turns_turnresult WHERE session_id = %s AND committed", (session_id,)
        ).fetchone()[0]
        messages = conn.execute("SELECT count(*) FROM covel_sessions_chatmessage WHERE session_id = %s", (session_id,)).fetchone()[0]
        last_event = conn.execute("SELECT max(seq) FROM turns_sessionevent WHERE session_id = %s", (session_id,)).fetchone()[0]
    return {"completedPlayerTurns": session["completedPlayerTurns"], "committedTurnResults": results,
            "chatMessages": messages, "lastEventSeq": last_event}


def test_worker_killed_mid_turn_commits_nothing_and_retry_turn_commits(cluster, web1, stalling_model):
    # given a session in play with one committed turn
    played = session_create(web1, BUILTIN_WORLD)
    session_setup(played)
    expect_committed(say(played, "I count the steps up to the lamp room."))
    before = _committed_state(cluster, played.api, played.id)

    # when a turn starts whose model call never returns (its stream read on a thread)
    request_id = f"e2e-kill-{uuid.uuid4().hex[:12]}"
    stream_api = Api(cluster.base_urls[0], played.token)
    outcome: dict = {}

    def run_stream() -> None:
        try:
            outcome["result"] = stream_api.action(
                "submit_actions", played.id, {"actions": [{"kind": "say", "text": KILLED_TEXT}]},
                request_id=request_id, model=STALL_SLOT, read_timeout_seconds=STATUS_SETTLE_SECONDS + STREAM_END_SECONDS,
            )
        except Exception as exc:  # closed below when the server never ends the stream
            outcome["error"] = f"{type(exc).__name__}: {exc}"

    stream_thread = threading.Thread(target=run_stream, name="killed-turn-stream", daemon=True)
    stream_thread.start()
    stalling_model.wait_for_request(timeout_seconds=60)

    # then the turn is running, on a worker we can name
    with cluster.db() as conn:
        execution_id, claimed_by, turn_id = conn.execute(
            "SELECT id, claimed_by, turn_id FROM turns_execution WHERE session_id = %s AND request_id = %s",
            (played.id, request_id),
        ).fetchone()
    child_pid = int(claimed_by.split(":")[1])
    worker = next((p for p in cluster.workers if p.pid == os.getpgid(child_pid)), None)
    assert worker is not None, f"execution {execution_id} claimed by {claimed_by}, not one of our workers"
    running = played.api.json("GET", f"/api/sessions/{played.id}/execution")
    assert running["state"] == "running", running

    # when that worker (and its pool children) is SIGKILLed mid-turn
    cluster.worker_kill(worker)

    # then the execution is reported interrupted or failed, not running forever
    states = []
    deadline = time.monotonic() + STATUS_SETTLE_SECONDS
    status = running
    while time.monotonic() < deadline:
        status = played.api.json("GET", f"/api/sessions/{played.id}/execution")
        states.append(status["state"])
        if status["state"] in {"interrupted", "failed"}:
            break
        time.sleep(0.5)
    assert status["state"] in {"interrupted", "failed"}, f"after {STATUS_SETTLE_SECONDS} s: {status} (seen {states})"
    assert status.get("requestId") in (None, request_id), status

    # and nothing of that turn was committed
    assert _committed_state(cluster, played.api, played.id) == before
    with cluster.db() as conn:
        assert conn.execute("SELECT count(*) FROM turns_turnresult WHERE turn_id = %s AND committed", (turn_id,)).fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM turns_sessionevent WHERE turn_id = %s", (turn_id,)).fetchone()[0] == 0
    messages = played.api.json("GET", f"/api/sessions/{played.id}/messages")["items"]
    assert KILLED_TEXT not in [m["content"] for m in messages]

    # and the action stream still open on web #1 ends with one execution.completed, not committed
    stream_thread.join(timeout=STREAM_END_SECONDS)
    if stream_thread.is_alive():
        stream_api.close()
        stream_thread.join(timeout=10)
    stream_api.close()
    result = outcome.get("result")
    assert result is not None, f"the killed turn's stream did not end within {STREAM_END_SECONDS} s: {outcome}"
    completed = result.of_type("execution.completed")
    assert len(completed) == 1 and completed[0]["payload"].get("committed") is False, result.describe()

    # when the cluster is back to two workers and the player retries the turn
    cluster.worker_wait_ready(cluster.worker_start())
    retry = expect_committed(played.api.action("retry_turn", played.id, {}))

    # then the retry commits normally, once, as the next player turn
    retry_turn_id = retry.completed["turnId"]
    assert retry_turn_id != turn_id
    after = _committed_state(cluster, played.api, played.id)
    assert after["committedTurnResults"] == before["committedTurnResults"] + 1, (after, before)
    assert after["completedPlayerTurns"] == before["completedPlayerTurns"] + 1, (
        f"retry_turn must count as a player turn (spec 004 §Turn 执行, retry_turn); {after} vs {before}\n"
        f"{retry.describe()}"
    )
    with cluster.db() as conn:
        assert conn.execute("SELECT count(*) FROM turns_turnresult WHERE turn_id = %s AND committed", (retry_turn_id,)).fetchone()[0] == 1
    final = played.api.json("GET", f"/api/sessions/{played.id}/execution")
    assert (final["state"], final.get("turnId")) == ("completed", retry_turn_id), final
