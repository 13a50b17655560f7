"""What a played session really receives matches the OpenAPI document: every documented route the
session touches answers a documented status with a body valid against the documented schema (the
``@contract`` shapes are documentation only, so this is what keeps them honest)."""
from __future__ import annotations

import json
from urllib.parse import quote

import pytest
from jsonschema import Draft202012Validator
from referencing import Registry
from referencing.jsonschema import DRAFT202012

from tests.plugins_app.builtin.play_support import play

pytestmark = pytest.mark.django_db(transaction=True)
DOCUMENT_URI = "urn:covel:openapi"
JSON_BODY = "application/json"


class Contract:
    """The document, and a check of one response against the operation of (method, path template)."""

    def __init__(self, document: dict) -> None:
        self.document = document
        self.registry = Registry().with_resource(DOCUMENT_URI, DRAFT202012.create_resource(document))
        self.checked: set[tuple[str, str, str]] = set()

    def check(self, response, method: str, template: str) -> None:
        operation = self.document["paths"][template][method.lower()]
        status = str(response.status_code)
        key = status if status in operation["responses"] else "default"
        assert key in operation["responses"], f"{method} {template} answered undocumented {status}: {response.content[:300]}"
        if key == "default":
            assert response.status_code >= 400, f"{method} {template}: {status} is not documented"
        documented = operation["responses"][key].get("content") or {}
        content_type = (response.get("Content-Type") or "").split(";")[0]
        if content_type != JSON_BODY:
            assert content_type in documented or any(t.endswith("/*") for t in documented), (method, template, content_type)
            return
        pointer = "/".join(["", "paths", template.replace("~", "~0").replace("/", "~1"), method.lower(), "responses", key,
                            "content", JSON_BODY.replace("/", "~1"), "schema"])
        validator = Draft202012Validator({"$ref": f"{DOCUMENT_URI}#{quote(pointer)}"}, registry=self.registry)
        errors = sorted(validator.iter_errors(json.loads(response.content)), key=lambda e: list(e.absolute_path))
        assert not errors, f"{method} {template} {status}: " + "; ".join(
            f"{'/'.join(map(str, e.absolute_path))}: {e.message[:200]}" for e in errors[:5])
        self.checked.add((method, template, status))


def test_a_played_session_matches_the_documented_schemas(client):
    contract = Contract(client.get("/api/openapi.json").json())
    played = play(client, "hollow-reach-light", says=["I look around the lamp room."], name="Wren")
    sid = played.id
    auth = {"HTTP_AUTHORIZATION": f"Bearer {played.token}"}

    def call(method: str, url: str, template: str, body=None, **extra):
        kwargs = {**auth, **extra}
        if body is not None:
            kwargs.update(data=json.dumps(body), content_type=JSON_BODY)
        response = getattr(client, method.lower())(url, **kwargs)
        contract.check(response, method, template)
        return response

    s = "/api/sessions/{session_id}"
    for url, template in [
        (f"/api/sessions/{sid}", s), ("/api/sessions", "/api/sessions"), (f"/api/sessions/{sid}/state", f"{s}/state"),
        (f"/api/sessions/{sid}/action-kinds", f"{s}/action-kinds"), (f"/api/sessions/{sid}/plugins", f"{s}/plugins"),
        (f"/api/sessions/{sid}/messages", f"{s}/messages"), (f"/api/sessions/{sid}/messages/page?limit=3", f"{s}/messages/page"),
        (f"/api/sessions/{sid}/lorebook", f"{s}/lorebook"), (f"/api/sessions/{sid}/view", f"{s}/view"),
        (f"/api/sessions/{sid}/characters", f"{s}/characters"), (f"/api/sessions/{sid}/execution", f"{s}/execution"),
        (f"/api/traces/{sid}", "/api/traces/{session_id}"), (f"/api/traces/{sid}/turns", "/api/traces/{session_id}/turns"),
        (f"/api/traces/{sid}/turns/page?limit=5", "/api/traces/{session_id}/turns/page"),
        (f"/api/sessions/{sid}/turns", f"{s}/turns"), (f"/api/sessions/{sid}/runtime-outputs?limit=3", f"{s}/runtime-outputs"),
        (f"/api/sessions/{sid}/interaction-records", f"{s}/interaction-records"),
        (f"/api/sessions/{sid}/plugin-data", f"{s}/plugin-data"), (f"/api/sessions/{sid}/runtime-jobs", f"{s}/runtime-jobs"),
        (f"/api/sessions/{sid}/approvals", f"{s}/approvals"), (f"/api/sessions/{sid}/ui-slots", f"{s}/ui-slots"),
        (f"/api/sessions/{sid}/orchestration", f"{s}/orchestration"),
        (f"/api/sessions/{sid}/media/image-flow", f"{s}/media/image-flow"),
        ("/api/worlds", "/api/worlds"), ("/api/worlds/hollow-reach-light", "/api/worlds/{world_id}"),
        ("/api/worlds/hollow-reach-light/plugin-plan", "/api/worlds/{world_id}/plugin-plan"),
        ("/api/worlds/hollow-reach-light/gallery", "/api/worlds/{world_id}/gallery"),
        ("/api/worlds/hollow-reach-light/dimensions/export?format=json", "/api/worlds/{world_id}/dimensions/export"),
        ("/api/plugins", "/api/plugins"), ("/api/plugins/narrator", "/api/plugins/{plugin_id}"),
        ("/api/framework/capabilities", "/api/framework/capabilities"), ("/api/plugin-flows", "/api/plugin-flows"),
        ("/api/framework/authoring", "/api/framework/authoring"), ("/api/framework/schemas/ui-spec.json", "/api/framework/schemas/{name}"),
        ("/api/ui-specs", "/api/ui-specs"), (f"/api/ui-specs?sessionId={sid}", "/api/ui-specs"),
        ("/api/ai/protocols", "/api/ai/protocols"), ("/api/model-db", "/api/model-db"),
        ("/api/model-db/search?q=gpt&limit=2", "/api/model-db/search"), ("/api/model-db/lookup?model=gpt-4o", "/api/model-db/lookup"),
        ("/api/llm-config", "/api/llm-config"), ("/api/presets", "/api/presets"), ("/api/provider-keys", "/api/provider-keys"),
        ("/api/config/info", "/api/config/info"), ("/api/config/server-settings", "/api/config/server-settings"),
        ("/api/config/raw", "/api/config/raw"), ("/api/config/raw/llm.toml", "/api/config/raw/{name}"),
        ("/api/health", "/api/health"), ("/api/media/library", "/api/media/library"),
        ("/api/sessions/nope", s), ("/api/sessions/nope/messages/page?cursor=bad", f"{s}/messages/page"),
    ]:
        call("GET", url, template)

    outputs = client.get(f"/api/sessions/{sid}/runtime-outputs?limit=1", **auth).json()["items"]
    call("GET", f"/api/sessions/{sid}/runtime-outputs/{outputs[0]['id']}", f"{s}/runtime-outputs/{{output_id}}")
    call("GET", f"/api/sessions/{sid}/runtime-outputs/{outputs[0]['id']}/full-prompt", f"{s}/runtime-outputs/{{output_id}}/full-prompt")
    item = client.get(f"/api/sessions/{sid}/plugin-data", **auth).json()["items"][0]
    pd = f"{s}/plugin-data/{{plugin_id}}"
    call("GET", f"/api/sessions/{sid}/plugin-data/{item['pluginId']}", pd)
    call("GET", f"/api/sessions/{sid}/plugin-data/{item['pluginId']}/_index", f"{pd}/_index")
    call("GET", f"/api/sessions/{sid}/plugin-data/{item['pluginId']}/{item['namespace']}", f"{pd}/{{namespace}}")
    call("GET", f"/api/sessions/{sid}/plugin-data/{item['pluginId']}/{item['namespace']}/{item['key']}", f"{pd}/{{namespace}}/{{key}}")
    call("PUT", f"/api/sessions/{sid}/plugin-data/{item['pluginId']}/notes/n1", f"{pd}/{{namespace}}/{{key}}", {"value": {"a": 1}})
    call("DELETE", f"/api/sessions/{sid}/plugin-data/{item['pluginId']}/notes/n1", f"{pd}/{{namespace}}/{{key}}")

    snapshot = call("POST", f"/api/sessions/{sid}/snapshots", f"{s}/snapshots", {"label": "before"}).json()
    call("GET", f"/api/sessions/{sid}/snapshots", f"{s}/snapshots")
    call("GET", f"/api/sessions/{sid}/snapshots/{snapshot['id']}", f"{s}/snapshots/{{snapshot_id}}")
    call("POST", f"/api/sessions/{sid}/fork", f"{s}/fork", {"fromSnapshotId": snapshot["id"]})
    call("POST", f"/api/sessions/{sid}/snapshots/{snapshot['id']}/restore", f"{s}/snapshots/{{snapshot_id}}/restore", {})
    call("DELETE", f"/api/sessions/{sid}/snapshots/{snapshot['id']}", f"{s}/snapshots/{{snapshot_id}}")
    lore = f"{s}/lorebook/{{entry_id}}"
    call("POST", f"/api/sessions/{sid}/lorebook", f"{s}/lorebook", {"id": "bell", "keys": ["bell"], "content": "The bell."})
    call("PUT", f"/api/sessions/{sid}/lorebook/bell", lore, {"keys": ["bell"], "content": "The old bell."})
    call("PATCH", f"/api/sessions/{sid}/lorebook/bell", lore, {"enabled": False})
    call("DELETE", f"/api/sessions/{sid}/lorebook/bell", lore)
    call("POST", f"/api/sessions/{sid}/characters", f"{s}/characters", {"id": "gull", "name": "Gull", "aliases": ["G"]})
    call("POST", f"/api/sessions/{sid}/messages/sync", f"{s}/messages/sync", {"messages": []})
    call("PATCH", f"/api/sessions/{sid}", s, {"autoAdvanceLimit": 2})
    call("PATCH", f"/api/sessions/{sid}/orchestration", f"{s}/orchestration", {"maxActors": 2})
    call("POST", f"/api/sessions/{sid}/abort", f"{s}/abort", {})
    call("POST", f"/api/sessions/{sid}/steer", f"{s}/steer", {"message": "Hurry."})
    call("POST", "/api/events/emit", "/api/events/emit", {"topic": "bell", "sessionId": sid, "payload": {}})
    call("DELETE", f"/api/sessions/{sid}/plugins/guide", f"{s}/plugins/{{plugin_id}}")
    call("PUT", f"/api/sessions/{sid}/plugins/guide", f"{s}/plugins/{{plugin_id}}")
    call("POST", f"/api/sessions/{sid}/plugin-rpc", f"{s}/plugin-rpc", {"kind": "command", "commandId": "framework:debug"})
    call("PATCH", f"/api/sessions/{sid}/seats/main", f"{s}/seats/{{seat_id}}", {"currentCharacterId": "gull"})
    call("DELETE", f"/api/sessions/{sid}/approvals", f"{s}/approvals")
    call("POST", "/api/approvals/00000000-0000-0000-0000-000000000000/decision", "/api/approvals/{approval_id}/decision",
         {"decision": "allow"})
    call("POST", "/api/llm-config/reload", "/api/llm-config/reload", {})
    call("POST", "/api/ai/ping", "/api/ai/ping", {})
    call("POST", f"/api/sessions/{sid}/setup/pregame/retry", f"{s}/setup/{{runtime_id}}/retry", {})
    call("POST", "/api/media/cleanup", "/api/media/cleanup", {})
    call("POST", "/api/actions", "/api/actions",
         {"requestId": "contract-say", "type": "submit_actions", "sessionId": sid,
          "payload": {"actions": [{"kind": "say", "text": "Again."}]}})
    call("DELETE", f"/api/sessions/{sid}", s)

    statuses = {status for _, _, status in contract.checked}
    assert len(contract.checked) >= 70 and {"200", "201", "404"} <= statuses, sorted(contract.checked)
