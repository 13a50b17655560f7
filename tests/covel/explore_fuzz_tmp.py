"""TEMP exploration (not collected: name does not match test_*.py). Deleted before report."""
import io, json, struct, zipfile, zlib, base64, itertools
import pytest
from tests.sessions.support import catalog, session, OPERATOR_TOKEN  # noqa
pytestmark = pytest.mark.django_db(transaction=False)

BODIES = [b"", b"null", b"[]", b'"s"', b"1", b"{}", b'{"a":', b'{"x": "\\u0000"}',
          b'{"label": 5}', b'{"label": ["x"]}', b'{"label": "' + b"x"*200000 + b'"}',
          b'{"fromSnapshotId": 5}', b'{"fromSnapshotId": {"a":1}}', b'{"fromSnapshotId": "nope"}',
          b'{"fromSnapshotId": "' + b"\\u00e9" * 300 + b'"}',
          b'{"message": 5}', b'{"message": ""}', b'{"message": "' + b"x"*100000 + b'"}',
          b'{"topic": "t", "sessionId": 5}', b'{"topic": ["t"], "sessionId": "x"}', b'{"topic":"t","sessionId":"nope"}',
          b'{"topic":"' + b"t"*100000 + b'","sessionId":"SID"}', b'{"topic":"t","sessionId":"SID","payload":[1]}',
          b'{"topic":"t","sessionId":"SID","payload":{"a":1e400}}', b'{"topic":"t","sessionId":"SID","payload":{"a":NaN}}',
          b'{"topic":"t","sessionId":"SID","payload":' + b'{"a":' * 100 + b'1' + b'}' * 100 + b'}',
          b'{"ids": 5}', b'{"ids": [5]}', b'{"ids": ["../x"]}', b'{"unused": "yes"}', b'{"scanLimit": -1}', b'{"scanLimit": 1e308}',
          b'{"dryRun": "no"}', b'{"dryRun": false}', b'{"maxDeleteCount": -5}', b'{"maxDeleteCount": 1e999}', b'{"olderThanDays": "x"}',
          b'{"slot": 5}', b'{"target": 5}', b'{"target": {"model": 5}}', b'{"baseUrl": "file:///etc/passwd"}', b'{"baseUrl": 5}',
          b'{"baseUrl": "http://[::1"}', b'{"protocol": "zzz", "baseUrl": "http://x"}', b'{"apiKey": 7}',
          b'{"prompt": 5}', b'{"prompt": ""}', b'{"prompt": "a"}', b'{"prompt": "a", "idleTimeoutMs": -1}', b'{"prompt": "a", "idleTimeoutMs": 1e300}',
          b'{"prompt": "a", "contracts": "x"}', b'{"prompt": "a", "packs": [5]}', b'{"prompt": "a", "locale": 5}',
          b'{"content": 5}', b'{"content": "[x"}', b'{"content": "' + b"a = 1\\n" * 10 + b'", "etag": 5}', b'{"content": "a=1", "expectedEtag": []}',
          b'{"source": 5}', b'{"source": {"path": 5}}', b'{"source": {"path": "/etc"}}', b'{"source": {"path": "../../"}}', b'{"source": {"type": "zzz"}}',
          b'{"source": {"path": "\\u0000"}}', b'{"source": "x"}',
          b'{"settings": 5}', b'{"settings": {"zzz": 1}}', b'{"RATE_LIMIT_RPM": "x"}', b'{"RATE_LIMIT_RPM": -1}', b'{"RATE_LIMIT_RPM": 1e400}',
          b'{"RATE_LIMIT_RPM": true}', b'{"RATE_LIMIT_RPM": 99999999999999999999999999}', b'{"DEFAULT_LOCALE": 5}', b'{"DEFAULT_LOCALE": "' + b"x" * 10000 + b'"}',
          b'{"LOG_LEVEL": ["x"]}', b'{"COVEL_MEDIA_CLEANUP_ENABLED": "maybe"}',
          ]
CTS = ["application/json", "text/plain"]

def _png():
    def chunk(t, d): return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
    ihdr = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\x00\x00\x00\x00")) + chunk(b"IEND", b"")

def check(resp, label, bad):
    sc = resp.status_code
    if sc >= 500 and sc not in (501, 503):
        bad.append((label, sc, resp.content[:300])); return
    if sc >= 400:
        try:
            j = resp.json()
        except Exception:
            bad.append((label, sc, b"NONJSON " + resp.content[:200])); return
        if not isinstance(j, dict) or not isinstance(j.get("error"), str) or set(j) - {"error", "code", "details"}:
            bad.append((label, sc, json.dumps(j)[:300]))
        elif "code" in j and (not isinstance(j["code"], str) or j["code"] != j["code"].lower() or "-" in j["code"]):
            bad.append((label + " [code-not-snake]", sc, json.dumps(j)[:200]))
    if sc >= 500:
        bad.append((label, sc, resp.content[:300]))

def send(client, method, url, body, ct, bad, **extra):
    label = f"{method} {url[:90]} ct={ct} body={body[:70]!r}"
    try:
        resp = getattr(client, method.lower())(url, data=body, content_type=ct, **extra)
    except Exception as exc:
        bad.append((label, "EXC", repr(exc)[:300])); return None
    check(resp, label, bad)
    return resp

def _report(bad):
    print("\n===== SECTION BAD", len(bad))
    for b in bad: print(b)


def test_fuzz(client, session, settings):
    settings.COVEL_OPERATOR_TOKEN = OPERATOR_TOKEN
    settings.COVEL_MEDIA_CLEANUP_ENABLED = True
    sid = session["id"]
    auth = {"HTTP_AUTHORIZATION": f"Bearer {OPERATOR_TOKEN}", "HTTP_X_SESSION_TOKEN": session.get("ownerToken", "")}
    bad = []
    r = client.post(f"/api/sessions/{sid}/snapshots", {}, content_type="application/json", **auth)
    snap = r.json().get("snapshotId") or r.json().get("id")
    print("snap", r.status_code, r.json())
    urls = [("POST", f"/api/sessions/{sid}/snapshots"), ("POST", f"/api/sessions/{sid}/fork"),
            ("POST", f"/api/sessions/{sid}/snapshots/{snap}/restore"), ("POST", f"/api/sessions/{sid}/snapshots/nope/restore"),
            ("POST", "/api/media/library/delete"), ("POST", "/api/media/cleanup"),
            ("PUT", "/api/config/server-settings"), ("PUT", "/api/config/raw/llm.toml"), ("PUT", "/api/config/raw/zzz"),
            ("POST", "/api/llm-config/reload"),
            ("POST", "/api/ai/ping"), ("POST", "/api/ai/models"),
            ("POST", "/api/install/world"), ("POST", "/api/install/plugin"), ("POST", "/api/install/validate/world"),
            ("POST", "/api/install/st-import"),
            ("POST", "/api/events/emit"), ("POST", f"/api/sessions/{sid}/abort"), ("POST", f"/api/sessions/{sid}/steer"),
            ("POST", f"/api/sessions/{sid}/runtime-jobs/nope/cancel"), ("POST", f"/api/sessions/{sid}/runtime-jobs/nope/retry"),
            ]
    for (m, u), b, ct in itertools.product(urls, BODIES, CTS):
        b = b.replace(b"SID", sid.encode())
        if m == "POST" and u.endswith("/fork"):
            from sessions import snapshots
            snapshots.fork_rate_limiter.__init__() if hasattr(snapshots.fork_rate_limiter, "__init__") else None
        send(client, m, u, b, ct, bad, **auth)
    _report(bad); bad=[]
    # generate-world separately (SSE), only a few
    for b in [b"{}", b'{"prompt": 5}', b'{"prompt":"a","idleTimeoutMs":"x"}', b'{"prompt":"a","contracts":[5]}', b'{"prompt":"a","packs":"x"}']:
        send(client, "POST", "/api/ai/generate-world", b, "application/json", bad, **auth)
    _report(bad); bad=[]
    # GET params
    gets = [f"/api/sessions/{sid}/snapshots?limit=x", f"/api/sessions/{sid}/snapshots?limit=99999999999999999999",
            f"/api/sessions/{sid}/snapshots?cursor=%00", f"/api/sessions/{sid}/snapshots?cursor=abc", f"/api/sessions/{sid}/snapshots?cursor=" + "A" * 5000,
            f"/api/sessions/{sid}/snapshots?limit=%C2%B2", f"/api/sessions/{sid}/snapshots/%00", f"/api/sessions/{sid}/snapshots/" + "x" * 5000,
            f"/api/sessions/{sid}/snapshots/%F0%9F%98%80",
            "/api/media/library?limit=x", "/api/media/library?limit=%C2%B2", "/api/media/library?offset=99999999999999999999999",
            "/api/media/library?scanLimit=99999999999999999999999", "/api/media/library?kind=%00", "/api/media/library?limit=١",
            "/api/media/" + "a" * 64 + "?token=%00", "/api/media/" + "a" * 64 + "?token=" + "x" * 5000, "/api/media/%00",
            "/api/media/" + "a" * 64 + "?token=a.b.c", f"/api/sessions/{sid}/media-token?id=%00", f"/api/sessions/{sid}/media-token?id=" + "A" * 64,
            "/api/config/raw/%00", "/api/config/raw/..%2Fsecrets", "/api/config/raw/" + "x" * 3000, "/api/llm-config", "/api/config/info",
            f"/api/sessions/{sid}/runtime-jobs", f"/api/sessions/{sid}/runtime-jobs/%00/cancel",
            "/api/events/stream", "/api/events/stream?sessionId=%00", "/api/events/stream?sessionId=nope",
            f"/api/events/stream?sessionId={sid}&topics=%00", f"/api/events/stream?sessionId={sid}&topics=,,,",
            f"/api/events/stream?sessionId={sid}&lastEventId=%00", f"/api/events/stream?sessionId={sid}&lastEventId=1:99999999999999999999999999",
            f"/api/events/stream?sessionId={sid}&lastEventId=-1:-1", f"/api/events/stream?sessionId={sid}&lastEventId=a:b",
            f"/api/events/stream?sessionId={sid}&lastEventId=1e5:1", f"/api/events/stream?sessionId={sid}&lastEventId=１:１",
            f"/api/events/stream?sessionId={sid}&lastEventId=99999999999999999999999:1",
            "/api/ai/protocols", "/api/presets", "/api/provider-keys"]
    ev=[g for g in gets if "events/stream" in g]; gets=[g for g in gets if "events/stream" not in g]
    for g in gets:
        label = "GET " + g[:120]
        try:
            resp = client.get(g, **auth)
            check(resp, label, bad)
            if resp.status_code == 200 and "events/stream" in g:
                resp.close() if hasattr(resp, "close") else None
        except Exception as exc:
            bad.append((label, "EXC", repr(exc)[:300]))
    _report(bad); bad=[]
    # headers
    for hdr in [{"HTTP_LAST_EVENT_ID": "\x00"}, {"HTTP_X_PROVIDER_KEYS": "{bad"}, {"HTTP_X_PROVIDER_KEYS": '{"openai": 5}'},
                {"HTTP_X_PROVIDER_KEYS": "\x00"}]:
        send(client, "POST", "/api/ai/ping", b'{}', "application/json", bad, **{**auth, **hdr})
        send(client, "POST", "/api/ai/models", b'{"baseUrl": "http://127.0.0.1:1"}', "application/json", bad, **{**auth, **hdr})
    _report(bad); bad=[]
    # media upload
    png = _png()
    for q, data, ct in [(f"?sessionId={sid}", b"", "image/png"), (f"?sessionId={sid}", b"junk", "image/png"), (f"?sessionId={sid}", png, "image/svg+xml"),
                        (f"?sessionId={sid}", png, ""), (f"?sessionId={sid}", png, "image/png; charset=\x00"), (f"?sessionId=%00", png, "image/png"),
                        (f"?sessionId=nope", png, "image/png"), ("", png, "image/png"), (f"?sessionId={sid}", png[:30], "image/png"),
                        (f"?sessionId={sid}", png, "image/gif"), (f"?sessionId={sid}", png, "IMAGE/PNG"), (f"?sessionId={sid}", png, "application/json"),
                        (f"?sessionId={sid}", b"GIF89a" + b"\x00" * 10, "image/gif"), (f"?sessionId={sid}", b"RIFF\x00\x00\x00\x00WEBP", "image/webp"),
                        (f"?sessionId={sid}", b"\xff\xd8\xff" + b"\x00" * 10, "image/jpeg"), (f"?sessionId={sid}", png, "multipart/form-data; boundary=x")]:
        send(client, "POST", "/api/media" + q, data, ct, bad, **auth)
    _report(bad); bad=[]
    # ST import / install uploads
    def zipb(entries):
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as z:
            for n, d in entries: z.writestr(n, d)
        return buf.getvalue()
    def png_text(keyword, text):
        def chunk(t, d): return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
        p = png
        return p[:-12] + chunk(b"tEXt", keyword + b"\x00" + text) + p[-12:]
    cards = {
        "a.json": b"{}", "b.json": b"[]", "c.json": b"null", "d.json": b'{"spec":"chara_card_v2","data":5}', "e.json": b"\xff\xfe",
        "f.json": b'{"name": 5}', "g.json": b'{"spec":"chara_card_v2","data":{"name":"' + b"x" * 300000 + b'"}}',
        "h.json": b'{"name":"\\u0000"}', "i.json": b'{"entries": 5}', "j.json": b'{"entries": {"1": 5}}', "k.json": b'{"entries": {"1": {"key": 5, "content": 5}}}',
        "l.json": b'{"entries": [{"keys": [5], "content": ["x"]}]}', "m.json": b'{"spec":"chara_card_v2","data":{"name":"x","character_book":5}}',
        "n.json": b'{"spec":"chara_card_v2","data":{"name":"x","character_book":{"entries":[5]}}}', "o.json": b'{"spec":"chara_card_v2","data":{"name":"x","alternate_greetings":"s"}}',
        "p.json": b'{"spec":"chara_card_v2","data":{"name":"x","tags":[{"a":1}]}}', "q.json": b'{"spec":"chara_card_v3","data":{"name":"x","extensions":5}}',
        "r.json": b'{"name":"x","first_mes":["a"]}', "s.json": b'{"entries":{"1":{"key":["a"],"content":"c","position":"x","order":"y","depth":1e400}}}',
        "t.json": b'{"entries":{"1":{"key":["a"],"content":"c","extensions":{"position":[1]}}}}', "u.json": b'{"spec":"chara_card_v2","data":{"name":"x","description":"\\ud800"}}',
        "v.json": b'[' * 10000 + b']' * 10000, "w.json": b'{"spec":"chara_card_v2","data":{"name":"' + "é😀".encode() * 200 + b'"}}',
        "x.png": b"\x89PNG\r\n\x1a\njunk", "y.png": png, "z.png": png_text(b"chara", b"!!notbase64"), "z2.png": png_text(b"chara", base64.b64encode(b"{bad")),
        "z3.png": png_text(b"chara", base64.b64encode(b"[1]")), "z4.png": png_text(b"ccv3", base64.b64encode(b'{"spec":"chara_card_v3","data":5}')),
        "z5.png": png_text(b"chara", base64.b64encode(b'\xff\xfe')), "z6.png": png_text(b"chara", b"\xff\xff"),
        "z7.webp": b"RIFF", "../../evil.json": b'{"name":"x"}', "\x00.json": b'{"name":"x"}', "": b'{"name":"x"}', "noext": b"{}",
        "z8.charx": zipb([("card.json", b"{bad")]), "z9.charx": b"PK\x03\x04junk",
    }
    from django.core.files.uploadedfile import SimpleUploadedFile
    for name, data in cards.items():
        for preview in ("1", "0"):
            label = f"st-import {name!r} preview={preview}"
            try:
                f = SimpleUploadedFile(name or "x", data)
                if not name: f.name = ""
                resp = client.post("/api/install/st-import", {"file": f, "preview": preview}, **auth)
                check(resp, label, bad)
                if resp.status_code < 300: print("OK", label, resp.status_code, str(resp.json())[:150])
            except Exception as exc:
                bad.append((label, "EXC", repr(exc)[:300]))
    for opts in [{"locale": "\x00"}, {"locale": "x" * 1000}, {"name": "x" * 100000}, {"name": "\x00"}, {"name": "../.."}, {"name": "😀"}, {"name": "..."}, {"name": "CON"}]:
        label = f"st-import opts {str(opts)[:60]}"
        try:
            resp = client.post("/api/install/st-import", {"file": SimpleUploadedFile("w.json", b'{"spec":"chara_card_v2","data":{"name":"Bob","first_mes":"hi"}}'), **opts}, **auth)
            check(resp, label, bad)
        except Exception as exc:
            bad.append((label, "EXC", repr(exc)[:300]))
    zips = {"empty": b"", "junk": b"PK\x03\x04junk", "notzip": b"hello", "trav": zipb([("../../evil/world.yaml", "id: x")]),
            "abs": zipb([("/etc/world.yaml", "id: x")]), "nul": zipb([("a\x00/world.yaml", "id: x")]),
            "badyaml": zipb([("world.yaml", ": : :\n\t- [")]), "yamlnul": zipb([("world.yaml", "id: \"\\0\"")]),
            "yamllist": zipb([("world.yaml", "- 1")]), "yamlbig": zipb([("world.yaml", "id: " + "x" * 100000)]),
            "plugbad": zipb([("plugin.yaml", "id: [1]")]), "plugjson": zipb([("plugin.json", "{bad")]), "manifest": zipb([("manifest.yaml", "id: ../../x")]),
            "pm": zipb([("plugin.yaml", "id: ../../x\nname: x")]), "wm": zipb([("world.yaml", "id: ../../x\nname: x")]),
            "pmd": zipb([("PLUGIN.md", "---\nid: ../../x\n---\n")]), "pmd2": zipb([("PLUGIN.md", "---\n[bad\n---\n")]), "unicode": zipb([("wörld/world.yaml", "id: wörld")]),
            "bomb": zipb([("world.yaml", "a: &a [1,1,1,1,1,1,1,1,1]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: [*d,*d,*d,*d,*d,*d,*d,*d,*d]\nid: x")]),
            "pyyamltag": zipb([("world.yaml", "id: !!python/object/apply:os.system ['echo hi']")]), "dateid": zipb([("world.yaml", "id: 2020-01-01\nname: x")]),
            "intid": zipb([("world.yaml", "id: 5\nname: x")]), "dup": zipb([("world.yaml", "id: a"), ("world.yaml", "id: b")])}
    for name, data in zips.items():
        for ep in ("/api/install/world", "/api/install/plugin", "/api/install/validate/world", "/api/install/validate/plugin"):
            label = f"{ep} zip={name}"
            try:
                resp = client.post(ep, {"file": SimpleUploadedFile(name + ".zip", data)}, **auth)
                check(resp, label, bad)
                if resp.status_code < 300: print("OK", label, resp.status_code, str(resp.json())[:150])
            except Exception as exc:
                bad.append((label, "EXC", repr(exc)[:300]))
    _report(bad); bad=[]
    for g in ev:
        label = "GET " + g[:120]
        try:
            resp = client.get(g, **auth)
            check(resp, label, bad)
        except Exception as exc:
            bad.append((label, "EXC", repr(exc)[:300]))
    _report(bad)
