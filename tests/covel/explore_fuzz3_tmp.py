"""TEMP exploration round 3 (not collected). Deleted before report."""
import json
import pytest
from tests.plugins_app.test_install import TINY_WORLD, post_zip, zip_files, home  # noqa
from tests.covel.explore_fuzz_tmp import check
pytestmark = pytest.mark.django_db

CASES = {
    "nul-summary": {"world.yaml": TINY_WORLD["world.yaml"].replace("A rock in the sea.", '"a\\0b"')},
    "nul-md": {"WORLD.md": "# T\n\na\x00b\n"},
    "nul-char": {"characters/characters.json": json.dumps([{"id": "gull", "name": "G\u0000", "type": "npc"}])},
    "sur-char": {"characters/characters.json": '[{"id": "gull", "name": "G\\ud800", "type": "npc"}]'},
    "nan-char": {"characters/characters.json": '[{"id": "gull", "name": "G", "type": "npc", "fields": {"x": NaN}}]'},
    "deep-char": {"characters/characters.json": '[{"id": "gull", "name": "G", "type": "npc", "fields": {"x": ' + "[" * 3000 + "]" * 3000 + "}}]"},
    "nul-lore": {"data/lorebook.yaml": '- id: rock\n  keys: [rock]\n  content: "It\\0 is"\n'},
    "sur-lore": {"data/lorebook.yaml": '- id: rock\n  keys: [rock]\n  content: "It\\ud800 is"\n'},
    "deep-yaml": {"data/lorebook.yaml": "- id: rock\n  keys: [rock]\n  content: x\n  extra: " + "[" * 3000 + "]" * 3000 + "\n"},
    "bad-utf8-md": {"WORLD.md": b"\xff\xfe".decode("latin-1")},
    "inf-yaml": {"data/lorebook.yaml": "- id: rock\n  keys: [rock]\n  content: x\n  order: .inf\n"},
    "nan-yaml": {"data/lorebook.yaml": "- id: rock\n  keys: [rock]\n  content: x\n  order: .nan\n"},
    "date-yaml": {"data/lorebook.yaml": "- id: rock\n  keys: [2020-01-01]\n  content: 2020-01-01\n"},
    "binary-yaml": {"data/lorebook.yaml": "- id: rock\n  keys: [rock]\n  content: !!binary aGVsbG8=\n"},
    "set-yaml": {"data/lorebook.yaml": "- id: rock\n  keys: !!set {a, b}\n  content: x\n"},
    "bigint": {"characters/characters.json": '[{"id": "gull", "name": "G", "type": "npc", "fields": {"x": 1' + "0" * 30 + '}}]'},
}

def test_worlds(client, home, settings):
    bad = []
    for name, over in CASES.items():
        files = {**TINY_WORLD, **over}
        files["world.yaml"] = files["world.yaml"].replace("tiny-isle", name)
        r = post_zip(client, "/api/install/world", zip_files(files))
        check(r, f"install {name}", bad)
        print("install", name, r.status_code, r.content[:160])
        if r.status_code == 201:
            r2 = client.post("/api/sessions", {"worldId": name, "locale": "en-US"}, content_type="application/json")
            check(r2, f"session {name}", bad); print("  session", r2.status_code, r2.content[:160])
            r3 = client.get(f"/api/worlds/{name}"); check(r3, f"get {name}", bad)
            if r2.status_code == 201:
                sid = r2.json()["id"]
                for u in [f"/api/sessions/{sid}", f"/api/sessions/{sid}/lorebook", f"/api/sessions/{sid}/characters"]:
                    r4 = client.get(u); check(r4, f"{name} {u}", bad)
                r5 = client.post(f"/api/sessions/{sid}/snapshots", {}, content_type="application/json"); check(r5, f"{name} snap", bad)
                if r5.status_code == 201:
                    r6 = client.post(f"/api/sessions/{sid}/fork", {"fromSnapshotId": (r5.json().get("snapshotId") or r5.json().get("id"))}, content_type="application/json"); check(r6, f"{name} fork", bad)
        rv = post_zip(client, "/api/install/validate/world", zip_files(files)); check(rv, f"validate {name}", bad)
    print("\n===== worlds BAD", len(bad))
    for b in bad: print(b)
