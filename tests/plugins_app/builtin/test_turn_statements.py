"""Issue 18's statement budget: the database statements one full-game turn of the builtin world
costs (its default plugins, 11 runtimes, the offline scripted model), counted on every connection
of the process — the request, the in-process worker and the threads it starts — from the POST
to the last background task of the turn. Runtimes read the turn's session snapshot and issue none.

The budget is what the turn needs now, per shape: PostgreSQL runs the event-head UPDATE and the
execution's ending inside the INSERTs that follow them (data-modifying CTEs) and has no explicit
BEGIN statements; SQLite pays those separately. The auto snapshot rides in the commit's
transaction, the request reads its session and seats in one statement, and a just-created
execution's stream skips its first stored-frames read. A change that adds a statement to every turn
fails here first (tests/bench/turn_writes.py prints the figures and the write replay)."""
from __future__ import annotations

import threading

import pytest
from django.db import connection, connections
from django.db.backends.signals import connection_created

from covel import inprocess
from tests.plugins_app.builtin.play_support import act, play

pytestmark = pytest.mark.django_db(transaction=True)

BUDGET = {"sqlite": 29, "postgresql": 25}


class _Counter:
    """Counts the statements of every connection of this process while installed."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.statements: list[str] = []

    def __call__(self, execute, sql, params, many, context):
        with self._lock:
            self.statements.append(sql)
        return execute(sql, params, many, context)

    def _attach(self, sender, connection, **kwargs) -> None:
        if self not in connection.execute_wrappers:
            connection.execute_wrappers.append(self)

    def __enter__(self) -> "_Counter":
        connection_created.connect(self._attach, weak=False)
        for conn in connections.all(initialized_only=True):
            self._attach(None, conn)
        return self

    def __exit__(self, *exc) -> None:
        connection_created.disconnect(self._attach)
        for conn in connections.all(initialized_only=True):
            if self in conn.execute_wrappers:
                conn.execute_wrappers.remove(self)


def test_a_full_game_turn_stays_within_its_statement_budget(client, monkeypatch):
    # A turn slower than the frames' flush window (a loaded machine) writes its frames in one more
    # INSERT per window, and its stream then reads them back once: timing, not the turn's budget.
    monkeypatch.setattr("turns.sse.FLUSH_WINDOW_SECONDS", 60.0)
    # given a builtin-world session past setup that has played a few turns
    played = play(client, "hollow-reach-light", says=[f"I look around ({n})." for n in range(4)], name="Ada Quill")
    inprocess.wait_idle()

    # when one more turn is played, through the stream's end and the turn's background tasks
    with _Counter() as counter:
        act(client, played, "submit_actions", {"actions": [{"kind": "say", "text": "I look around once more."}]})
        inprocess.wait_idle()

    # then the count saw the whole turn (the request's insert, the worker's claim, the commit's
    # trace rows and the auto snapshot) and it ran no more statements than the shape's budget
    seen = "\n".join(counter.statements)
    for part in ('INSERT INTO "turns_execution"', 'UPDATE "turns_execution" SET "status"', 'INSERT INTO "turns_traceevent"',
                 'UPDATE "covel_sessions_snapshot"'):
        assert part in seen, part
    budget = BUDGET[connection.vendor]
    assert len(counter.statements) <= budget, "\n".join(s[:120] for s in counter.statements)
