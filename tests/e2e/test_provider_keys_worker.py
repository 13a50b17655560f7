"""X-Provider-Keys reach a REAL Celery worker process (hosted shape: PostgreSQL + Redis): the keys
travel through Redis encrypted and are deleted on claim. Moved from tests/turns/test_provider_keys.py
(a real process: ``make e2e`` runs it in the hosted shape); the fake OpenAI server and helpers are there."""
from __future__ import annotations

import pytest
from django.conf import settings

from tests.turns.test_actions_helpers import action_body, session_make, stream_read
from tests.turns.test_provider_keys import (  # noqa: F401 (openai_slots: fixture)
    SECRET,
    FakeOpenAI,
    _keys_header,
    _post_with_keys,
    _rows_containing,
    openai_slots,
)
from tests.turns.worker_support import celery_worker_process  # noqa: F401 (fixture)
from turns.models import Execution

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e]


@pytest.mark.hosted_only
def test_provider_keys_reach_a_real_celery_worker_through_redis_encrypted(api, openai_slots, celery_worker_process):  # noqa: F811
    # given a separate worker process: keys travel through Redis, encrypted, deleted on claim
    import redis

    session = session_make(characters=[("hero", "Hero", "player")])
    body = action_body(session.id, request_id="req-remote-keys", actions=[{"kind": "say", "text": "I wait."}])
    client = redis.Redis.from_url(settings.REDIS_URL)
    # when
    frames = stream_read(_post_with_keys(api, body, _keys_header({"openai": SECRET})))
    # then the worker process used the key, and nothing kept it
    assert frames[-1]["payload"]["committed"] is True, frames[-1]
    assert set(FakeOpenAI.seen_auth) == {f"Bearer {SECRET}"}
    execution = Execution.objects.get(request_id="req-remote-keys")
    assert execution.claimed_by.split(":")[1] != str(__import__("os").getpid())
    assert client.exists(f"covel:provider-keys:{execution.id}") == 0
    assert _rows_containing(SECRET) == []
