"""The published OpenAPI document (GET /api/openapi.json) is valid OpenAPI 3 and has no duplicate keys
(Python's json module would silently keep the last; Swagger UI refuses the document)."""
from __future__ import annotations

import json

import pytest
from openapi_spec_validator import validate


class DuplicateKey(ValueError):
    pass


def _strict_object(pairs):
    keys = [key for key, _ in pairs]
    duplicates = sorted({key for key in keys if keys.count(key) > 1})
    if duplicates:
        raise DuplicateKey(f"duplicate keys {duplicates} in an object with keys {keys[:12]}")
    return dict(pairs)


def test_the_duplicate_key_check_can_fail():
    with pytest.raises(DuplicateKey):
        json.loads('{"responses": {"200": {}, "200": {}}}', object_pairs_hook=_strict_object)


def test_openapi_document_is_valid_and_has_no_duplicate_keys(client):
    response = client.get("/api/openapi.json")
    assert response.status_code == 200
    document = json.loads(response.content, object_pairs_hook=_strict_object)
    validate(document)
    assert document["paths"]["/api/actions"]["post"]["responses"]["200"]["content"] == {"text/event-stream": {}}
