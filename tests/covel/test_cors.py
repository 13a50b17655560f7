"""CORS for browser clients on another origin (spec 004 §鉴权 CORS rules), through django-cors-headers:
preflight, allow headers only for configured origins, refused origins stay refused before any route."""
from __future__ import annotations

import pytest
from django.test import override_settings

APP = "https://app.example"

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("app_origin")]


@pytest.fixture
def app_origin():
    with override_settings(CORS_ALLOWED_ORIGINS=[APP]):
        yield


def test_preflight_from_the_configured_origin_allows_the_spec_headers(client):
    # given a browser about to POST JSON with a session token and provider keys
    response = client.options("/api/sessions", HTTP_ORIGIN=APP, HTTP_ACCESS_CONTROL_REQUEST_METHOD="POST",
                              HTTP_ACCESS_CONTROL_REQUEST_HEADERS="content-type, x-session-token, x-provider-keys")
    # then the preflight succeeds and names what the browser may send
    assert response.status_code == 200
    assert response["Access-Control-Allow-Origin"] == APP
    allowed = {h.strip() for h in response["Access-Control-Allow-Headers"].split(",")}
    assert {"authorization", "x-session-token", "x-provider-keys", "x-slot-config", "x-plugin-user-settings",
            "last-event-id", "content-type"} <= allowed
    assert "POST" in response["Access-Control-Allow-Methods"]


def test_responses_to_the_configured_origin_carry_the_allow_origin_header(client):
    ok = client.get("/api/health", HTTP_ORIGIN=APP)
    missing = client.get("/api/sessions/nope", HTTP_ORIGIN=APP)
    assert ok.status_code == 200 and ok["Access-Control-Allow-Origin"] == APP
    # errors too, so the page can read the envelope
    assert missing.status_code == 404 and missing["Access-Control-Allow-Origin"] == APP
    assert "retry-after" in ok["Access-Control-Expose-Headers"].lower()


def test_the_event_stream_answers_an_allowed_origin_with_allow_headers(client):
    created = client.post("/api/sessions", {"worldId": "hollow-reach-light", "locale": "en-US"},
                          content_type="application/json", HTTP_ORIGIN=APP)
    assert created.status_code == 201 and created["Access-Control-Allow-Origin"] == APP
    stream = client.get(f"/api/events/stream?sessionId={created.json()['id']}", HTTP_ORIGIN=APP)
    assert stream.status_code == 200 and stream["Content-Type"].startswith("text/event-stream")
    assert stream["Access-Control-Allow-Origin"] == APP
    stream.close()


@pytest.mark.parametrize("content_type", ["application/json", "text/plain"])
def test_other_origins_get_no_allow_headers_and_their_writes_are_refused(client, content_type):
    # a "simple" text/plain POST needs no preflight, so the refusal must happen server-side
    response = client.post("/api/sessions", data='{"worldId": "hollow-reach-light"}', content_type=content_type,
                           HTTP_ORIGIN="https://evil.example")
    assert response.status_code == 403 and response.json()["code"] == "origin_not_allowed"
    assert not response.has_header("Access-Control-Allow-Origin")
    preflight = client.options("/api/sessions", HTTP_ORIGIN="https://evil.example",
                               HTTP_ACCESS_CONTROL_REQUEST_METHOD="POST")
    assert not preflight.has_header("Access-Control-Allow-Origin")


def test_framed_requests_are_refused_without_allow_headers(client):
    response = client.get("/api/health", HTTP_ORIGIN=APP, HTTP_SEC_FETCH_DEST="iframe")
    assert response.status_code == 403 and response.json()["code"] == "foreign_request_refused"
    assert not response.has_header("Access-Control-Allow-Origin")
