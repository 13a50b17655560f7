"""Property-based requests against every operation of the published OpenAPI document (schemathesis):
no 5xx, and every error in the envelope ``{"error", "code"?, "details"?}`` (spec 004 §响应格式约定).

Bounded: MAX_EXAMPLES generated requests per operation (about 2,000 in all), derandomized so a CI
failure reproduces. Requests go through Django's WSGI handler in this process, so the middleware
(Host check, body limits, JSON bodies, the envelope) runs as for a real client.

Left out: routes that stream without end (the event stream), the AI probes, which call model
endpoints, and the model database refresh, which downloads its source (tests/jobs/test_ai_api.py
and tests/jobs/test_model_db.py cover them against local fakes; nothing here leaves loopback).
"""
from __future__ import annotations

import json

import pytest
import schemathesis
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings
from schemathesis.checks import not_a_server_error

from covel.wsgi import application

MAX_EXAMPLES = 20
ENVELOPE_KEYS = {"error", "code", "details"}
EXCLUDED_PATHS = ("/api/events/stream", "/api/ai/ping", "/api/ai/models", "/api/ai/generate-world",
                  "/api/model-db/refresh")

schema = (
    schemathesis.openapi.from_wsgi("/api/openapi.json", application)
    .exclude(path=list(EXCLUDED_PATHS))
)


def envelope_problem(status: int, content_type: str, body: bytes) -> str | None:
    """Why a response breaks the error envelope, or None. 2xx/3xx responses are not checked."""
    if status < 400:
        return None
    if not content_type.startswith("application/json"):
        return f"{status} answered {content_type or 'no content type'}"
    try:
        data = json.loads(body)
    except ValueError:
        return f"{status} body is not JSON"
    if not isinstance(data, dict) or not isinstance(data.get("error"), str) or not data["error"]:
        return f"{status} body has no error string: {body[:200]!r}"
    if set(data) - ENVELOPE_KEYS:
        return f"{status} body has keys outside the envelope: {sorted(set(data) - ENVELOPE_KEYS)}"
    if "code" in data and not isinstance(data["code"], str):
        return f"{status} code is not a string"
    return None


SENT: list[str] = []  # one entry per request the run sent (printed in the terminal summary)


@schemathesis.check
def error_envelope(ctx, response, case):
    SENT.append(f"{case.method} {case.path} {response.status_code}")
    content_type = response.headers.get("content-type") or response.headers.get("Content-Type") or ""
    if isinstance(content_type, list):
        content_type = content_type[0] if content_type else ""
    problem = envelope_problem(response.status_code, content_type, response.content)
    if problem:
        raise AssertionError(f"{case.method} {case.formatted_path}: {problem}")


@pytest.fixture(scope="module", autouse=True)
def _requests_report():
    """After the module: how many requests were sent, by status (shown with -s / in the CI log)."""
    yield
    if SENT:
        statuses: dict[str, int] = {}
        for line in SENT:
            statuses[line.rsplit(" ", 1)[1]] = statuses.get(line.rsplit(" ", 1)[1], 0) + 1
        print(f"\napi fuzz: {len(SENT)} requests over {len({line.rsplit(' ', 1)[0] for line in SENT})} "
              f"method/path pairs; by status {dict(sorted(statuses.items()))}")


def test_the_envelope_check_can_fail():
    # The check used below rejects what it must (so a green fuzz run means something).
    assert envelope_problem(500, "text/html", b"<h1>Server Error</h1>")
    assert envelope_problem(404, "application/json", b'{"detail": "Not Found"}')
    assert envelope_problem(400, "application/json", b'{"error": "bad", "extra": 1}')
    assert envelope_problem(400, "application/json", b'{"error": "bad", "code": "invalid_request"}') is None


@pytest.mark.django_db(transaction=True)
@schema.parametrize()
@hypothesis_settings(max_examples=MAX_EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
def test_every_operation_answers_without_5xx_and_in_the_envelope(case, settings, tmp_path):
    settings.COVEL_HOME = tmp_path / "home"
    case.call_and_validate(checks=[not_a_server_error, error_envelope], headers={"Host": "127.0.0.1"})
