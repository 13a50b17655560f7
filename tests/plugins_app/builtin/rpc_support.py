"""Plugin RPC calls (POST /api/sessions/:id/plugin-rpc) on a played session and waiting for the
event jobs they queue, for the catalogue plugin tests (issue 20)."""
from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from jobs.models import RuntimeJob
from tests.plugins_app.builtin.catalogue_worlds import (
    upstream_world as upstream_world_install,
)
from tests.plugins_app.builtin.play_support import Played

FINISHED = ("succeeded", "failed", "timed_out", "stale", "cancelled", "orphaned")


def rpc(client, played: Played, body: dict[str, Any], **headers: str):
    """The response of one plugin-rpc call as the session owner."""
    return client.post(f"/api/sessions/{played.id}/plugin-rpc", data=json.dumps(body), content_type="application/json",
                       HTTP_AUTHORIZATION=f"Bearer {played.token}", **headers)


def jobs_finished(job_ids: list[str], seconds: float = 20) -> list[RuntimeJob]:
    """The jobs once every one of them has finished (AssertionError after ``seconds``)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        jobs = list(RuntimeJob.objects.filter(pk__in=job_ids))
        if len(jobs) == len(job_ids) and all(j.status in FINISHED for j in jobs):
            return jobs
        time.sleep(0.05)
    raise AssertionError(f"jobs {job_ids} did not finish")


def event_sent(client, played: Played, plugin_id: str, topic: str, payload: dict[str, Any]) -> dict[str, RuntimeJob]:
    """Send one declared event and wait for its subscribers: {runtimeId: finished job}."""
    response = rpc(client, played, {"kind": "event", "pluginId": plugin_id, "topic": topic, "payload": payload})
    assert response.status_code == 200, response.content
    deferred = response.json()["deferredJobs"]
    jobs = {str(j.pk): j for j in jobs_finished([d["jobId"] for d in deferred])}
    return {d["runtimeId"]: jobs[d["jobId"]] for d in deferred}


def session_jobs_finished(session_id: str, seconds: float = 20) -> list[RuntimeJob]:
    """Every runtime job of the session once all have finished (the followers a turn queued)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        jobs = list(RuntimeJob.objects.filter(session_id=session_id))
        if all(j.status in FINISHED for j in jobs):
            return jobs
        time.sleep(0.05)
    raise AssertionError(f"the jobs of {session_id} did not finish")


@contextmanager
def upstream_world(world_id: str) -> Iterator[str]:
    """An upstream fixture world installed under COVEL_HOME/worlds for the block (catalogue_worlds)."""
    target = upstream_world_install(world_id)
    try:
        yield world_id
    finally:
        shutil.rmtree(target, ignore_errors=True)
