"""The browser-private profile on a real process (spec 004 §浏览器私有工作区, §存储后端 memory): one daphne
started with STORE_BACKEND=memory (its in-memory SQLite store, the in-process worker), driven over HTTP
the way the Web LocalDataService does: create a save, export its first commit, upload, play the
setup and a turn, export the next commit, replay an actionId, refuse a stale revision and a fork;
then a restart loses everything and the browser's checkpoint rebuilds the session.

Needs no PostgreSQL or Redis. Collected with the other e2e scenarios (COVEL_E2E=1, ``make e2e``).
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pytest

from tests.e2e.client import Api
from tests.e2e.cluster import free_port
from tests.e2e.play import expect_committed, say, session_create, session_setup

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
WORLD = "hollow-reach-light"


class MemoryServer:
    """One daphne process on STORE_BACKEND=memory (embedded shape, scripted model)."""

    def __init__(self) -> None:
        self.home = Path(tempfile.mkdtemp(prefix="covel-e2e-memory-"))
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.log = self.home / "daphne.log"

    def start(self, timeout_seconds: float = 60) -> None:
        env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE")}
        env.update(STORE_BACKEND="memory", COVEL_HOME=str(self.home), DJANGO_SETTINGS_MODULE="covel.settings.embedded",
                   PYTHONPATH=str(ROOT))
        daphne = Path(sys.executable).with_name("daphne")
        self.proc = subprocess.Popen([str(daphne), "-b", "127.0.0.1", "-p", str(self.port), "covel.asgi:application"],
                                     cwd=ROOT, env=env, stdout=self.log.open("ab"), stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.monotonic() + timeout_seconds
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"daphne exited {self.proc.returncode}:\n{self.log.read_text()[-4000:]}")
            try:
                if httpx.get(f"{self.base_url}/api/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise AssertionError(f"daphne did not answer in {timeout_seconds}s:\n{self.log.read_text()[-4000:]}")

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def remove(self) -> None:
        shutil.rmtree(self.home, ignore_errors=True)


@pytest.fixture
def memory_server():
    server = MemoryServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()
        server.remove()


def _put(api: Api, sid: str, checkpoint: dict, *, expect: int = 200) -> dict:
    return api.json("PUT", f"/api/sessions/{sid}/browser-checkpoint", {"checkpoint": checkpoint}, expect=expect)


def _commit(api: Api, sid: str, action_id: str, base: int, *, expect: int = 200) -> dict:
    return api.json("POST", f"/api/sessions/{sid}/browser-commit", {"actionId": action_id, "baseRevision": base},
                    expect=expect)


def test_browser_private_save_plays_exports_and_survives_a_restart_only_in_the_browser(memory_server, figures):
    api = Api(memory_server.base_url)
    health = api.json("GET", "/api/health")
    assert health["storage"]["data"] == {"backend": "memory", "durable": False, "frontendMode": "local"}
    assert health["deployment"]["form"] == "browser-private"

    # given: a new save — the server session, then its first export (revision 1)
    played = session_create(api, WORLD)
    sid = played.id
    assert api.get(f"/api/sessions/{sid}").status_code == 401  # owner token checked although DEPLOYMENT_TIER=self
    first = _commit(played.api, sid, f"local:create:{sid}", 0)
    assert (first["baseRevision"], first["revision"], first["actionId"]) == (0, 1, f"local:create:{sid}")
    save = first["checkpoint"]
    assert save["revision"] == 1 and len(save["head"]) == 64 and save["session"]["phase"] == "setup"

    # when: each action uploads the save, runs, and exports the next commit (setup, then a turn)
    _put(played.api, sid, save)
    session_setup(played)
    opening = _commit(played.api, sid, "act:setup", 1)
    assert opening["revision"] == 2 and opening["checkpoint"]["session"]["phase"] == "playing"
    save = opening["checkpoint"]
    assert _put(played.api, sid, save) == {"ok": True, "sessionId": sid, "revision": 2, "head": save["head"]}
    expect_committed(say(played, "I light the lamp at the window."))
    turn = _commit(played.api, sid, "act:turn-1", 2)

    # then: the commit carries the played turn
    checkpoint = turn["checkpoint"]
    assert turn["revision"] == 3 and checkpoint["session"]["completedPlayerTurns"] == 1
    assert any(m["role"] == "user" and m["content"] == "I light the lamp at the window." for m in checkpoint["messages"])
    assert any(t["origin"] == "player" and t["commitStatus"] == "committed" for t in checkpoint["turnResults"])
    assert "ownerToken" not in str(checkpoint) and "incarnation" not in checkpoint["session"]["metadata"]
    # the same actionId replays the same commit; a stale revision and a fork are refused
    assert _commit(played.api, sid, "act:turn-1", 2) == turn
    stale = _put(played.api, sid, save, expect=409)
    assert stale["code"] == "browser_revision_conflict" and stale["details"]["reason"] == "stale"
    fork = _put(played.api, sid, dict(checkpoint, head="f" * 64), expect=409)
    assert fork["code"] == "browser_revision_conflict" and fork["details"]["reason"] == "fork"

    # when: the server restarts, nothing of the session is left ...
    memory_server.stop()
    memory_server.start()
    assert api.get(f"/api/sessions/{sid}").status_code == 404
    assert played.api.get(f"/api/sessions/{sid}").status_code == 404
    # ... and the browser's checkpoint rebuilds it, owned by the token that uploads it
    started = time.monotonic()
    assert _put(played.api, sid, checkpoint)["revision"] == 3
    figures.append(f"browser-private: rebuild from a {len(json.dumps(checkpoint)) // 1024} KiB checkpoint "
                   f"{time.monotonic() - started:.2f} s")
    rebuilt = played.api.json("GET", f"/api/sessions/{sid}")
    assert rebuilt["completedPlayerTurns"] == 1 and rebuilt["phase"] == "playing"
    assert api.get(f"/api/sessions/{sid}").status_code == 401
    started = time.monotonic()
    expect_committed(say(played, "I step outside into the fog."))
    again = _commit(played.api, sid, "act:turn-2", 3)
    figures.append(f"browser-private: turn after rebuild + export {time.monotonic() - started:.2f} s")
    assert again["revision"] == 4 and again["checkpoint"]["session"]["completedPlayerTurns"] == 2
    api.close()
