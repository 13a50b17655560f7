"""Suspend / Resume across processes (issue 17; spec 004 §Suspend / Resume), on a cluster of its own
(2 daphne + 1 Celery worker, hosted shape) started with COVEL_SUSPENSION_SWEEP_SECONDS=0 and a short
COVEL_SUSPENSION_CLAIM_SECONDS, and the community test plugin ``tollbooth`` (a post-turn function
runtime that asks for a toll with a suspension) installed in its COVEL_HOME:

- a turn that suspends on web #1 is resumed through web #2: the buffered write and the resumed
  run's commit together, the player turn counts once;
- the web process running a resume is SIGKILLed mid-run (the handler stalls on ``coins: 9``):
  nothing of the resume is committed, the suspension stays listed, and once its "resuming" claim
  is older than COVEL_SUSPENSION_CLAIM_SECONDS the sweep releases it and the other web process
  resumes it — committed exactly once.
"""
from __future__ import annotations

import textwrap
import threading
import time

import pytest

from tests.e2e.client import Api
from tests.e2e.play import interaction_answer

CLAIM_SECONDS = 4
PLUGIN = "tollbooth"
MANIFEST = textwrap.dedent("""\
    ---
    id: tollbooth
    kind: plugin
    version: 1.0.0
    description: Asks for a toll after each story turn (e2e test plugin).
    requires:
      - narrative-engine@1
    contributes:
      data:
        tolls:
          schema: ./toll.schema.json
    runtime:
      type: function
      schedule:
        stage: post-turn
      io:
        visibility: system
      function:
        handler: ./handler.py
    ---
    Test plugin.
    """)
# coins 9: the resumed handler marks COVEL_HOME/toll-stalled and never returns (the process is killed).
HANDLER = textwrap.dedent('''\
    import os
    import time
    from pathlib import Path


    def handle(ctx):
        if ctx.resume_data is None:
            ctx.plugin_data.set("tolls", "asked", {"turn": ctx.logical_turn})
            return {"outcome": "suspended", "reason": "Pay the toll?",
                    "resumeSchema": {"type": "object", "required": ["coins"],
                                     "properties": {"coins": {"type": "integer", "minimum": 1, "maximum": 9}}}}
        if ctx.resume_data["coins"] == 9:
            (Path(os.environ["COVEL_HOME"]) / "toll-stalled").write_text(str(os.getpid()))
            time.sleep(600)
        ctx.plugin_data.set("tolls", "paid", {"coins": ctx.resume_data["coins"]})
        return {"paid": ctx.resume_data["coins"]}
    ''')


@pytest.fixture(scope="module")
def toll_cluster():
    from tests.e2e.cluster import cluster_new, run_dir_remove
    from tests.e2e.fakes import llm_toml_text

    started = cluster_new(extra_env={"COVEL_SUSPENSION_SWEEP_SECONDS": "0",
                                     "COVEL_SUSPENSION_CLAIM_SECONDS": str(CLAIM_SECONDS)})
    root = started.covel_home / "plugins" / PLUGIN
    root.mkdir(parents=True, exist_ok=True)
    (root / "PLUGIN.md").write_text(MANIFEST, encoding="utf-8")
    (root / "handler.py").write_text(HANDLER, encoding="utf-8")
    (root / "toll.schema.json").write_text('{"type": "object"}', encoding="utf-8")
    # the stall slot is never used here; it points at a closed loopback port
    (started.covel_home / "llm.toml").write_text(llm_toml_text("http://127.0.0.1:9/v1"), encoding="utf-8")
    try:
        started.start(worker_count=1)
    except BaseException:
        run_dir_remove(started)
        raise
    try:
        yield started
    finally:
        problems = started.stop(check=False)
        if not problems:
            run_dir_remove(started)
        assert not problems, f"unclean teardown (logs kept in {started.run_dir}): {problems}"


def _granted_action(api: Api, action_type: str, session_id: str, payload: dict):
    """POST /api/actions, allowing (session scope) each approval the community plugin asks for."""
    for _ in range(6):
        result = api.action(action_type, session_id, payload)
        if result.status_code != 202:
            assert result.status_code == 200 and result.committed, result.describe()
            return result
        approval = result.error["approvalId"]
        api.json("POST", f"/api/approvals/{approval}/decision", {"decision": "allow", "scope": "session"})
    raise AssertionError("approvals never settled")


def _suspended_session(toll_cluster) -> tuple[str, str, Api, Api]:
    """A session whose first turn (on web #1) suspended: (session id, suspension id, web #1, web #2)."""
    created = Api(toll_cluster.base_urls[0]).json("POST", "/api/sessions", {"locale": "en-US", "plugins": ["narrator", PLUGIN]},
                                                  expect=201)
    web_a = Api(toll_cluster.base_urls[0], created["ownerToken"])
    web_b = Api(toll_cluster.base_urls[1], created["ownerToken"])
    session_id = created["id"]
    # start_session and the setup forms answered (as tests/e2e/play.py does)
    results = [_granted_action(web_a, "start_session", session_id, {})]
    for _ in range(8):
        if web_a.json("GET", f"/api/sessions/{session_id}")["phase"] == "playing":
            break
        requested = results[-1].of_type("interaction.requested")
        assert requested, results[-1].describe()
        actions = [interaction_answer(frame["payload"], player_name="Wren Talloway") for frame in requested]
        results.append(_granted_action(web_a, "submit_actions", session_id, {"actions": actions}))
    # a player turn (the opening is a continuation and never counts); its suspension replaces the
    # opening's, if the opening suspended too
    results = [_granted_action(web_a, "submit_actions", session_id, {"actions": [{"kind": "say", "text": "I walk on."}]})]
    suspended = results[-1].of_type("turn.suspended")
    assert suspended, results[-1].describe()
    return session_id, suspended[0]["payload"]["suspensionId"], web_a, web_b


def _state(cluster, web: Api, session_id: str) -> dict:
    session = web.json("GET", f"/api/sessions/{session_id}")
    with cluster.db() as conn:
        rows = conn.execute("SELECT key, value FROM plugins_app_plugindata WHERE session_id = %s AND plugin_id = %s",
                            (session_id, PLUGIN)).fetchall()
        turn_results = conn.execute("SELECT count(*) FROM turns_turnresult WHERE session_id = %s", (session_id,)).fetchone()[0]
    return {"completedPlayerTurns": session["completedPlayerTurns"], "tolls": {k: v for k, v in rows}, "turnResults": turn_results}


def _resume(web: Api, session_id: str, suspension_id: str, coins: int, *, timeout: float = 60.0):
    return web.http.post(f"/api/sessions/{session_id}/suspensions/{suspension_id}/resume", json={"data": {"coins": coins}},
                         headers=web._headers(), timeout=timeout)


def test_a_turn_suspended_on_one_web_process_resumes_on_the_other(toll_cluster):
    session_id, suspension_id, web_a, web_b = _suspended_session(toll_cluster)
    try:
        before = _state(toll_cluster, web_b, session_id)
        assert "asked" not in before["tolls"]  # the buffered write waits with the suspension
        listed = web_b.json("GET", f"/api/sessions/{session_id}/suspensions")["items"]
        assert [i["id"] for i in listed] == [suspension_id]
        response = _resume(web_b, session_id, suspension_id, 2)
        assert response.status_code == 200, response.text
        assert response.json()["result"]["status"] == "success"
        after = _state(toll_cluster, web_a, session_id)
        assert after["tolls"]["paid"] == {"coins": 2} and "asked" in after["tolls"]
        assert after["completedPlayerTurns"] == before["completedPlayerTurns"] + 1
        assert _resume(web_a, session_id, suspension_id, 2).status_code == 409
    finally:
        web_a.close()
        web_b.close()


def test_a_web_process_killed_mid_resume_leaves_the_suspension_resumable(toll_cluster):
    session_id, suspension_id, web_a, web_b = _suspended_session(toll_cluster)
    marker = toll_cluster.covel_home / "toll-stalled"
    marker.unlink(missing_ok=True)
    try:
        before = _state(toll_cluster, web_b, session_id)
        # when a resume on web #1 stalls inside the handler (its request on a thread)
        outcome: dict = {}

        def stalled() -> None:
            try:
                outcome["response"] = _resume(web_a, session_id, suspension_id, 9, timeout=120)
            except Exception as exc:  # the connection dies with the process
                outcome["error"] = f"{type(exc).__name__}: {exc}"

        thread = threading.Thread(target=stalled, name="stalled-resume", daemon=True)
        thread.start()
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert time.monotonic() < deadline, "the resumed handler never started"
            time.sleep(0.1)
        pid = int(marker.read_text())
        assert pid == toll_cluster.web[0].pid  # the handler runs inside web #1
        # then the suspension is claimed: a second resume through web #2 is refused with 409
        assert _resume(web_b, session_id, suspension_id, 2).status_code == 409
        # when web #1 is SIGKILLed in the middle of the resume
        toll_cluster.web_kill(0)
        thread.join(timeout=30)
        assert "response" not in outcome or outcome["response"].status_code >= 500, outcome
        # then nothing of the resume was committed
        assert _state(toll_cluster, web_b, session_id) == before
        # and once the claim is older than COVEL_SUSPENSION_CLAIM_SECONDS the sweep releases it:
        # web #2 lists it and resumes it, committed once
        deadline = time.monotonic() + CLAIM_SECONDS + 30
        while True:
            listed = web_b.json("GET", f"/api/sessions/{session_id}/suspensions")["items"]
            assert [i["id"] for i in listed] == [suspension_id]
            response = _resume(web_b, session_id, suspension_id, 3)
            if response.status_code != 409:
                break
            assert time.monotonic() < deadline, f"the claim was never released: {response.text}"
            time.sleep(1)
        assert response.status_code == 200, response.text
        after = _state(toll_cluster, web_b, session_id)
        assert after["tolls"]["paid"] == {"coins": 3}
        assert after["completedPlayerTurns"] == before["completedPlayerTurns"] + 1
        assert after["turnResults"] == before["turnResults"] + 1
        assert web_b.json("GET", f"/api/sessions/{session_id}/suspensions")["items"] == []
        # and the restarted web #1 serves the session too
        toll_cluster.web_restart(0)
        assert web_a.json("GET", f"/api/sessions/{session_id}")["completedPlayerTurns"] == after["completedPlayerTurns"]
    finally:
        web_a.close()
        web_b.close()
