"""GET /api/events/stream refusals and limits, POST /api/events/emit (spec 004 §事件系统)."""
from __future__ import annotations

import pytest
from django.core.signals import request_finished
from django.db import close_old_connections
from django.test import override_settings

from tests.turns.events_support import make_session
from covel.ratelimit import rate_limits_reset
from turns import event_stream
from turns.models import SessionEvent

OPERATOR = "op-token-0123456789"


@pytest.fixture(autouse=True)
def _fresh_limits():
    event_stream.rate_limiter.reset()
    rate_limits_reset()
    yield
    event_stream.db_connections_close()


def _stream(api, query, **extra):
    return api.get(f"/api/events/stream?{query}", **extra)


def _close(*responses):
    """End streams the way the server does after a client leaves (without closing the test's DB
    connection, as Django's test client does around ``close``)."""
    request_finished.disconnect(close_old_connections)
    try:
        for response in responses:
            response.close()
    finally:
        request_finished.connect(close_old_connections)


@pytest.mark.django_db
def test_stream_without_session_id_is_400(api):
    response = _stream(api, "topics=state")
    assert response.status_code == 400
    assert response.json() == {"error": "sessionId required"}


@pytest.mark.django_db
def test_stream_with_unknown_topics_is_400_naming_them(api):
    session = make_session()
    response = _stream(api, f"sessionId={session.pk}&topics=state,bogus,nope")
    assert response.status_code == 400
    assert response.json() == {"error": "Invalid topics: bogus, nope"}


@pytest.mark.django_db
def test_stream_of_unknown_session_is_404(api):
    response = _stream(api, "sessionId=missing")
    assert response.status_code == 404
    assert response.json() == {"error": "Session not found: missing", "code": "session_not_found"}


@pytest.mark.django_db
def test_stream_opens_as_event_stream(api):
    session = make_session()
    response = _stream(api, f"sessionId={session.pk}&topics=runtime,state")
    try:
        assert response.status_code == 200
        assert response["Content-Type"].startswith("text/event-stream")
        assert response["Cache-Control"] == "no-cache"
        assert event_stream.connection_registry.count(session.pk) == 1
    finally:
        _close(response)
    assert event_stream.connection_registry.count(session.pk) == 0


@pytest.mark.django_db
@override_settings(DEPLOYMENT_TIER="demo", COVEL_OPERATOR_TOKEN=OPERATOR)
def test_stream_in_hosted_tier_needs_the_owner_or_operator_token(api):
    session = make_session(owner_token="owner-secret")
    anonymous = _stream(api, f"sessionId={session.pk}")
    wrong = _stream(api, f"sessionId={session.pk}&session_token=nope")
    owner = _stream(api, f"sessionId={session.pk}&session_token=owner-secret")
    operator = _stream(api, f"sessionId={session.pk}", HTTP_AUTHORIZATION=f"Bearer {OPERATOR}")
    missing = _stream(api, "sessionId=missing&session_token=owner-secret")
    _close(owner, operator)
    assert (anonymous.status_code, anonymous.json()["code"]) == (401, "session_owner_required")
    assert wrong.status_code == 401
    assert (owner.status_code, operator.status_code) == (200, 200)
    assert missing.status_code == 404


@pytest.mark.django_db
@override_settings(COVEL_SSE_MAX_CONNECTIONS_PER_SESSION=2)
def test_per_session_connection_cap_is_429_until_a_stream_closes(api):
    session, other = make_session(), make_session()
    open_streams = [_stream(api, f"sessionId={session.pk}") for _ in range(2)]
    refused = _stream(api, f"sessionId={session.pk}")
    elsewhere = _stream(api, f"sessionId={other.pk}")
    _close(open_streams[0])
    again = _stream(api, f"sessionId={session.pk}")
    _close(*open_streams, elsewhere, again)
    assert refused.status_code == 429
    assert refused.json()["code"] == "connection_limit_exceeded"
    assert (elsewhere.status_code, again.status_code) == (200, 200)


@pytest.mark.django_db
@override_settings(COVEL_SSE_MAX_CONNECTIONS=2)
def test_global_connection_cap_is_429(api):
    sessions = [make_session() for _ in range(3)]
    opened = [_stream(api, f"sessionId={s.pk}") for s in sessions[:2]]
    refused = _stream(api, f"sessionId={sessions[2].pk}")
    _close(*opened)
    assert [r.status_code for r in opened] == [200, 200]
    assert refused.status_code == 429
    assert refused.json()["code"] == "global_connection_limit_exceeded"


@pytest.mark.django_db
@override_settings(RATE_LIMIT_RPM=3)
def test_rate_limit_per_client_address(api):
    answers = [_stream(api, "topics=state").status_code for _ in range(3)]
    limited = _stream(api, "topics=state")
    other_address = _stream(api, "topics=state", REMOTE_ADDR="10.1.2.3")
    assert answers == [400, 400, 400]
    assert limited.status_code == 429
    assert limited.json()["code"] == "rate_limit_exceeded"
    assert int(limited["Retry-After"]) >= 1
    assert other_address.status_code == 400


# POST /api/events/emit


def _emit(api, body, **extra):
    return api.post("/api/events/emit", body, content_type="application/json", **extra)


@pytest.mark.django_db
def test_emit_appends_an_event_emitted_to_the_log(api):
    session = make_session()
    response = _emit(api, {"topic": "quest.completed", "sessionId": session.pk, "payload": {"name": "First steps"}})
    assert response.status_code == 200
    assert response.json() == {"ok": True, "id": "ep1:1"}
    event = SessionEvent.objects.get()
    assert (event.session_id, event.seq, event.topic, event.type, event.payload) == (
        session.pk, 1, "game", "event.emitted", {"topic": "quest.completed", "data": {"name": "First steps"}},
    )


@pytest.mark.django_db
def test_emit_without_payload_sends_an_empty_object(api):
    session = make_session()
    assert _emit(api, {"topic": "t", "sessionId": session.pk}).status_code == 200
    assert SessionEvent.objects.get().payload == {"topic": "t", "data": {}}


@pytest.mark.django_db
@pytest.mark.parametrize(
    "body, message",
    [
        ({"sessionId": "s"}, "topic is required and must be a string"),
        ({"topic": 5, "sessionId": "s"}, "topic is required and must be a string"),
        ({"topic": "t"}, "sessionId is required and must be a string"),
        ({"topic": "t", "sessionId": "s", "payload": [1]}, "payload must be an object"),
        ({"topic": "t", "sessionId": "s", "payload": "x"}, "payload must be an object"),
    ],
)
def test_emit_validates_before_looking_up_the_session(api, body, message):
    response = _emit(api, body)
    assert response.status_code == 400
    assert response.json() == {"error": message}
    assert not SessionEvent.objects.exists()


@pytest.mark.django_db
def test_emit_to_unknown_session_is_404(api):
    response = _emit(api, {"topic": "t", "sessionId": "missing"})
    assert response.status_code == 404
    assert response.json()["code"] == "session_not_found"


@pytest.mark.django_db
def test_emit_to_ended_session_is_409(api):
    session = make_session(status="ended")
    response = _emit(api, {"topic": "t", "sessionId": session.pk})
    assert response.status_code == 409
    assert response.json()["code"] == "session_not_active"
    assert not SessionEvent.objects.exists()


@pytest.mark.django_db
@override_settings(DEPLOYMENT_TIER="demo", COVEL_OPERATOR_TOKEN=OPERATOR)
def test_emit_is_disabled_in_hosted_tiers_without_enable_debug_page(api):
    session = make_session(owner_token="owner-secret")
    refused = _emit(api, {"topic": "t", "sessionId": session.pk}, HTTP_X_SESSION_TOKEN="owner-secret")
    with override_settings(ENABLE_DEBUG_PAGE=True):
        anonymous = _emit(api, {"topic": "t", "sessionId": session.pk})
        owner = _emit(api, {"topic": "t", "sessionId": session.pk}, HTTP_X_SESSION_TOKEN="owner-secret")
    assert refused.status_code == 403
    assert refused.json() == {"error": "Event injection is disabled in production"}
    assert anonymous.status_code == 401
    assert owner.status_code == 200


@pytest.mark.django_db
@override_settings(RATE_LIMIT_RPM=2)
def test_many_subscribers_behind_one_address_are_counted_per_session(api):
    # given players behind one NAT address, each following their own session
    sessions = [make_session(f"nat-{i}") for i in range(5)]
    # when each opens its stream (twice: a reconnect)
    answers = [_stream(api, f"sessionId={s.id}").status_code for s in sessions for _ in range(2)]
    # then none is refused; one client hammering one session still is
    assert answers == [200] * 10
    assert _stream(api, f"sessionId={sessions[0].id}").status_code == 429


def test_the_browser_reconnect_header_wins_once_it_is_past_the_url_cursor():
    from turns.api_events import stream_cursor_choose

    assert stream_cursor_choose("ep:5", "ep:9") == "ep:9"  # EventSource reconnect after more events
    assert stream_cursor_choose("ep:5", "ep:3") == "ep:5"  # the URL is further along
    assert stream_cursor_choose("ep:5", "other:9") == "ep:5"  # another epoch: the URL wins
    assert stream_cursor_choose(None, "ep:9") == "ep:9" and stream_cursor_choose("ep:5", None) == "ep:5"
