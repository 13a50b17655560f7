"""The function-runtime host API over real paths (issue 25; spec 000 §Function runtime 调用工具, spec 004
§写入什么时候生效, §图像/媒体生成输出, §SSE 协议's runtime-event table): pluginData checked against the
declared dataset, ctx.gateway on a model slot served by tests/model_peer.py, ctx.recursive_call whose
writes commit with the caller and vanish with it, ctx.progress, ctx.utils.fetch_with_retry and
ctx.media against loopback HTTP fakes under a community runtime's permissions.http.
Test plugins: tests/turns/function_ctx_support.py."""
from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from media.models import MediaAsset
from plugins_app.models import PluginData
from plugins_app.registry import registry_reset
from tests.model_peer import ModelPeer, Reply
from tests.turns.function_ctx_support import FakeSite, hostkit_web_install, hostkit_write, png_bytes
from tests.turns.lifecycle_support import builtin_dir_with_lifecycle_plugins, completed, reset_files, say
from tests.turns.test_actions_helpers import session_make
from tests.turns.test_real_model_game import llm_toml
from turns.models import SessionEvent, TraceEvent

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def plugins(settings, tmp_path):
    builtin = builtin_dir_with_lifecycle_plugins(tmp_path / "builtin")
    hostkit_write(builtin)
    settings.COVEL_BUILTIN_PLUGINS_DIR = str(builtin)
    reset_files()
    registry_reset()
    yield
    (Path(settings.COVEL_HOME) / "hostkit-fail").unlink(missing_ok=True)
    (Path(settings.COVEL_HOME) / "hostkit-wait").unlink(missing_ok=True)
    reset_files()
    registry_reset()


@pytest.fixture
def peer(settings, tmp_path):
    with ModelPeer(brain=lambda body: Reply(text="Drizzle.")) as server:
        settings.COVEL_LLM_TOML = llm_toml(tmp_path, server)
        yield server


def _data(session, namespace, key, plugin_id="hostkit"):
    row = PluginData.objects.filter(session=session, plugin_id=plugin_id, namespace=namespace, key=key).first()
    return row.value if row is not None else None


def _rpc(api, session_id, body):
    return api.post(f"/api/sessions/{session_id}/plugin-rpc", data=json.dumps(body), content_type="application/json")


def _rpc_granted(api, session_id, body):
    """POST plugin-rpc, allowing (for the session) every approval it asks for first."""
    for _ in range(4):
        response = _rpc(api, session_id, body)
        if response.status_code != 202:
            return response
        approval = response.json()["approvalId"]
        decided = api.post(f"/api/approvals/{approval}/decision", data=json.dumps({"decision": "allow", "scope": "session"}),
                           content_type="application/json")
        assert decided.status_code == 200, decided.content
    raise AssertionError("approvals never ended")


def _trace(session, type):
    return [e.payload for e in TraceEvent.objects.filter(session=session, type=type).order_by("id")]


def test_plugin_data_writes_are_checked_against_the_declared_dataset(api):
    session = session_make(plugins=("teller", "hostkit"))
    response = _rpc(api, session.id, {"kind": "runtime", "pluginId": "hostkit", "runtimeId": "hostkit/data", "payload": {}})
    assert response.status_code == 200, response.content
    [item] = response.json()["runtimeResults"]
    assert item["status"] == "ok", json.dumps(item)
    # the out-of-schema set (n: 1000 against maximum 100) and update are refused before staging
    assert item["output"]["codes"] == ["dataset-violation", "dataset-violation"]
    assert item["output"]["after"] == {"n": 15} and item["output"]["readBack"] == {"n": 15}
    assert _data(session, "scores", "alice") == {"n": 15}
    assert _data(session, "scores", "bob") is None
    assert _data(session, "notes", "free") is None


def test_gateway_progress_and_recursive_call_in_a_turn(api, peer):
    session = session_make(plugins=("teller", "hostkit"))
    frames = say(api, session.id, "I check the sky.")
    done = completed(frames)
    assert done["committed"] is True and "hostkit/turnly" not in done.get("failedRuntimeIds", []), done
    # the gateway called the configured slot on the peer and returned its text and usage
    chats = [r for r in peer.requests if r.path.endswith("/chat/completions")]
    [gateway_request] = [r for r in chats if r.body["messages"][0].get("content") == "You are terse."]
    assert gateway_request.body["messages"][0] == {"role": "system", "content": "You are terse."}
    assert "tools" not in gateway_request.body or not gateway_request.body["tools"]
    turn = done["turnId"]
    [row] = PluginData.objects.filter(session=session, plugin_id="hostkit", namespace="turnly")
    assert row.value["said"] == "Drizzle." and row.value["usage"]["output"] > 0
    # the recursive child's write committed with the caller, in the same turn
    [child] = PluginData.objects.filter(session=session, plugin_id="hostkit", namespace="child")
    assert child.value == {"payload": {"from": "turnly"}}
    # events: gateway.* and job-status.updated on the action stream; recursive.* / function.* only in the trace
    types = [f["type"] for f in frames]
    assert "gateway.calling" in types and "gateway.responded" in types
    [responded] = [f["payload"] for f in frames if f["type"] == "gateway.responded"]
    assert responded["runtimeId"] == "hostkit/turnly" and responded["usage"]["output"] > 0 and responded["text"] == "Drizzle."
    progress = [f["payload"] for f in frames if f["type"] == "job-status.updated" and f["payload"].get("kind") == "progress"]
    assert [(p["status"], p.get("progress")) for p in progress] == [("running", 50.0), ("succeeded", 100.0)]
    assert not {"recursive.calling", "recursive.completed", "function.executing", "function.completed"} & set(types)
    assert [(c["targetRuntimeId"], c["depth"]) for c in _trace(session, "recursive.calling")] == [
        ("hostkit/child", 1), ("other-plugin/runtime", 1)]
    [completed_child] = _trace(session, "recursive.completed")
    assert completed_child["writes"] == 1
    [refused] = _trace(session, "recursive.failed")
    assert refused["targetRuntimeId"] == "other-plugin/runtime" and refused["error"]["code"] == "cross-package"
    assert {p["runtimeId"] for p in _trace(session, "function.executing")} >= {"hostkit/turnly", "hostkit/child"}
    assert TraceEvent.objects.filter(session=session, type="gateway.responded", turn_id=turn).count() == 1


def test_a_recursive_calls_writes_vanish_when_the_caller_fails(api, peer, settings):
    session = session_make(plugins=("teller", "hostkit"))
    (Path(settings.COVEL_HOME) / "hostkit-fail").write_text("1")
    frames = say(api, session.id)
    done = completed(frames)
    assert done["committed"] is True and "hostkit/turnly" in done.get("failedRuntimeIds", [])
    # the child ran and succeeded, but its write was the caller's and went with it
    assert len(_trace(session, "recursive.completed")) == 1
    assert not PluginData.objects.filter(session=session, plugin_id="hostkit", namespace__in=["child", "turnly"]).exists()
    progress = [f["payload"]["status"] for f in frames if f["type"] == "job-status.updated" and f["payload"].get("kind") == "progress"]
    assert progress == ["running", "failed"]


def test_a_suspended_runtime_keeps_its_recursive_writes_and_progress_job_until_resumed(api, peer, settings):
    session = session_make(plugins=("teller", "hostkit"))
    (Path(settings.COVEL_HOME) / "hostkit-wait").write_text("1")
    frames = say(api, session.id)
    assert completed(frames)["committed"] is True
    [suspended] = [f["payload"] for f in frames if f["type"] == "turn.suspended"]
    progress = [f["payload"] for f in frames if f["type"] == "job-status.updated" and f["payload"].get("kind") == "progress"
                and f["payload"]["runtimeId"] == "hostkit/waiter"]
    assert [(p["status"], p.get("progress")) for p in progress] == [("running", 30.0), ("waiting-input", 30.0)]
    job_id = progress[0]["jobId"]
    # the recursive child's write waits with the suspension (turnly's own child write did commit)
    assert not PluginData.objects.filter(session=session, plugin_id="hostkit", namespace="child",
                                         value__payload__from="waiter").exists()
    response = api.post(f"/api/sessions/{session.id}/suspensions/{suspended['suspensionId']}/resume",
                        data=json.dumps({"data": {"way": "north"}}), content_type="application/json")
    assert response.status_code == 200 and response.json()["result"]["output"] == {"way": "north"}, response.content
    assert PluginData.objects.filter(session=session, plugin_id="hostkit", namespace="child",
                                     value__payload__from="waiter").count() == 1
    # the resumed run continues the same progress job and ends it with the chain
    statuses = [(e["status"], e.get("progress")) for e in _trace(session, "job-status.updated") if e.get("jobId") == job_id]
    assert statuses == [("running", 30.0), ("waiting-input", 30.0), ("running", 80.0), ("succeeded", 100.0)]


def test_gateway_failure_fails_the_runtime_with_the_provider_code(api, settings, tmp_path):
    # given a slot whose endpoint answers nothing (a closed loopback port)
    with ModelPeer() as dead:
        settings.COVEL_LLM_TOML = llm_toml(tmp_path, dead)
    session = session_make(plugins=("teller", "hostkit"))
    frames = say(api, session.id)
    done = completed(frames)
    assert "hostkit/turnly" in done.get("failedRuntimeIds", [])
    [failed] = [f["payload"] for f in frames if f["type"] == "gateway.failed"]
    assert failed["error"]["code"] and failed["usage"] == {"input": 0, "output": 0}
    [runtime_failed] = [f["payload"] for f in frames if f["type"] == "runtime.failed" and f["payload"]["runtimeId"] == "hostkit/turnly"]
    assert runtime_failed["error"]["code"] == failed["error"]["code"]


def test_fetch_and_media_under_a_community_runtimes_http_permissions(api, settings):
    with FakeSite() as allowed, FakeSite() as other:
        hostkit_web_install(Path(settings.COVEL_HOME), allowed.origin)
        registry_reset()
        session = session_make(plugins=("teller", "hostkit-web"))
        steps = [
            {"kind": "fetch", "url": allowed.origin + "/ok"},
            {"kind": "fetch", "url": other.origin + "/ok"},
            {"kind": "fetch", "url": allowed.origin + "/flaky"},
            {"kind": "fetch", "url": f"{allowed.origin}/hop?to={other.origin}/png"},
            {"kind": "fetch", "url": f"{allowed.origin}/hop?to={other.origin}/png", "options": {"redirect": "manual"}},
            {"kind": "put", "b64": base64.b64encode(png_bytes()).decode()},
            {"kind": "ingest", "url": f"{allowed.origin}/hop?to={allowed.origin}/png"},
            {"kind": "ingest", "url": f"{allowed.origin}/hop?to={other.origin}/png"},
            {"kind": "ingest", "url": f"{allowed.origin}/hop?to={allowed.origin}/png", "options": {"max_redirects": 0}},
            {"kind": "put", "b64": base64.b64encode(b"not an image at all").decode()},
            {"kind": "fetch", "url": "http://169.254.169.254/latest/meta-data?token=x"},
        ]
        response = _rpc_granted(api, session.id, {"kind": "runtime", "pluginId": "hostkit-web", "runtimeId": "hostkit-web",
                                                  "payload": {"steps": steps}})
        assert response.status_code == 200, response.content
        [item] = response.json()["runtimeResults"]
        results = item["output"]["results"]
        # allowed origin: fetched; an undeclared origin: refused before any connection
        assert results[0] == {"status": 200, "text": "hello from the fake", "attempts": 1, "location": None}
        assert results[1]["error"] == "http-permission-denied" and "http permission denied" in results[1]["message"]
        assert "/ok" not in other.hits
        # 503 then 200: retried
        assert results[2]["status"] == 200 and results[2]["text"] == "recovered" and results[2]["attempts"] == 2
        # a redirect is never followed by default; manual hands the 3xx back and nothing reached the other origin
        assert results[3]["error"] == "redirect-refused"
        assert results[4]["status"] == 302 and results[4]["location"] == f"{other.origin}/png"
        # media.put and ingestUrl (one same-origin hop) store the PNG once in the session's library
        put_ref, ingest_ref = results[5]["ref"], results[6]["ref"]
        assert put_ref["mime"] == "image/png" and put_ref == ingest_ref
        assert MediaAsset.objects.filter(session_id=session.id, pk=put_ref["id"]).count() == 1
        # a redirect to an undeclared origin is refused at that hop; maxRedirects is enforced
        assert results[7]["error"] == "http-permission-denied"
        assert results[8]["error"] == "too_many_redirects"
        assert "/png" not in other.hits
        assert results[9]["error"] == "invalid_image"
        # declared or not, the SSRF guard of covel.outbound refuses link-local (cloud metadata) targets
        assert results[10]["error"] == "target_not_allowed"
    # utils.fetch.* stay in the trace (not forwarded)
    calls = _trace(session, "utils.fetch.calling")
    assert len(calls) >= 8 and all("?" not in c["url"] for c in calls)
    assert {p["error"]["code"] for p in _trace(session, "utils.fetch.failed")} >= {"http-permission-denied", "redirect-refused"}


def test_asset_generations_become_asset_generate_proposals(api, settings):
    with FakeSite() as allowed:
        hostkit_web_install(Path(settings.COVEL_HOME), allowed.origin)
        registry_reset()
        session = session_make(plugins=("teller", "hostkit-web"))
        response = _rpc_granted(api, session.id, {"kind": "runtime", "pluginId": "hostkit-web", "runtimeId": "hostkit-web",
                                                  "payload": {"effects": True, "steps": [{"kind": "ingest", "url": allowed.origin + "/png"}]}})
    asset = MediaAsset.objects.get(session_id=session.id)
    body = response.json()
    # the proposal committed: asset.generated carries the MediaRef (the session event log)
    assert response.status_code == 200, body
    [item] = body["runtimeResults"]
    [generated] = SessionEvent.objects.filter(session_id=session.id, type="asset.generated")
    assert generated.payload["ref"]["id"] == str(asset.pk) and generated.payload["runtimeId"] == "hostkit-web"
    assert generated.payload["modality"] == "image" and generated.payload["prompt"] == "a red square"
    [generation] = item["output"]["effects"]["assetGenerations"]
    assert generation["ref"]["id"] == str(asset.pk) and generation["ref"]["sha256"] == asset.sha256
    assert generation["modality"] == "image" and generation["meta"] == {"prompt": "a red square"}
