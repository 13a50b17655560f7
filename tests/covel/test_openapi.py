"""The published OpenAPI document (GET /api/openapi.json) is valid OpenAPI 3, has no duplicate keys
(Python's json module would silently keep the last; Swagger UI refuses the document), and describes
every route: request bodies, query parameters, typed success responses, the error envelope per
documented status, security, SSE as text/event-stream (issue 16, covel/openapi.py)."""
from __future__ import annotations

import json

import pytest
from openapi_spec_validator import validate

from covel.openapi import operations

ERROR_REF = {"$ref": "#/components/schemas/ErrorOut"}
# Writes that take no body at all (the path names everything).
BODILESS_WRITES = {
    "delete_session", "enable_session_plugin", "disable_session_plugin", "delete_lorebook_entry", "abort_session_turn",
    "retry_setup_runtime", "delete_plugin_data", "delete_snapshot", "restore_snapshot", "revoke_session_approvals",
    "cancel_runtime_job", "retry_runtime_job", "reload_llm_config", "refresh_model_db", "delete_world",
    "resume_plugin_fault", "model_relay_end", "rebuild_memory_index",
}
# Successes that are not JSON: streams and files.
NON_JSON_SUCCESS = {"post_action", "generate_world", "revise_world", "translate_world", "stream_events", "get_framework_schema", "export_world_dimensions",
                    "get_world_gallery_file", "download_media", "model_relay_stream"}


class DuplicateKey(ValueError):
    pass


def _strict_object(pairs):
    keys = [key for key, _ in pairs]
    duplicates = sorted({key for key in keys if keys.count(key) > 1})
    if duplicates:
        raise DuplicateKey(f"duplicate keys {duplicates} in an object with keys {keys[:12]}")
    return dict(pairs)


@pytest.fixture(scope="module")
def document(django_db_blocker):
    from django.test import Client

    with django_db_blocker.unblock():
        response = Client().get("/api/openapi.json")
    assert response.status_code == 200
    return json.loads(response.content, object_pairs_hook=_strict_object)


def test_the_duplicate_key_check_can_fail():
    with pytest.raises(DuplicateKey):
        json.loads('{"responses": {"200": {}, "200": {}}}', object_pairs_hook=_strict_object)


def test_openapi_document_is_valid_and_has_no_duplicate_keys(document):
    validate(document)
    assert set(document["paths"]["/api/actions"]["post"]["responses"]["200"]["content"]) == {"text/event-stream"}


def test_every_operation_has_a_contract_with_the_error_envelope(document):
    missing = [f"{m} {p}" for m, p, op in operations(document) if "default" not in op["responses"]]
    assert missing == [], "routes without @contract (covel/openapi.py)"
    for method, path, op in operations(document):
        for status, response in op["responses"].items():
            if (method, path, status) == ("GET", "/api/health", "503"):
                # degraded health is the health object itself, carrying the envelope's error and code
                schema = document["components"]["schemas"][response["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]]
                assert {"error", "code", "checks"} <= set(schema["properties"]), schema
                continue
            if status == "default" or int(status) >= 400:
                assert response["content"]["application/json"]["schema"] == ERROR_REF, (method, path, status)


def test_every_success_is_typed(document):
    untyped = []
    for method, path, op in operations(document):
        for status, response in op["responses"].items():
            if status == "default" or int(status) >= 300 or status == "204":
                continue  # 204: no content by definition
            content = response.get("content") or {}
            schema = (content.get("application/json") or {}).get("schema")
            if op["operationId"] in NON_JSON_SUCCESS:
                if not content:
                    untyped.append(f"{method} {path} {status}")
            elif not schema or schema == {"type": "object", "additionalProperties": True}:
                untyped.append(f"{method} {path} {status}")
    assert untyped == []


def test_every_write_with_a_body_declares_it(document):
    undeclared = [op["operationId"] for method, path, op in operations(document)
                  if method in ("POST", "PUT", "PATCH") and "requestBody" not in op and op["operationId"] not in BODILESS_WRITES]
    assert undeclared == []


def test_operation_ids_are_the_endpoint_names_and_unique(document):
    ids = [op["operationId"] for _, _, op in operations(document)]
    assert len(ids) == len(set(ids))
    assert {"create_session", "post_action", "list_messages_page", "health"} <= set(ids)


def test_query_parameters_are_declared(document):
    def params(path, method="get"):
        return {p["name"]: p for p in document["paths"][path][method].get("parameters", []) if p["in"] == "query"}

    assert set(params("/api/sessions/{session_id}/messages/page")) == {"limit", "cursor"}
    assert params("/api/sessions/{session_id}/messages/page")["limit"]["schema"]["type"] == "integer"
    stream = params("/api/events/stream")
    assert set(stream) == {"sessionId", "topics", "lastEventId"} and stream["sessionId"]["required"] is True
    assert set(params("/api/sessions/{session_id}/runtime-outputs")) == {"limit", "runtimeId", "pluginId", "since"}
    assert set(params("/api/media", "post")) == {"sessionId"}


def test_security_schemes_for_owner_and_operator_tokens(document):
    schemes = document["components"]["securitySchemes"]
    assert schemes["ownerToken"] == {**schemes["ownerToken"], "type": "http", "scheme": "bearer"}
    assert schemes["operatorToken"]["type"] == "http" and schemes["ownerTokenHeader"]["name"] == "X-Session-Token"
    session = document["paths"]["/api/sessions/{session_id}"]["get"]
    assert {"ownerToken": []} in session["security"] and {"operatorToken": []} in session["security"]
    create = document["paths"]["/api/sessions"]["post"]
    assert {"operatorToken": []} in create["security"] and {"ownerToken": []} not in create["security"]
    assert "security" not in document["paths"]["/api/health"]["get"]


def test_sse_routes_are_text_event_stream(document):
    for path, method in (("/api/actions", "post"), ("/api/events/stream", "get"), ("/api/ai/generate-world", "post")):
        assert set(document["paths"][path][method]["responses"]["200"]["content"]) == {"text/event-stream"}, path


def test_request_bodies_are_typed_models(document):
    create = document["paths"]["/api/sessions"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert create == {"$ref": "#/components/schemas/SessionIn"}
    schema = document["components"]["schemas"]["SessionIn"]
    # spec 004 §POST /api/sessions: worldId is optional ("省略时创建无世界会话")
    assert "required" not in schema and schema["additionalProperties"] is False
    assert schema["properties"]["autoAdvanceLimit"] == {**schema["properties"]["autoAdvanceLimit"], "type": "integer",
                                                        "minimum": 0, "maximum": 10}
    install = document["paths"]["/api/install/plugin"]["post"]["requestBody"]["content"]
    assert set(install) == {"multipart/form-data", "application/json"}
