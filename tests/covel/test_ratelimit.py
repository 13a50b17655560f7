"""Rate limits of the session read routes (spec 004 §状态查询, §消息历史): per client and path, 429
rate_limit_exceeded with Retry-After; counted in Redis per deployment in the hosted shape."""
from __future__ import annotations

import pytest
from django.test import override_settings

from covel.ratelimit import rate_limits_reset
from tests.sessions.support import catalog, session  # noqa: F401

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_counters():
    rate_limits_reset()
    yield
    rate_limits_reset()


@pytest.mark.parametrize("suffix", ["state", "messages", "messages/page"])
def test_read_routes_allow_the_limit_then_answer_429(client, session, suffix):
    url = f"/api/sessions/{session['id']}/{suffix}"
    with override_settings(COVEL_READ_RATE_LIMIT_RPM=3):
        statuses = [client.get(url).status_code for _ in range(3)]
        refused = client.get(url)
        other_path = client.get(f"/api/sessions/{session['id']}/characters")
    assert statuses == [200, 200, 200]
    assert refused.status_code == 429 and refused.json()["code"] == "rate_limit_exceeded"
    assert 1 <= int(refused["Retry-After"]) <= 61
    assert other_path.status_code == 200  # counted per path


def test_clients_are_counted_apart(client, session):
    url = f"/api/sessions/{session['id']}/state"
    with override_settings(COVEL_READ_RATE_LIMIT_RPM=2, COVEL_CLIENT_IP_HEADER="X-Forwarded-For"):
        first = [client.get(url, HTTP_X_FORWARDED_FOR="203.0.113.1").status_code for _ in range(3)]
        second = client.get(url, HTTP_X_FORWARDED_FOR="203.0.113.2, 10.0.0.1").status_code
    assert first == [200, 200, 429] and second == 200


def test_sync_has_its_own_lower_limit(client, session):
    url = f"/api/sessions/{session['id']}/messages/sync"
    with override_settings(COVEL_SYNC_RATE_LIMIT_RPM=1):
        ok = client.post(url, {"messages": []}, content_type="application/json")
        refused = client.post(url, {"messages": []}, content_type="application/json")
    assert ok.status_code == 200 and refused.status_code == 429
