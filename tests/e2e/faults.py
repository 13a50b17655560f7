"""Helpers of the fault-injection scenarios (tests/e2e/test_faults.py); no tests here.

- ``TurnRun``: one POST /api/actions read on its own thread, with when and how its stream ended.
- ``Watch``: one GET /api/events/stream subscriber that, like a client, reconnects with the last
  event id it received when its stream ends or is cut, so completeness can be checked afterwards.
- ``turns_settle``: wait until every accepted turn's execution is finished in the database and
  classify it (committed once / retryable / anything else is a failure).
- ``Outcome``: one row of the faults × outcomes table printed through the ``figures`` fixture.
"""
from __future__ import annotations

import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from tests.e2e.client import ActionResult, Api, Subscriber
from tests.e2e.play import PlayedSession

FINISHED = {"committed", "failed", "interrupted", "aborted", "rejected"}
RETRYABLE = {"failed", "interrupted", "aborted"}


@dataclass
class TurnRun:
    """A ``say`` turn sent to ``base_url``; ``result`` (or ``error``) once its stream ended."""

    played: PlayedSession
    base_url: str
    text: str
    request_id: str = field(default_factory=lambda: f"fault-{uuid.uuid4().hex[:12]}")
    result: ActionResult | None = None
    error: str | None = None
    ended_at: float | None = None
    _thread: threading.Thread | None = None

    def start(self) -> "TurnRun":
        def run() -> None:
            api = Api(self.base_url, self.played.token)
            try:
                self.result = api.action("submit_actions", self.played.id,
                                         {"actions": [{"kind": "say", "text": self.text}]},
                                         request_id=self.request_id, read_timeout_seconds=300)
            except Exception as exc:  # the connection was cut (web process killed)
                self.error = f"{type(exc).__name__}: {exc}"
            finally:
                self.ended_at = time.monotonic()
                api.close()

        self._thread = threading.Thread(target=run, name=f"turn-{self.request_id}", daemon=True)
        self._thread.start()
        return self

    def resend(self, base_url: str) -> "TurnRun":
        """The same request again (same requestId and body) to ``base_url``, as a client does whose
        stream was cut: a recorded request replays its stream, an unrecorded one runs now."""
        return TurnRun(self.played, base_url, self.text, request_id=self.request_id).start()

    def join(self, deadline: float) -> bool:
        self._thread.join(max(0.0, deadline - time.monotonic()))
        return not self._thread.is_alive()

    @property
    def ending(self) -> str:
        """How the stream ended: ``committed``, ``not committed``, ``stream_interrupted``, ``503 <code>``,
        ``cut`` (connection closed without a final frame) or ``open``."""
        if self.ended_at is None:
            return "open"
        if self.error is not None:
            return "cut"
        result = self.result
        if result.status_code != 200:
            return f"{result.status_code} {(result.error or {}).get('code')}"
        if not result.frames:
            return "cut"
        last = result.frames[-1]
        if last["type"] == "execution.completed":
            return "committed" if last["payload"].get("committed") is True else "not committed"
        if last["type"] == "error.occurred" and last["payload"].get("code") == "stream_interrupted":
            assert last["payload"].get("retryable") is True, last
            return "stream_interrupted"
        return f"cut after {last['type']}"

    @property
    def accepted(self) -> bool:
        return not (self.result is not None and self.result.status_code != 200)


class Watch:
    """A subscriber of one session that reconnects (with its last event id) whenever its stream
    ends; ``endings`` lists how each connection ended (``error.occurred``, ``reset``, ``cut``)."""

    def __init__(self, base_urls: list[str], played: PlayedSession, cursor: str, *, index: int = 0) -> None:
        self.base_urls = base_urls
        self.played = played
        self.cursor = cursor
        self.index = index
        self.events: list[dict[str, Any]] = []  # log events (id, event) over every connection
        self.endings: list[tuple[str, float]] = []
        self._subscriber: Subscriber | None = None
        self._open()

    def _open(self) -> None:
        url = self.base_urls[self.index % len(self.base_urls)]
        self._taken = 0
        self._subscriber = Subscriber(url, self.played.id, self.played.token, cursor=self.cursor).start()

    def _collect(self) -> None:
        sub = self._subscriber
        fresh = list(sub.events)[self._taken:]
        self._taken += len(fresh)
        for event in fresh:
            if event["event"] in {"system.connected", "system.heartbeat", "error.occurred"} or not event["id"]:
                continue
            self.events.append({"id": event["id"], "event": event["event"]})
            self.cursor = event["id"]

    def ended(self) -> str | None:
        """How the current connection ended, or None while it is open."""
        sub = self._subscriber
        if sub._thread.is_alive():
            return None
        last = sub.events[-1]["event"] if sub.events else None
        if last == "error.occurred":
            return "error.occurred"
        if last == "system.reset":
            return "reset"
        return "cut"

    def reconnect_if_ended(self, *, prefer: int | None = None) -> str | None:
        """If the stream ended: note how, then reconnect from the last id (to ``prefer`` or the same
        web process). Returns the ending, or None when it was still open."""
        ending = self.ended()
        if ending is None:
            return None
        self._collect()
        self.endings.append((ending, time.monotonic()))
        self._subscriber.close()
        if prefer is not None:
            self.index = prefer
        self._open()
        return ending

    def caught_up(self, head_seq: int, timeout_seconds: float = 30) -> None:
        """Wait until events up to ``head_seq`` arrived on the current connection."""
        def reached(event: dict) -> bool:
            return bool(event["id"]) and int(event["id"].rsplit(":", 1)[1]) >= head_seq

        if self.cursor and int(self.cursor.rsplit(":", 1)[1]) >= head_seq:
            return
        self._subscriber.wait_for(reached, timeout_seconds=timeout_seconds)

    def close(self) -> None:
        self._collect()
        self._subscriber.close()


def watch_check(cluster, watch: Watch, start_seq: int) -> None:
    """Every logged event of the session after ``start_seq`` was received once, in order."""
    with cluster.db() as conn:
        rows = conn.execute("SELECT seq, type FROM turns_sessionevent WHERE session_id = %s AND seq > %s ORDER BY seq",
                            (watch.played.id, start_seq)).fetchall()
    if rows:
        watch.caught_up(rows[-1][0])
    watch._collect()
    received = [(int(e["id"].rsplit(":", 1)[1]), e["event"]) for e in watch.events]
    assert received == [(seq, kind) for seq, kind in rows], (
        f"session {watch.played.id}: events received {received[:50]}… != logged {rows[:50]}… "
        f"(endings {watch.endings})")


def session_head(cluster, session_id: str) -> tuple[str, int]:
    with cluster.db() as conn:
        return conn.execute("SELECT event_epoch, event_seq FROM covel_sessions_session WHERE id = %s",
                            (session_id,)).fetchone()


def executions_by_status(cluster, runs: list[TurnRun]) -> dict[str, str]:
    """request_id → execution status, for the runs whose request was recorded."""
    ids = [run.request_id for run in runs]
    with cluster.db() as conn:
        rows = conn.execute("SELECT request_id, status FROM turns_execution WHERE request_id = ANY(%s)", (ids,)).fetchall()
    return dict(rows)


def wait_running(cluster, runs: list[TurnRun], *, at_least: int, timeout_seconds: float = 60) -> dict[str, str]:
    """Wait until every run's request is recorded (accepted) and ``at_least`` of them run in a worker."""
    deadline = time.monotonic() + timeout_seconds
    statuses: dict[str, str] = {}
    while time.monotonic() < deadline:
        statuses = executions_by_status(cluster, runs)
        running = sum(1 for s in statuses.values() if s == "running")
        if len(statuses) == len(runs) and running >= at_least:
            return statuses
        time.sleep(0.05)
    raise AssertionError(f"not all {len(runs)} turns accepted with {at_least} running after {timeout_seconds} s: {statuses}")


@dataclass
class Settled:
    """What became of the accepted turns of one fault."""

    committed_once: int = 0
    retryable: int = 0
    refused: int = 0
    endings: dict[str, int] = field(default_factory=dict)
    max_stream_seconds: float = 0.0


def turns_settle(cluster, runs: list[TurnRun], *, fault_at: float, stream_bound_seconds: float,
                 settle_seconds: float = 120) -> Settled:
    """Every stream ended within ``stream_bound_seconds`` of ``fault_at``; every accepted turn's
    execution finishes, committed exactly once or failed/interrupted (retryable per
    GET /api/sessions/:id/execution), consistent with what its stream said."""
    deadline = fault_at + stream_bound_seconds
    open_runs = [run for run in runs if not run.join(deadline)]
    assert not open_runs, f"streams still open {stream_bound_seconds} s after the fault: {[r.request_id for r in open_runs]}"
    out = Settled()
    for run in runs:
        out.endings[run.ending] = out.endings.get(run.ending, 0) + 1
        out.max_stream_seconds = max(out.max_stream_seconds, run.ended_at - fault_at)
    settle_deadline = time.monotonic() + settle_seconds
    statuses: dict[str, str] = {}
    while time.monotonic() < settle_deadline:
        statuses = executions_by_status(cluster, runs)
        if all(statuses.get(run.request_id) in FINISHED for run in runs if run.accepted and run.request_id in statuses):
            break
        time.sleep(0.5)
    for run in runs:
        if not run.accepted:
            assert run.request_id not in statuses, f"{run.request_id}: refused with {run.ending} but recorded"
            out.refused += 1
            continue
        status = statuses.get(run.request_id)
        assert status in FINISHED, f"{run.request_id}: execution {status} after {settle_seconds} s ({run.ending})"
        with cluster.db() as conn:
            committed = conn.execute(
                "SELECT count(*) FROM turns_turnresult r JOIN turns_execution e ON r.execution_id = e.id "
                "WHERE e.request_id = %s AND r.committed", (run.request_id,)).fetchone()[0]
        detail = f"{run.request_id}: status {status}, {committed} committed turn(s), stream {run.ending}"
        if status == "committed":
            assert committed == 1, detail
            assert run.ending in {"committed", "stream_interrupted", "cut"}, detail
            out.committed_once += 1
        else:
            assert status in RETRYABLE and committed == 0, detail
            assert run.ending in {"not committed", "stream_interrupted", "cut"}, detail
            state = run.played.api.json("GET", f"/api/sessions/{run.played.id}/execution")
            if state.get("requestId") == run.request_id:
                assert state["state"] in {"failed", "interrupted"} and state.get("retry"), (detail, state)
            out.retryable += 1
    return out


@dataclass
class Outcome:
    """One row of the faults table."""

    fault: str
    action_streams: int = 0
    event_streams: int = 0
    stream_endings: str = ""
    max_stream_seconds: float = 0.0
    bound_seconds: float = 0.0
    event_endings: str = ""
    accepted: int = 0
    committed_once: int = 0
    retryable: int = 0
    refused: int = 0
    workers_after: str = ""
    passed: bool = False
    note: str = ""

    HEADER = ("| fault | action streams → endings (max s after fault / bound) | event streams → endings | "
              "accepted turns: committed once / retryable | refused (503) | workers after | result |")

    def row(self) -> str:
        return (f"| {self.fault} | {self.action_streams} → {self.stream_endings} "
                f"({self.max_stream_seconds:.1f} / {self.bound_seconds:.0f}) | {self.event_streams} → {self.event_endings} | "
                f"{self.accepted}: {self.committed_once} / {self.retryable} | {self.refused} | {self.workers_after} | "
                f"{'ok' if self.passed else 'FAILED'}{' ' + self.note if self.note else ''} |")


def endings_text(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items(), key=lambda kv: -kv[1])) or "none"


def describe(runs: list[TurnRun]) -> str:
    return json.dumps([(run.request_id, run.ending) for run in runs])
