"""Bad input anywhere under /api/ is a 4xx in the error envelope, never a 500 (spec 004 §响应格式约定).

Request-wide rules of covel.middleware / covel.jsonbody / covel.api: text that no store can hold (NUL,
unpaired surrogates), JSON nested too deeply, malformed multipart bodies, and bodies sent with a
non-JSON Content-Type to routes that parse JSON anyway.
"""
from __future__ import annotations

import pytest

from plugins_app.models import PluginData
from sessions.models import ChatMessage, LorebookEntry, Session, World
from tests.sessions.support import catalog, session  # noqa: F401
from turns.models import SessionEvent

pytestmark = pytest.mark.django_db

NUL_BODY = b'{"content": "a\\u0000b", "keys": ["k"]}'
SURROGATE_BODY = b'{"content": "\\ud800"}'


def _deep(depth: int) -> bytes:
    return b'{"value": ' + b"[" * depth + b"]" * depth + b"}"


@pytest.mark.parametrize("raw, path", [(NUL_BODY, ["content"]), (SURROGATE_BODY, ["content"]),
                                       (b'{"content": "c", "extra": {"a\\u0000": 1}}', ["extra", "a\\u0000"])])
def test_unstorable_text_in_a_json_body_is_400_and_nothing_is_written(client, session, raw, path):
    response = client.post(f"/api/sessions/{session['id']}/lorebook", data=raw, content_type="application/json")
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_request_body"
    assert response.json()["details"] == {"path": path}
    assert LorebookEntry.objects.filter(session_id=session["id"], owner=LorebookEntry.OWNER_PLAYER).count() == 0


@pytest.mark.parametrize("number", [b"NaN", b"Infinity", b"-Infinity", b"1e400"])
def test_non_finite_numbers_in_a_json_body_are_400_and_nothing_is_written(client, session, number):
    sid = session["id"].encode()
    events = SessionEvent.objects.filter(session_id=session["id"]).count()
    emit = client.post("/api/events/emit", data=b'{"topic": "t", "sessionId": "%s", "payload": {"a": [%s]}}' % (sid, number),
                       content_type="application/json")
    put = client.put(f"/api/sessions/{session['id']}/plugin-data/teller/notes/n", data=b'{"value": %s}' % number,
                     content_type="application/json")

    for response, path in ((emit, ["payload", "a", "0"]), (put, ["value"])):
        assert response.status_code == 400
        assert response.json()["code"] == "invalid_request_body" and response.json()["details"] == {"path": path}
    assert SessionEvent.objects.filter(session_id=session["id"]).count() == events
    assert not PluginData.objects.filter(session_id=session["id"], key="n").exists()


def test_nul_inside_a_nested_message_is_refused_before_the_route(client, session):
    body = b'{"messages": [{"role": "user", "content": "ok", "block": {"x": "\\u0000"}}]}'
    response = client.post(f"/api/sessions/{session['id']}/messages/sync", data=body, content_type="application/json")
    assert response.status_code == 400
    assert response.json()["details"] == {"path": ["messages", "0", "block", "x"]}
    assert ChatMessage.objects.filter(session_id=session["id"]).count() == 0


def test_json_nested_deeper_than_the_limit_is_400_and_at_the_limit_is_stored(client, session):
    url = f"/api/sessions/{session['id']}/plugin-data/teller/notes/deep"
    too_deep = client.put(url, data=_deep(128), content_type="application/json")
    assert too_deep.status_code == 400 and too_deep.json()["code"] == "invalid_request_body"
    at_limit = client.put(url, data=_deep(127), content_type="application/json")
    assert at_limit.status_code == 200
    unparsable = client.put(url, data=b"[" * 100_000 + b"]" * 100_000, content_type="application/json")
    assert unparsable.status_code == 400 and unparsable.json()["code"] == "invalid_json_body"


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", "application/octet-stream"])
def test_schema_bound_body_with_another_content_type_is_checked_too(client, catalog, content_type):
    response = client.post("/api/worlds", data=b'{"name": "a\\u0000b"}', content_type=content_type)
    assert response.status_code == 400
    assert "error" in response.json()
    assert World.objects.count() == 0


def test_action_body_with_another_content_type_is_checked_too(client, session):
    body = b'{"requestId": "r\\u0000", "type": "narrative", "sessionId": "%s", "payload": {}}' % session["id"].encode()
    response = client.post("/api/actions", data=body, content_type="text/plain")
    assert response.status_code == 400 and response.json()["code"] == "invalid_request_body"
    deep = client.post("/api/actions", data=b"[" * 100_000 + b"]" * 100_000, content_type="text/plain")
    assert deep.status_code == 400 and deep.json()["code"] == "invalid_json_body"


def test_nul_in_the_session_segment_of_the_path_is_session_not_found(client, catalog):
    for path in ("/api/sessions/a%00b", "/api/sessions/a%00b/lorebook", "/api/traces/a%00b/turns"):
        response = client.get(path)
        assert response.status_code == 404, path
        assert response.json()["code"] == "session_not_found"


def test_nul_elsewhere_in_the_path_is_404_and_in_the_query_400(client, session):
    sid = session["id"]
    missing = client.get(f"/api/sessions/{sid}/plugin-data/teller/notes/a%00b")
    assert missing.status_code == 404 and missing.json()["code"] == "not_found"
    put = client.put(f"/api/sessions/{sid}/plugin-data/teller/a%00b/k", {"value": 1}, content_type="application/json")
    assert put.status_code == 404
    query = client.get("/api/sessions?worldId=a%00b")
    assert query.status_code == 400 and query.json()["code"] == "invalid_query"


@pytest.mark.parametrize("url", ["/api/install/validate/plugin", "/api/install/validate/world",
                                 "/api/install/world", "/api/install/plugin", "/api/install/st-import"])
def test_malformed_multipart_body_is_400(client, catalog, url):
    no_boundary = client.post(url, data=b"PK\x03\x04junk", content_type="multipart/form-data")
    assert no_boundary.status_code == 400 and no_boundary.json()["code"] == "invalid_request_body"
    bad_base64 = (b'--zz\r\nContent-Transfer-Encoding: base64\r\nContent-Disposition: form-data; name="file"; '
                  b'filename="a.zip"\r\n\r\n!!!\r\n--zz--\r\n')
    response = client.post(url, data=bad_base64, content_type="multipart/form-data; boundary=zz")
    assert response.status_code == 400 and "error" in response.json()


@pytest.mark.parametrize("kind", ["plugin", "world"])
def test_validate_multipart_without_a_file_field_is_400(client, catalog, kind):
    body = b'--zz\r\nContent-Disposition: form-data; name="other"\r\n\r\nx\r\n--zz--\r\n'
    response = client.post(f"/api/install/validate/{kind}", data=body, content_type="multipart/form-data; boundary=zz")
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_request"


def test_session_create_with_unstorable_lore_override_writes_no_session(client, catalog):
    response = client.post("/api/sessions", data=b'{"worldId": "tide-test", "loreOverride": "x\\u0000"}',
                           content_type="application/json")
    assert response.status_code == 400
    assert Session.objects.count() == 0


def test_nul_in_a_cursor_keeps_the_cursor_code(client, session):
    for path in ("messages/page", "snapshots"):
        response = client.get(f"/api/sessions/{session['id']}/{path}?cursor=a%00b")
        assert response.status_code == 400, path
        assert response.json()["code"] == "invalid_cursor"


def test_nul_in_a_records_filter_is_400(client, session):
    for query in ("runtimeId=a%00", "pluginId=a%00", "type=a%00", "targetPluginId=a%00"):
        path = "runtime-outputs" if "Id" in query and "target" not in query else "interaction-records"
        response = client.get(f"/api/sessions/{session['id']}/{path}?{query}")
        assert response.status_code == 400 and response.json()["code"] == "invalid_query", query
