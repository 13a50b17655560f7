"""One request-body rule on every JSON write route (spec 004 在本机怎么调用 / §响应格式约定; issue 16).

covel.middleware.JsonBodyMiddleware parses every non-empty write body under /api/ as JSON whatever
its Content-Type (absent, text/plain, the form type ``curl -d`` sends): a body is never silently
ignored. Only POST /api/media (raw image bytes) and the multipart upload forms of /api/install are
not JSON. Keys a route's documented body does not declare (``additionalProperties: false``) are
400 invalid_request with details.issues; statuses without a code in the spec's tables stay codeless.
"""
from __future__ import annotations

import json

import pytest

from sessions.models import Session, Snapshot
from tests.covel.test_openapi_contract import Contract
from tests.media.test_api import PNG
from tests.sessions.support import OPERATOR_TOKEN, catalog, session  # noqa: F401

pytestmark = pytest.mark.django_db

AUTH = {"HTTP_AUTHORIZATION": f"Bearer {OPERATOR_TOKEN}"}
# "" = no Content-Type header at all; the form type is what `curl -d` sends without -H.
NON_JSON_TYPES = ["", "text/plain", "application/x-www-form-urlencoded", "application/xml"]


def _send(client, method: str, url: str, body: bytes | str, content_type: str = "application/json"):
    data = body.encode() if isinstance(body, str) else body
    return client.generic(method, url, data, content_type=content_type, **AUTH)


def _snapshot_id(client, session_id: str) -> str:
    response = _send(client, "POST", f"/api/sessions/{session_id}/snapshots", "{}")
    assert response.status_code == 201, response.content
    return response.json()["id"]


# 1. POST /api/sessions ---------------------------------------------------------------------------


def test_an_empty_object_creates_a_session_without_a_world_as_the_spec_allows(client, catalog):
    # spec 004 §POST /api/sessions: worldId 必填 否 — "省略时创建无世界会话"
    response = _send(client, "POST", "/api/sessions", "{}")
    assert response.status_code == 201, response.content
    assert response.json()["worldId"] is None
    schema = client.get("/api/openapi.json").json()["components"]["schemas"]["SessionIn"]
    assert "worldId" not in schema.get("required", []) and schema["additionalProperties"] is False


@pytest.mark.parametrize("content_type", NON_JSON_TYPES + ["application/json"])
def test_malformed_session_body_is_400_invalid_json_body_whatever_the_content_type(client, catalog, content_type):
    response = _send(client, "POST", "/api/sessions", "garbage", content_type)
    assert response.status_code == 400, response.content
    assert response.json()["code"] == "invalid_json_body"
    assert Session.objects.count() == 0


@pytest.mark.parametrize("content_type", NON_JSON_TYPES)
def test_a_json_session_body_sent_with_another_content_type_is_read(client, catalog, content_type):
    response = _send(client, "POST", "/api/sessions", json.dumps({"worldId": "tide-test", "locale": "en-US"}), content_type)
    assert response.status_code == 201, response.content
    assert response.json()["worldId"] == "tide-test"
    assert Session.objects.get(id=response.json()["id"]).world_id == "tide-test"


def test_a_non_object_json_body_is_400_invalid_request_body(client, catalog):
    for body in ("[]", '"tide-test"', "null", "1"):
        response = _send(client, "POST", "/api/sessions", body, "text/plain")
        assert response.status_code == 400 and response.json()["code"] == "invalid_request_body", body
    assert Session.objects.count() == 0


def test_refused_origins_are_still_403_before_the_body_is_read(client, catalog):
    response = client.post("/api/sessions", data=b"garbage", content_type="text/plain", HTTP_ORIGIN="http://evil.example")
    assert response.status_code == 403 and response.json()["code"] == "origin_not_allowed"
    assert "access-control-allow-origin" not in {k.lower() for k in response.headers}


# 2. The same rule on the other write routes --------------------------------------------------------


@pytest.mark.parametrize("content_type", ["", "application/x-www-form-urlencoded", "text/plain"])
def test_fork_reads_its_body_without_a_json_content_type(client, session, content_type):
    url = f"/api/sessions/{session['id']}/fork"
    unknown = _send(client, "POST", url, '{"fromSnapshotId": "x"}', content_type)
    assert unknown.status_code == 404 and unknown.json()["code"] == "not_found", unknown.content
    snapshot_id = _snapshot_id(client, session["id"])
    forked = _send(client, "POST", url, json.dumps({"fromSnapshotId": snapshot_id}), content_type)
    assert forked.status_code == 201, forked.content
    assert forked.json()["fromSnapshotId"] == snapshot_id and forked.json()["parentSessionId"] == session["id"]


@pytest.mark.parametrize("content_type", ["", "application/x-www-form-urlencoded", "text/plain"])
def test_snapshot_body_is_read_and_garbage_refused_without_a_json_content_type(client, session, content_type):
    url = f"/api/sessions/{session['id']}/snapshots"
    garbage = _send(client, "POST", url, "garbage", content_type)
    assert garbage.status_code == 400 and garbage.json()["code"] == "invalid_json_body"
    assert Snapshot.objects.filter(session_id=session["id"]).count() == 0
    labelled = _send(client, "POST", url, '{"label": "before the bridge"}', content_type)
    assert labelled.status_code == 201, labelled.content
    assert labelled.json()["label"] == "before the bridge"
    assert Snapshot.objects.get(snapshot_id=labelled.json()["id"]).label == "before the bridge"


@pytest.mark.parametrize("content_type", ["", "application/x-www-form-urlencoded"])
def test_patch_and_actions_follow_the_same_rule(client, session, content_type):
    url = f"/api/sessions/{session['id']}"
    paused = _send(client, "PATCH", url, '{"status": "paused"}', content_type)
    assert paused.status_code == 200 and paused.json()["status"] == "paused", paused.content
    assert Session.objects.get(id=session["id"]).status == "paused"
    garbage = _send(client, "PATCH", url, "status=active", content_type)
    assert garbage.status_code == 400 and garbage.json()["code"] == "invalid_json_body"
    assert Session.objects.get(id=session["id"]).status == "paused"
    action = _send(client, "POST", "/api/actions", "garbage", content_type)
    assert action.status_code == 400 and action.json()["code"] == "invalid_json_body"


def test_raw_body_routes_are_not_parsed_as_json(client, session):
    # POST /api/media takes the image's bytes (spec 004 §媒体), so they must reach the route untouched.
    upload = client.post(f"/api/media?sessionId={session['id']}", data=PNG, content_type="image/png", **AUTH)
    assert upload.status_code == 201, upload.content
    assert upload.json()["mime"] == "image/png"


# 3. Unknown fields ---------------------------------------------------------------------------------


def _assert_unknown_field(response, field: str = "bogus") -> None:
    assert response.status_code == 400, response.content
    body = response.json()
    assert body["code"] == "invalid_request"
    assert {"path": [field], "message": "Unknown field", "type": "extra_forbidden"} in body["details"]["issues"]


def test_unknown_fields_are_refused_and_nothing_is_written(client, session):
    sid = session["id"]
    created = _send(client, "POST", "/api/sessions", '{"worldId": "tide-test", "bogus": 1}')
    _assert_unknown_field(created)
    assert Session.objects.count() == 1
    snapshot = _send(client, "POST", f"/api/sessions/{sid}/snapshots", '{"label": "x", "bogus": 1}', "text/plain")
    _assert_unknown_field(snapshot)
    assert Snapshot.objects.filter(session_id=sid).count() == 0
    patched = _send(client, "PATCH", f"/api/sessions/{sid}", '{"status": "paused", "bogus": 1}')
    _assert_unknown_field(patched)
    assert Session.objects.get(id=sid).status == "active"
    snapshot_id = _snapshot_id(client, sid)
    fork = _send(client, "POST", f"/api/sessions/{sid}/fork", json.dumps({"fromSnapshotId": snapshot_id, "bogus": 1}))
    _assert_unknown_field(fork)
    assert Session.objects.count() == 1


def test_every_unknown_key_is_listed_and_camel_case_names_are_the_only_spelling(client, catalog):
    response = _send(client, "POST", "/api/sessions", '{"world_id": "tide-test", "presetId": "p"}')
    assert response.status_code == 400
    paths = [issue["path"] for issue in response.json()["details"]["issues"]]
    assert paths == [["world_id"], ["presetId"]]


def test_the_documented_bodies_forbid_unknown_fields(client):
    document = client.get("/api/openapi.json").json()
    for name in ("SessionIn", "SessionPatch", "SnapshotIn", "ForkIn"):
        assert document["components"]["schemas"][name]["additionalProperties"] is False, name


# 4. memory-index matches its schema -----------------------------------------------------------------


def test_memory_index_of_an_unindexed_session_is_valid_against_the_document(client, session):
    response = client.get(f"/api/sessions/{session['id']}/memory-index", **AUTH)
    assert response.status_code == 200, response.content
    assert response.json()["locked"] is None
    contract = Contract(client.get("/api/openapi.json").json())
    contract.check(response, "GET", "/api/sessions/{session_id}/memory-index")
    assert contract.checked


# 5. Error shapes of the spec's tables ----------------------------------------------------------------


def test_codeless_errors_stay_as_the_spec_writes_them(client, session, settings):
    stream = client.get("/api/events/stream")
    assert stream.status_code == 400 and stream.json() == {"error": "sessionId required"}
    fork = _send(client, "POST", f"/api/sessions/{session['id']}/fork", "{}")
    assert fork.status_code == 400 and fork.json() == {"error": "fromSnapshotId is required"}
    settings.BODY_LIMIT_DEFAULT_BYTES = 1024
    big = _send(client, "POST", "/api/sessions", json.dumps({"loreOverride": "x" * 2048}), "")
    assert big.status_code == 413 and big.json() == {"error": "Payload Too Large"}
    assert Session.objects.count() == 1


def test_only_the_raw_body_routes_of_the_document_skip_json_parsing(client):
    # The middleware's raw-body list and the OpenAPI document must agree: a route documenting a body
    # without application/json is raw, every other write route is JSON.
    from covel.middleware import _raw_body_route

    document = client.get("/api/openapi.json").json()
    raw, json_routes = set(), set()
    for template, operations in document["paths"].items():
        path = template.replace("{", "").replace("}", "")  # any non-empty segment stands for a parameter
        for method, operation in operations.items():
            content = (operation.get("requestBody") or {}).get("content") or {}
            if not content or method not in ("post", "put", "patch", "delete"):
                continue
            if "application/json" in content:
                json_routes.add((method, template))
                assert not _raw_body_route(path, "application/json"), (method, template)
            elif set(content) == {"multipart/form-data"}:
                assert _raw_body_route(path, "multipart/form-data"), (method, template)
            else:
                raw.add((method, template))
                assert _raw_body_route(path, ""), (method, template)
    assert ("post", "/api/media") in raw and ("post", "/api/sessions") in json_routes


def test_a_multipart_form_on_a_json_route_is_refused_unless_empty(client, session):
    url = f"/api/sessions/{session['id']}/snapshots"
    form = client.post(url, {"label": "x"}, **AUTH)  # the test client's default: multipart/form-data
    assert form.status_code == 400 and form.json()["code"] == "invalid_json_body"
    assert Snapshot.objects.filter(session_id=session["id"]).count() == 0
    empty = client.post(url, **AUTH)
    assert empty.status_code == 201, empty.content
