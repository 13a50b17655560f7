"""Approvals are shared by every web process (issue 15): the community test plugin ``lantern``
(tests/sessions/lantern_support.py) is installed from a zip through web #1, the processes restart
(plugins need a restart), and then a decision made through one web process is honoured by the other:

- before any grant, plugin-rpc answers 202 approval-required for ``covel:plugin-server-code`` and no
  process has imported the plugin's entry (each of its modules leaves ``<module>-<pid>`` markers in
  COVEL_HOME/lantern-marks when imported);
- allow (session) on web #1 (which loads the granted entry there) → the same request on web #2 passes
  the code gate, web #2 imports the entry (its pid's marker) and asks for the action; allow it on
  web #2 → web #1 runs the action;
- deny on one process → the other still runs nothing (asked again);
- revoke on web #2 → web #1 asks for the server code again.
"""
from __future__ import annotations

import time

from tests.e2e.client import Api
from tests.sessions.lantern_support import lantern_zip

PLUGIN = "lantern"


def _marks(cluster, module: str) -> set[int]:
    folder = cluster.covel_home / "lantern-marks"
    names = [p.name for p in folder.iterdir()] if folder.is_dir() else []
    return {int(n.rsplit("-", 1)[1]) for n in names if n.startswith(f"{module}-")}


def _rpc(api: Api, session_id: str, body: dict):
    return api.post(f"/api/sessions/{session_id}/plugin-rpc", body)


def _asked(response, action: str) -> str:
    assert response.status_code == 202, f"{response.status_code} {response.text[:2000]}"
    body = response.json()
    assert body["status"] == "approval-required" and body["pending"]["action"] == action, body
    return body["approvalId"]


def _decide(api: Api, approval_id: str, decision: str, scope: str = "session") -> None:
    api.json("POST", f"/api/approvals/{approval_id}/decision", {"decision": decision, "scope": scope})


def _processes_restart(cluster) -> None:
    """What an operator does after a plugin install (restartRequired: true): web and workers."""
    for index in range(len(cluster.web)):
        cluster.web_kill(index)
        cluster.web_restart(index)
    for proc in list(cluster.workers):
        cluster.worker_terminate(proc)
        cluster.worker_wait_ready(cluster.worker_start())
    deadline = time.monotonic() + 30
    while len(cluster.worker_ping()) < len(cluster.workers):
        assert time.monotonic() < deadline, "the restarted workers do not answer on the broker"
        time.sleep(0.5)


def test_an_approval_made_through_one_web_process_holds_in_the_other(cluster, web1):
    # given lantern installed from its zip through web #1, and the processes restarted
    installed = web1.http.post("/api/install/plugin", files={"file": ("lantern.zip", lantern_zip(), "application/zip")})
    assert installed.status_code == 201, installed.text
    assert installed.json()["restartRequired"] is True
    _processes_restart(cluster)
    pid_a, pid_b = (proc.pid for proc in cluster.web)
    created = Api(cluster.base_urls[0]).json("POST", "/api/sessions", {"locale": "en-US", "plugins": ["narrator", PLUGIN]},
                                             expect=201)
    web_a = Api(cluster.base_urls[0], created["ownerToken"])
    web_b = Api(cluster.base_urls[1], created["ownerToken"])
    session_id = created["id"]
    ping = {"kind": "action", "pluginId": PLUGIN, "action": "ping", "payload": {"n": 1}}
    try:
        # when web #1 is asked first: the server code needs a grant, and nothing was imported anywhere
        code_approval = _asked(_rpc(web_a, session_id, ping), "covel:plugin-server-code")
        assert _marks(cluster, "entry") == set()
        assert web_b.json("GET", f"/api/sessions/{session_id}/approvals")["items"][0]["approvalId"] == code_approval

        # and the player allows it through web #1 (the decision loads the granted code where it is made)
        _decide(web_a, code_approval, "allow")
        assert _marks(cluster, "entry") == {pid_a}

        # then web #2 honours it: it imports the entry now and asks for the action itself
        action_approval = _asked(_rpc(web_b, session_id, ping), "ping")
        assert _marks(cluster, "entry") == {pid_a, pid_b}
        # and once the action is allowed through web #2, web #1 runs it
        _decide(web_b, action_approval, "allow")
        answered = _rpc(web_a, session_id, ping)
        assert answered.status_code == 200, answered.text
        assert answered.json()["result"]["pong"] == {"n": 1}

        # when a runtime grant is denied through web #1, web #2 still runs nothing and asks again
        manual = {"kind": "runtime", "pluginId": PLUGIN, "runtimeId": "lantern/manual", "payload": {"x": 1}}
        runtime_approval = _asked(_rpc(web_b, session_id, manual), "runtime:lantern/manual")
        _decide(web_a, runtime_approval, "deny")
        again = _asked(_rpc(web_b, session_id, manual), "runtime:lantern/manual")
        assert again != runtime_approval
        assert _marks(cluster, "manual") == set()

        # when the grants are revoked through web #2, web #1 asks for the server code again
        revoked = web_b.http.delete(f"/api/sessions/{session_id}/approvals", headers={"X-Session-Token": created["ownerToken"]})
        assert revoked.status_code == 200 and revoked.json()["cleared"] >= 2, revoked.text
        _asked(_rpc(web_a, session_id, ping), "covel:plugin-server-code")
    finally:
        web_a.close()
        web_b.close()
