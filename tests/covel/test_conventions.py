"""The spec's API conventions, exercised over HTTP (spec 004 §概览, §响应格式约定, §鉴权)."""
from __future__ import annotations

import json
import uuid

import pytest
from django.conf import settings
from django.test import override_settings

pytestmark = pytest.mark.django_db


def test_health_reports_the_running_storage(client):
    response = client.get("/api/health")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ok"
    assert body["storage"]["data"]["backend"] == settings.STORE_BACKEND
    assert body["storage"]["data"]["durable"] is True
    assert body["storage"]["data"]["frontendMode"] == "remote"
    assert body["deployment"]["form"] == "personal"
    assert body["operatorTokenRequired"] is False
    assert str(uuid.UUID(body["bootId"])) == body["bootId"]
    assert body["vector"] == body["storage"]["vector"]
    assert body["checks"]["database"]["ok"] is True
    if settings.STORE_BACKEND == "pg":
        assert body["checks"]["redis"]["ok"] is True


def test_health_reports_a_broken_redis(client):
    with override_settings(REDIS_URL="redis://127.0.0.1:1/0"):
        response = client.get("/api/health")
    assert response.status_code == 503
    assert response.json()["status"] == "degraded"
    assert response.json()["checks"]["redis"]["ok"] is False


def test_unknown_api_route_answers_in_the_envelope(client):
    response = client.get("/api/no-such-thing")
    assert response.status_code == 404
    assert response.json() == {"error": "Not found: GET /api/no-such-thing", "code": "not_found"}


def test_wrong_method_answers_in_the_envelope(client):
    response = client.delete("/api/health")
    assert response.status_code == 405
    assert response.json()["code"] == "method_not_allowed"


def test_array_body_is_rejected_before_the_route(client):
    response = client.post("/api/health", data="[1, 2]", content_type="application/json")
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_request_body"


def test_null_body_is_rejected(client):
    response = client.post("/api/anything", data="null", content_type="application/json")
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_request_body"


def test_malformed_json_is_rejected(client):
    response = client.post("/api/anything", data="{not json", content_type="application/json")
    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "invalid_json_body"
    assert body["error"].startswith("Malformed JSON body")


def test_oversized_body_with_content_length_is_413(client):
    big = json.dumps({"blob": "x" * (1024 * 1024 + 10)})
    response = client.post("/api/anything", data=big, content_type="application/json")
    assert response.status_code == 413
    assert response.json() == {"error": "Payload Too Large"}


def test_foreign_host_is_refused(client):
    response = client.get("/api/health", HTTP_HOST="evil.example")
    assert response.status_code == 403
    assert response.json()["code"] == "host_not_allowed"


@pytest.mark.parametrize("host", ["localhost:3001", "127.0.0.1", "[::1]:3001"])
def test_loopback_hosts_are_allowed(client, host):
    assert client.get("/api/health", HTTP_HOST=host).status_code == 200


def test_hosted_tier_does_not_check_host(client):
    with override_settings(DEPLOYMENT_TIER="demo"):
        response = client.get("/api/health", HTTP_HOST="play.example.com")
    assert response.status_code == 200
    assert response.json()["operatorTokenRequired"] is True
    assert response.json()["deployment"]["form"] == "hosted"


def test_write_from_foreign_origin_is_refused(client):
    response = client.post("/api/anything", data="{}", content_type="application/json", HTTP_ORIGIN="https://evil.example")
    assert response.status_code == 403
    assert response.json()["code"] == "origin_not_allowed"


def test_write_from_own_origin_passes_the_origin_check(client):
    response = client.post(
        "/api/anything", data="{}", content_type="application/json", HTTP_ORIGIN="http://testserver"
    )
    assert response.status_code == 404  # reached routing: unknown route


def test_write_from_configured_cors_origin_passes(client):
    with override_settings(CORS_ALLOWED_ORIGINS=["https://app.example"]):
        response = client.post("/api/anything", data="{}", content_type="application/json", HTTP_ORIGIN="https://app.example")
    assert response.status_code == 404


@pytest.mark.parametrize("headers", [{"HTTP_ORIGIN": "null"}, {"HTTP_SEC_FETCH_DEST": "iframe"}, {"HTTP_SEC_FETCH_DEST": "embed"}])
def test_framed_or_null_origin_requests_are_refused_even_for_get(client, headers):
    response = client.get("/api/health", **headers)
    assert response.status_code == 403
    assert response.json()["code"] == "foreign_request_refused"


def test_openapi_docs_are_served(client):
    assert client.get("/api/docs").status_code == 200
    schema = client.get("/api/openapi.json").json()
    assert "/api/health" in schema["paths"]


@pytest.mark.django_db(transaction=True)
def test_health_reports_a_database_behind_the_migrations(client):
    from django.core.management import call_command

    # given: the turns app rolled back to before its first migration
    call_command("migrate", "turns", "zero", verbosity=0)
    try:
        # when
        response = client.get("/api/health")
    finally:
        call_command("migrate", "turns", verbosity=0)
    # then
    assert response.status_code == 503
    body = response.json()
    assert body["checks"]["migrations"]["ok"] is False
    assert "turns.0001_initial" in body["checks"]["migrations"]["pending"]
    assert "migrate" in body["error"]
