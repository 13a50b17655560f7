"""The embedded shape's in-process timers (covel.inprocess.timers_start): the beat schedule runs in
the web process, so a turn whose task was lost (the in-process queue died with a restart) is
re-sent and runs there too (README "Faults")."""
from __future__ import annotations

import time

import pytest
from django.db import connections

from covel import inprocess
from tests.turns.test_actions_helpers import session_make
from tests.turns.test_execution_resend import accepted_but_lost
from turns.models import Execution

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def timers(settings):
    settings.COVEL_INPROCESS_TIMERS = True
    settings.CELERY_BEAT_SCHEDULE = {"resend": {"task": "turns.resend_executions", "schedule": 0.2},
                                     "no-interval": {"task": "turns.reap_executions", "schedule": "daily"}}
    yield
    inprocess.timers_stop()
    assert inprocess.wait_idle(30)


def test_timers_run_the_beat_schedule_and_a_lost_turn_commits(timers, settings):
    settings.COVEL_EXECUTION_RESEND_AFTER_SECONDS = 30
    # given: a turn accepted 40 s ago whose task was lost
    lost = accepted_but_lost(session_make(characters=[("hero", "Hero", "player")]), age_seconds=40)
    # when: the web process starts its timers
    assert inprocess.timers_start() is True
    assert inprocess.timers_start() is True  # once per process
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and Execution.objects.get(pk=lost.pk).status != Execution.STATUS_COMMITTED:
        time.sleep(0.1)
    # then
    assert Execution.objects.get(pk=lost.pk).status == Execution.STATUS_COMMITTED
    connections.close_all()


def test_timers_stay_off_without_the_in_process_worker(settings):
    settings.COVEL_INPROCESS_TIMERS = True
    settings.COVEL_INPROCESS_WORKER = False
    assert inprocess.timers_start() is False
