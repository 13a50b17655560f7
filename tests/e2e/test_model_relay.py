"""Local model relay across processes (spec 004 §本地模型中继): a shared-tier cluster (2 daphne + a
Celery worker on PostgreSQL and Redis, DEPLOYMENT_TIER=demo). The player's page keeps its relay
stream open on web #2 while its turn is posted to web #1 and runs in the worker; the test plays the
browser and answers every model call, alternating its answer POSTs between the two web processes.

Its own cluster (the suite's shared one runs the personal tier, where the relay is not served).
"""
from __future__ import annotations

import base64
import json
import queue
import threading
import time
import uuid

import httpx
import pytest

from tests.covel.outbound_support import closed_port, sse_chat_reply
from tests.e2e.client import Api, sse_frames
from tests.e2e.play import session_create, session_setup
from tests.turns.events_support import HttpSse

OPERATOR = "e2e-relay-operator-token"
WORLD = "hollow-reach-light"
NARRATION = "Rain needles the ferry lamps; the relay answered from the player's own machine."


@pytest.fixture(scope="module")
def relay_cluster():
    """A shared-tier cluster: 2 web processes, 1 Celery worker (1 child), the beat."""
    from tests.e2e.cluster import cluster_new, run_dir_remove

    started = cluster_new(extra_env={"DEPLOYMENT_TIER": "demo", "COVEL_DESKTOP_REST_TOKEN": OPERATOR,
                                     "COVEL_MEDIA_TOKEN_SECRET": "e2e-relay-media-secret",
                                     "COVEL_MODEL_RELAY_TIMEOUT_SECONDS": "20"})
    started.worker_concurrency = 1
    try:
        started.start(web_count=2, worker_count=1)
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


def _channel() -> str:
    return f"e2e-page-{uuid.uuid4().hex}"


def _b64(value: dict) -> str:
    return base64.b64encode(json.dumps(value).encode()).decode()


class RelayPage:
    """The browser's relay: its stream on one web process, its answers to any of them."""

    def __init__(self, stream_url: str, answer_urls: list[str], channel: str | None = None) -> None:
        self.channel = channel or _channel()
        self.answer_urls = answer_urls
        self.sse = HttpSse(f"{stream_url}/api/model-relay/stream", {"X-Model-Relay": self.channel})
        assert self.sse.status == 200
        ready = self.sse.take(1)[0]
        assert (ready.event, ready.data) == ("ready", {})
        self.answered_by: list[str] = []
        self._posts = 0

    def _post(self, request_id: str, part: str, **kwargs) -> httpx.Response:
        base = self.answer_urls[self._posts % len(self.answer_urls)]
        self._posts += 1
        self.answered_by.append(base)
        response = httpx.post(f"{base}/api/model-relay/requests/{request_id}/{part}",
                              headers={"X-Model-Relay": self.channel, **kwargs.pop("headers", {})}, timeout=10, **kwargs)
        assert response.status_code == 204, (part, response.status_code, response.text)
        return response

    def answer(self, request_id: str, body: bytes) -> None:
        self._post(request_id, "head", json={"status": 200, "headers": {"Content-Type": "text/event-stream"}})
        for start in range(0, len(body), 80):
            self._post(request_id, "chunk", content=body[start:start + 80],
                       headers={"Content-Type": "application/octet-stream"})
        self._post(request_id, "end")

    def serve(self, stop: threading.Event, seen: list[dict]) -> None:
        """Answer every request until ``stop`` (runs on a thread)."""
        while not stop.is_set():
            try:
                frame = self.sse.take(1, timeout=0.5)[0]
            except queue.Empty:
                continue
            if frame.event == "request":
                seen.append(frame.data)
                self.answer(frame.data["id"], sse_chat_reply(NARRATION))

    def ended(self, timeout: float) -> bool:
        self.sse._thread.join(timeout)
        return not self.sse._thread.is_alive()

    def close(self) -> None:
        self.sse.close()


def _say(base_url: str, played, text: str, *, channel: str, local_url: str) -> list[dict]:
    body = {"requestId": f"e2e-relay-{uuid.uuid4().hex[:12]}", "type": "submit_actions", "sessionId": played.id,
            "payload": {"actions": [{"kind": "say", "text": text}]}}
    headers = {"X-Session-Token": played.token, "X-Model-Relay": channel,
               "X-Slot-Config": _b64({"customPresets": {"home": {"provider": "ollama", "model": "llama3",
                                                                 "baseUrl": local_url}},
                                      "slotBindings": {"story": {"modelRef": "home"}}})}
    with httpx.stream("POST", f"{base_url}/api/actions", json=body, headers=headers,
                      timeout=httpx.Timeout(10.0, read=120.0)) as response:
        assert response.status_code == 200, response.read()
        return [json.loads(frame["data"]) for frame in sse_frames(response.iter_lines())]


def test_health_of_both_web_processes_advertises_the_relay(relay_cluster):
    for url in relay_cluster.base_urls:
        assert httpx.get(f"{url}/api/health", timeout=10).json()["deployment"]["modelRelay"] is True


def test_a_turn_on_web1_in_a_worker_is_answered_by_the_browsers_stream_on_web2(relay_cluster):
    web1, web2 = relay_cluster.base_urls
    operator = Api(web1, OPERATOR)
    try:
        played = session_create(operator, WORLD)
    finally:
        operator.close()
    session_setup(played)  # offline (scripted): the setup itself does not need the relay
    page = RelayPage(web2, [web1, web2])
    stop, seen = threading.Event(), []
    server = threading.Thread(target=page.serve, args=(stop, seen), daemon=True)
    server.start()
    try:
        # when the player's turn, posted to web #1 and run by the Celery worker, names the page's
        # channel and a story model on the player's own machine
        started = time.monotonic()
        frames = _say(web1, played, "I hail the ferryman.", channel=page.channel,
                      local_url=f"http://127.0.0.1:{closed_port()}/v1")
        elapsed = time.monotonic() - started
    finally:
        stop.set()
        server.join(10)
        page.close()
        played.api.close()

    # then the story call went through the browser's stream on web #2, its answer came back through
    # both web processes, and the turn's narration is the browser's answer
    completed = [f for f in frames if f["type"] == "execution.completed"]
    assert completed and completed[-1]["payload"]["committed"] is True, json.dumps(frames)[-3000:]
    assert seen and all(r["url"].endswith("/chat/completions") for r in seen)
    assert {web1, web2} <= set(page.answered_by)
    streamed = "".join(f["payload"].get("text", "") for f in frames if f["type"] == "narrative.delta")
    assert NARRATION in streamed, streamed
    assert elapsed < 60


def test_reopening_the_channel_on_the_other_web_process_replaces_the_stream(relay_cluster):
    web1, web2 = relay_cluster.base_urls
    first = RelayPage(web1, [web1])
    try:
        second = RelayPage(web2, [web2], channel=first.channel)
        try:
            assert first.ended(15), "the stream on web #1 stayed open after the channel moved to web #2"
            assert not second.ended(0.5)
        finally:
            second.close()
    finally:
        first.close()


def test_a_turn_naming_a_channel_no_process_holds_fails_with_model_relay_unavailable(relay_cluster):
    web1, web2 = relay_cluster.base_urls
    operator = Api(web2, OPERATOR)
    try:
        played = session_create(operator, WORLD)
    finally:
        operator.close()
    session_setup(played)
    try:
        frames = _say(web2, played, "Anyone there?", channel=_channel(), local_url=f"http://127.0.0.1:{closed_port()}/v1")
    finally:
        played.api.close()
    assert [f for f in frames if f["type"] == "execution.completed"][-1]["payload"]["committed"] is False
    assert "no browser has this relay channel open" in json.dumps(frames)
