"""TEMP exploration round 2 (not collected). Deleted before report."""
import base64, io, json, os, zipfile
from pathlib import Path
import pytest
from django.conf import settings as dj
from django.core.files.uploadedfile import SimpleUploadedFile
from tests.sessions.support import catalog, session, session_create, OPERATOR_TOKEN  # noqa
from tests.covel.explore_fuzz_tmp import check, send
pytestmark = pytest.mark.django_db

def b64(o): return base64.b64encode(o if isinstance(o, bytes) else json.dumps(o).encode()).decode()

def _report(bad, name):
    print(f"\n===== {name} BAD", len(bad))
    for b in bad: print(b)

def test_headers(client, session, settings):
    settings.COVEL_OPERATOR_TOKEN = OPERATOR_TOKEN
    sid = session["id"]; bad = []
    auth = {"HTTP_AUTHORIZATION": f"Bearer {OPERATOR_TOKEN}"}
    deep = "[" * 5000 + "]" * 5000
    vals = {"X_PROVIDER_KEYS": [deep, b64(deep.encode()), '{"openai": "\\ud800"}', '{"openai": "a\\u0000b"}', '{"openai": "k\\nX-Evil: 1"}',
                                '{"openai": "' + "é" * 10 + '"}', '{"\\ud800": "x"}', 'NaN', '{"openai": "x", "openai": 5}', b64(b"\xff\xfe"), "{" + "x" * 10000],
            "X_SLOT_CONFIG": [deep, '{"customPresets": {"p": {"provider": "openai", "model": "m", "baseUrl": "ht!tp://[::1"}}, "slotBindings": {"story": {"presetId": "p"}}}',
                              '{"customPresets": {"p": {"provider": "openai", "model": "m", "baseUrl": "http://127.0.0.1:1"}}, "slotBindings": {"story": {"presetId": "nope"}}}',
                              '{"customPresets": {"p": {"provider": "openai", "model": 5}}}', '{"customPresets": {"p": {"provider": ["x"], "model": "m"}}}',
                              '{"customPresets": {"p": {"provider": "openai", "model": "m", "protocol": ["x"]}}}',
                              '{"slotBindings": {"story": {"modelRef": "\\u0000"}}}', '{"slotBindings": {"story": {"modelRef": "x/y/z"}}}',
                              '{"customPresets": [], "slotBindings": 5}', '{"customPresets": {"p": {"provider": "openai", "model": "m", "baseUrl": "file:///etc/passwd"}}, "slotBindings": {"story": {"presetId": "p"}}}']}
    bodies = [b"{}", b'{"slot": "story"}', b'{"presetId": "p"}', b'{"modelRef": "openai/gpt"}', b'{"modelRef": "x"}', b'{"slot": "nope"}']
    for h, vs in vals.items():
        for v in vs:
            for b in bodies:
                send(client, "POST", "/api/ai/ping", b, "application/json", bad, **auth, **{"HTTP_" + h: v})
            send(client, "POST", "/api/ai/models", b'{"provider": "openai", "baseUrl": "http://127.0.0.1:1"}', "application/json", bad, **auth, **{"HTTP_" + h: v})
            send(client, "POST", "/api/ai/generate-world", b'{"concept": "x"}', "application/json", bad, **auth, **{"HTTP_" + h: v})
            send(client, "POST", "/api/actions", json.dumps({"requestId": "r-" + str(len(bad)) + h + str(hash(v)), "type": "narrative", "sessionId": sid, "payload": {"text": "hi"}}).encode(), "application/json", bad, **auth, **{"HTTP_" + h: v})
    for b in [b'{"provider": 5}', b'{"provider": "zzz", "baseUrl": "http://x"}', b'{"provider": "openai", "baseUrl": "http://[::1"}', b'{"provider": "openai", "baseUrl": "http://x:99999"}',
              b'{"provider": "openai", "baseUrl": "\\u00e9://x"}', b'{"provider": "openai", "baseUrl": "http://127.0.0.1:1", "protocol": 5}', b'{"provider": "openai", "baseUrl": "' + b"h" * 100000 + b'"}',
              b'{"provider": "openai", "baseUrl": "http://x\\ny"}', b'{"provider": "openai", "baseUrl": "http://user:pa ss@127.0.0.1:1"}', b'{"provider": "openai", "baseUrl": ["x"]}']:
        send(client, "POST", "/api/ai/models", b, "application/json", bad, **auth)
    for b in [b'{"concept": "x", "idleTimeoutMs": true}', b'{"concept": "x", "idleTimeoutMs": 1000.5}', b'{"concept": "x", "brief": {"pack": 5}}', b'{"concept": "x", "brief": {"content": "s"}}',
              b'{"concept": "x", "brief": {"content": [5]}}', b'{"concept": "x", "brief": {"contracts": [["x"]]}}', b'{"concept": "x", "brief": {"contracts": [{"a": 1}]}}', b'{"concept": "x", "locale": "\\u00e9"}',
              b'{"concept": "x", "model": ["x"]}', b'{"concept": "x", "saveTarget": ["x"]}', b'{"concept": "x", "brief": {"pack": ["x"]}}', b'{"concept": "x", "brief": {"additionalInstructions": 5}}',
              b'{"concept": "x", "locale": "zh-CN-' + b"x" * 5000 + b'"}', b'{"concept": 1e400}']:
        send(client, "POST", "/api/ai/generate-world", b, "application/json", bad, **auth)
    _report(bad, "headers/ai")

def test_config(client, db, settings):
    bad = []
    for body in [{"entries": {"diagnostics.traceRetention": 30}}, {"entries": {"diagnostics.traceRetention": ["7"]}}, {"entries": {"trust.sources": "x"}},
                 {"entries": {"trust.sources": [5]}}, {"entries": {"trust.sources": ["a" * 100000]}}, {"entries": {"trust.sources": ["github.com/" + "a/" * 1000]}},
                 {"entries": {"trust.sources": [["x"]]}}, {"entries": {"trust.sources": [{"a": 1}]}}, {"entries": {"trust.sources": ["é"]}},
                 {"entries": {"trust.sources": ["ok", "bad/x/y"]}, "x": 1}, {"entries": {"diagnostics.traceRetention": "7", "zzz": 1}}, {"entries": []}, {"entries": {"": None}}]:
        send(client, "PUT", "/api/config/server-settings", json.dumps(body).encode(), "application/json", bad)
    from covel.config_services import content_digest
    for name in ["llm.toml", "LLM.TOML", "llm.toml.bak", "..", ".", "llm.toml%2F..", "llm.toml/", "%F0%9F%98%80", "con"]:
        r = client.get(f"/api/config/raw/{name}"); check(r, f"GET raw {name}", bad)
    g = client.get("/api/config/raw/llm.toml").json(); print("GET raw", str(g)[:300])
    digest = g.get("digest") or g.get("baseDigest") or ""
    contents = ["a = " + "[" * 3000 + "]" * 3000, "[covel.story]\nprovider = 5\nmodel = 'x'", "[covel.story]\nprovider = 'openai'\nmodel = 1979-05-27T07:32:00Z",
                "[covel]\nstory = 5", "covel = 5", "[covel.story]\nprovider = 'openai'\nmodel = 'm'\nbaseUrl = 'http://[::1'", "[covel.story]\nprovider='scripted'\nmodel='m'\nfallback='story'",
                "[covel.a]\nprovider='scripted'\nmodel='m'\nfallback='b'\n[covel.b]\nprovider='scripted'\nmodel='m'\nfallback='a'",
                "[covel.story]\nprovider = 'openai'\nmodel = 'm'\nprotocol = 5", "[covel.\"\"]\nprovider='scripted'\nmodel='m'", "x = inf\ny = nan",
                "[covel.story]\nprovider='openai'\nmodel='m'\ntag=['x']", "\ufeff[covel]", "a = '''" + "x" * 1000, "[[covel]]\na=1", "[covel.story]\nprovider='openai'\nmodel='m'\nextra={a=1}"]
    for c in contents:
        r = send(client, "PUT", "/api/config/raw/llm.toml", json.dumps({"content": c, "baseDigest": digest}).encode(), "application/json", bad)
        if r is not None and r.status_code == 200:
            digest = r.json().get("digest", digest)
            rr = client.get("/api/llm-config"); check(rr, f"GET llm-config after {c[:40]!r}", bad)
            rr = client.post("/api/llm-config/reload"); check(rr, f"reload after {c[:40]!r}", bad)
            rr = client.get("/api/presets"); check(rr, f"presets after {c[:40]!r}", bad)
            rr = client.post("/api/ai/ping", {}, content_type="application/json"); check(rr, f"ping after {c[:40]!r}", bad)
            print("ACCEPTED", repr(c[:60]), str(rr.json())[:200])
    for b in [{"content": "x", "baseDigest": 5}, {"content": 5, "baseDigest": "x"}, {"content": "a=1", "baseDigest": "x" * 10000}]:
        send(client, "PUT", "/api/config/raw/llm.toml", json.dumps(b).encode(), "application/json", bad)
    _report(bad, "config")

def test_state(client, catalog, settings):
    settings.COVEL_OPERATOR_TOKEN = OPERATOR_TOKEN
    from sessions.models import Session, World
    a = session_create(client, worldId="tide-test", locale="en-US", plugins=["teller"])
    b = session_create(client, worldId="tide-test", locale="en-US", plugins=["teller"])
    bad = []
    auth = {"HTTP_AUTHORIZATION": f"Bearer {OPERATOR_TOKEN}"}
    sa = client.post(f"/api/sessions/{a['id']}/snapshots", {}, content_type="application/json", **auth).json()
    snap = sa.get("snapshotId") or sa.get("id")
    n = Session.objects.count()
    for sid, snapid in [(b["id"], snap), (a["id"], snap.upper()), (a["id"], snap + " "), (a["id"], "%00")]:
        r = send(client, "GET", f"/api/sessions/{sid}/snapshots/{snapid}", b"", "application/json", bad, **auth); print("get", sid == a["id"], snapid, r.status_code)
        r = send(client, "POST", f"/api/sessions/{sid}/snapshots/{snapid}/restore", b"", "application/json", bad, **auth); print("restore", snapid, r.status_code, r.content[:150])
        r = send(client, "POST", f"/api/sessions/{sid}/fork", json.dumps({"fromSnapshotId": snapid}).encode(), "application/json", bad, **auth); print("fork", snapid, r.status_code, r.content[:150])
        r = send(client, "DELETE", f"/api/sessions/{sid}/snapshots/{snapid}", b"", "application/json", bad, **auth); print("delete", snapid, r.status_code, r.content[:150])
    assert Session.objects.count() == n, "fork half-written"
    # delete then restore/fork
    client.delete(f"/api/sessions/{a['id']}", **auth)
    for u in [f"/api/sessions/{a['id']}/snapshots/{snap}/restore", f"/api/sessions/{a['id']}/fork"]:
        r = send(client, "POST", u, json.dumps({"fromSnapshotId": snap}).encode(), "application/json", bad, **auth); print("after-delete", u[-10:], r.status_code, r.content[:150])
    # st-import half-written
    worlds_dir = Path(dj.COVEL_HOME) / "worlds"
    before = sorted(os.listdir(worlds_dir)) if worlds_dir.exists() else []
    nw = World.objects.count()
    for data in [b'{"spec":"chara_card_v2","data":{"name":"Bob","description":"\\ud800"}}', b'{"spec":"chara_card_v2","data":{"name":"Bob","description":"a\\u0000b"}}',
                 b'{"spec":"chara_card_v2","data":{"name":"\\u0000"}}', b'{"spec":"chara_card_v2","data":{"name":"Bob","first_mes":"' + b"x" * 2_000_000 + b'"}}',
                 b'{"entries":{"1":{"key":["\\u0000"],"content":"c"}}}', b'{"entries":{"1":{"key":["a"],"content":"c\\ud800"}}}', b'{"spec":"chara_card_v2","data":{"name":"Bob","tags":["\\u0000"]}}',
                 b'{"spec":"chara_card_v2","data":{"name":"Bob","extensions":{"x":1e400}}}', b'{"spec":"chara_card_v2","data":{"name":"Bob","extensions":{"x":NaN}}}']:
        r = client.post("/api/install/st-import", {"file": SimpleUploadedFile("c.json", data)}, **auth)
        check(r, f"st-import {data[:80]!r}", bad); print("st", r.status_code, r.content[:200])
    after = sorted(os.listdir(worlds_dir)) if worlds_dir.exists() else []
    print("worlds dir before", before, "after", after, "World rows", nw, World.objects.count())
    for w in after:
        r = client.get(f"/api/worlds/{w}"); check(r, f"GET world {w}", bad)
        r2 = client.post("/api/sessions", {"worldId": w, "locale": "en-US", "plugins": ["teller"]}, content_type="application/json", **auth); check(r2, f"session in {w}", bad)
    _report(bad, "state")
