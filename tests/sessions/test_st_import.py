"""SillyTavern import (spec 004 POST /api/install/st-import): every fixture card and World Info file
converts into a world that world_package_load accepts and sessions can be created in."""
from __future__ import annotations

import base64
import json
import struct
import zlib
from pathlib import Path

import pytest
import yaml
from django.core.files.uploadedfile import SimpleUploadedFile

from sessions import st_import
from plugins_app.errors import StImportError
from plugins_app.registry import registry_reset
from sessions.world_packages import world_package_load
from tests.shared_paths import FIXTURES_DIR

ST = FIXTURES_DIR / "sillytavern"
CARDS = ST / "cards"
WORLDINFO = ST / "worldinfo"

pytestmark = pytest.mark.django_db


@pytest.fixture
def home(tmp_path, settings):
    settings.COVEL_HOME = tmp_path / "home"
    registry_reset()
    yield settings.COVEL_HOME
    registry_reset()


def _chunk(ctype: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + ctype + body + struct.pack(">I", zlib.crc32(ctype + body) & 0xFFFFFFFF)


def png_card(card_json: bytes, *, keyword: bytes = b"chara", extra_chunks: list[bytes] | None = None) -> bytes:
    """A 1x1 grey PNG carrying `card_json` base64-encoded in a tEXt chunk (as SillyTavern writes it)."""
    ihdr = struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0)
    idat = zlib.compress(b"\x00\x80")
    text = _chunk(b"tEXt", keyword + b"\x00" + base64.b64encode(card_json))
    return (st_import.PNG_SIGNATURE + _chunk(b"IHDR", ihdr) + text + b"".join(extra_chunks or [])
            + _chunk(b"IDAT", idat) + _chunk(b"IEND", b""))


def upload(path: Path) -> SimpleUploadedFile:
    return SimpleUploadedFile(path.name, path.read_bytes(), content_type="application/octet-stream")


def st_post(client, files, **fields):
    data = {"file": files, **fields}
    return client.post("/api/install/st-import", data=data)


# Expected results per fixture: world name, characters, lore entries, a key of the first entry.
FIXTURES = [
    (CARDS / "default_Seraphina.chara.json", "Seraphina", 1, 4, "eldoria"),
    (CARDS / "oobabooga_Example.json", "Chiharu Yamada", 1, 0, None),
    (CARDS / "srl_render-parity-regression-character.json", "渲染一致性回归卡", 1, 0, None),
    (CARDS / "tavernkit_ccv3_st_export_like.json", "Diana", 1, 1, "kingdom"),
    (CARDS / "tavernkit_with_lorebook.v3.json", "Character with Lorebook", 1, 2, "test entry"),
    (WORLDINFO / "Eldoria.json", "Eldoria", 0, 4, "eldoria"),
    (WORLDINFO / "Toaru.json", "Toaru", 0, 18, "Tokiwadai Middle School"),
    (WORLDINFO / "tavernkit_world_one.json", "World One", 0, 1, "dragon"),
]


@pytest.mark.parametrize("path,name,characters,lore,first_key", FIXTURES, ids=[p.name for p, *_ in FIXTURES])
def test_every_fixture_imports_into_a_loadable_world(client, home, path, name, characters, lore, first_key):
    response = st_post(client, [upload(path)], locale="en-US")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["ok"] is True and body["preview"] is False and body["kind"] == "world" and body["restartRequired"] is False
    report = body["report"]
    assert report["world"]["name"] == name and report["world"]["locale"] == "en-US" and report["world"]["id"] == body["id"]
    assert report["counts"] == {"characters": characters, "loreEntries": lore, "hasCover": False}
    assert report["sources"][0]["file"] == path.name

    world = world_package_load(home / "worlds" / body["id"], source="user-file", expected_id=body["id"])
    assert [i.as_dict() for i in world.issues if i.severity == "error"] == []
    assert world.source == "generated-file" and world.name == name and world.supported_locales == ["en-US"]
    assert len(world.characters) == characters and len(world.lorebook) == lore
    if first_key:
        assert first_key in world.lorebook[0]["keys"]
    listed = {w["id"]: w for w in client.get("/api/worlds").json()["items"]}
    assert listed[body["id"]]["metadata"]["source"] == "generated-file"


def test_card_fields_are_mapped_and_scripts_stay_out(home):
    diana = st_import.st_convert([("d.json", (CARDS / "tavernkit_ccv3_st_export_like.json").read_bytes())], locale="en-US")
    char = diana.characters[0]
    assert char["id"] == "char-diana" and char["name"] == "Diana" and char["aliases"] == ["Princess D"]
    assert char["fields"]["personality"] == "Brave, honorable, and compassionate."
    assert char["fields"]["firstMessage"] == "Halt! State your purpose, stranger."
    assert char["fields"]["alternateGreetings"] == ["Who goes there?", "By the crown, another traveler approaches."]
    assert "Diana: Very well." in char["fields"]["exampleDialogue"]  # {{char}} → name, {{user}} kept
    assert "{{user}}: I mean no harm." in char["fields"]["exampleDialogue"]
    entry = diana.lorebook[0]
    assert entry["keys"] == ["kingdom", "realm"] and entry["title"] == "Kingdom background"
    assert entry["position"] == "before_char_defs" and entry["insertionOrder"] == 100 and entry["origin"] == {"file": "d.json", "uid": "1"}
    assert diana.tags[:3] == ["sillytavern", "fantasy", "warrior"] and diana.author == "TavernKit"
    not_imported = {i["field"] for i in diana.items if i["code"] == "card-field-not-imported"}
    assert {"system_prompt", "post_history_instructions", "creator_notes", "extensions.st_specific"} <= not_imported

    srl = st_import.st_convert([("s.json", (CARDS / "srl_render-parity-regression-character.json").read_bytes())], locale="zh-CN")
    files = srl.package_files("st-world")
    everything = b"".join(files.values()).decode("utf-8")
    assert "eventOn(" not in everything and "findRegex" not in everything  # extension scripts are not carried over
    assert srl.characters[0]["fields"]["firstMessage"].startswith("城堡的外墙塌了大半")  # greeting kept verbatim as data
    assert files["WORLD.md"].decode().startswith("# 渲染一致性回归卡") and "## 角色" in files["WORLD.md"].decode()

    v3 = st_import.st_convert([("l.json", (CARDS / "tavernkit_with_lorebook.v3.json").read_bytes())], locale="en-US")
    second = v3.lorebook[1]
    assert second["secondaryKeys"] == ["conditional key"] and second["selective"] is True
    assert second["priority"] == 5 and second["position"] == "after_char" and second["caseSensitive"] is False
    assert [e["title"] for e in v3.lorebook] == ["First test entry", "Second test entry"]

    pyg = st_import.st_convert([("e.json", (CARDS / "oobabooga_Example.json").read_bytes())], locale="en-US")
    assert pyg.sources[0]["format"] == "pygmalion" and pyg.characters[0]["fields"]["exampleDialogue"].startswith("You: So how")
    assert "scenario" not in pyg.characters[0]["fields"]  # world_scenario is empty


def test_world_info_field_variants(home):
    toaru = st_import.st_convert([("Toaru.json", (WORLDINFO / "Toaru.json").read_bytes())], locale="en-US")
    assert all(e["enabled"] for e in toaru.lorebook)  # TavernAI entries have no `disable`
    assert toaru.lorebook[0]["position"] == "before_char" and toaru.lorebook[0]["insertionOrder"] == 8
    one = st_import.st_convert([("w.json", (WORLDINFO / "tavernkit_world_one.json").read_bytes())], locale="en-US")
    assert one.lorebook[0]["origin"]["uid"] == "1" and one.summary == "Test lorebook one"
    hybrid = {"name": "Hybrid", "scan_depth": 4, "entries": {"0": {
        "uid": 0, "id": 0, "key": ["ship", ""], "keys": ["ship", "vessel"], "keysecondary": [], "secondary_keys": [],
        "content": "x" * 23000, "disable": False, "enabled": True, "constant": True, "order": 5, "insertion_order": 5,
        "position": 1, "priority": 3}, "1": {"uid": 1, "key": [], "content": "never fires"}, "2": {"uid": 2, "key": ["a"], "content": "  "}}}
    conv = st_import.st_convert([("hybrid.json", json.dumps(hybrid).encode())], locale="en-US")
    first, keyless = conv.lorebook
    assert first["keys"] == ["ship", "vessel"] and first["strategy"] == "constant" and len(first["content"]) == 20000
    assert first["position"] == "after_char" and first["priority"] == 3
    assert keyless["enabled"] is False
    codes = {i["code"]: i for i in conv.items}
    assert codes["lore-entry-truncated"]["count"] == 23000
    assert codes["lore-entry-no-keys"]["level"] == "warning" and codes["lore-entry-empty"]["source"] == "hybrid.json"


def test_card_book_and_linked_world_info_are_deduplicated(client, home):
    response = st_post(client, [upload(CARDS / "default_Seraphina.chara.json"), upload(WORLDINFO / "Eldoria.json")], locale="en-US")
    assert response.status_code == 201
    report = response.json()["report"]
    assert report["counts"]["loreEntries"] == 4
    assert {"code": "lore-entry-duplicate", "count": 4} in [{k: i[k] for k in ("code", "count") if k in i} for i in report["items"]]
    assert not any(i["code"] == "linked-world-info-missing" for i in report["items"])
    assert [s["kind"] for s in report["sources"]] == ["card", "worldInfo"]


def test_png_cards_chara_and_ccv3(client, home):
    seraphina = (CARDS / "default_Seraphina.chara.json").read_bytes()
    diana = (CARDS / "tavernkit_ccv3_st_export_like.json").read_bytes()
    both = png_card(seraphina, extra_chunks=[_chunk(b"tEXt", b"ccv3\x00" + base64.b64encode(diana))])
    files = [SimpleUploadedFile("seraphina.png", png_card(seraphina), content_type="image/png"),
             SimpleUploadedFile("avatar.bin", both, content_type="application/octet-stream")]
    response = st_post(client, files, locale="en-US", name="Two Cards")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["id"] == "two-cards" and body["report"]["counts"] == {"characters": 2, "loreEntries": 5, "hasCover": True}
    assert [s["name"] for s in body["report"]["sources"]] == ["Seraphina", "Diana"]  # ccv3 wins over chara
    assert [s["container"] for s in body["report"]["sources"]] == ["png", "png"]
    root = home / "worlds" / "two-cards"
    cover = (root / "media" / "images" / "cover.png").read_bytes()
    assert cover.startswith(st_import.PNG_SIGNATURE) and b"tEXt" not in cover
    detail = client.get("/api/worlds/two-cards").json()
    assert detail["metadata"]["cover"] == "media/images/cover.png"
    assert [c["name"] for c in detail["metadata"]["embeddedCharacters"]] == ["Seraphina", "Diana"]


def test_preview_writes_nothing_and_ids_count_up(client, home):
    preview = st_post(client, [upload(WORLDINFO / "Eldoria.json")], preview="true")
    assert preview.status_code == 200
    body = preview.json()
    assert body["preview"] is True and body["id"] == "eldoria" and body["report"]["world"]["locale"] == "zh-CN"  # DEFAULT_LOCALE
    assert not (home / "worlds" / "eldoria").exists()
    first = st_post(client, [upload(WORLDINFO / "Eldoria.json")], locale="en_us")
    second = st_post(client, [upload(WORLDINFO / "Eldoria.json")], locale="en-US")
    assert (first.status_code, second.status_code) == (201, 201)
    assert first.json()["id"] == "eldoria" and second.json()["id"] == "eldoria-2"
    assert first.json()["report"]["world"]["locale"] == "en-US"
    builtin = st_post(client, [upload(WORLDINFO / "Eldoria.json")], name="Yanhui Ferry", preview="1")
    assert builtin.json()["id"] == "yanhui-ferry-2"  # the builtin world id is taken
    chinese = st_post(client, [upload(CARDS / "srl_render-parity-regression-character.json")], preview="1")
    assert chinese.json()["id"] == "st-world"


def test_id_exhaustion_is_409(client, home):
    worlds = home / "worlds"
    for n in range(1, st_import_candidates() + 1):
        (worlds / ("world-one" if n == 1 else f"world-one-{n}")).mkdir(parents=True)
    response = st_post(client, [upload(WORLDINFO / "tavernkit_world_one.json")])
    assert response.status_code == 409 and response.json()["code"] == "st_import_id_exhausted"


def st_import_candidates() -> int:
    from sessions.world_install import ID_CANDIDATES

    return ID_CANDIDATES


def test_imported_world_creates_a_session_with_its_characters_and_lore(client, home):
    response = st_post(client, [upload(CARDS / "tavernkit_ccv3_st_export_like.json"), upload(WORLDINFO / "Toaru.json")], locale="en-US")
    world_id = response.json()["id"]
    created = client.post("/api/sessions", data={"worldId": world_id, "locale": "en-US"}, content_type="application/json")
    assert created.status_code == 201, created.json()
    session = created.json()
    headers = {"HTTP_AUTHORIZATION": f"Bearer {session['ownerToken']}"}
    characters = client.get(f"/api/sessions/{session['id']}/characters", **headers).json()["items"]
    assert "Diana" in [c["name"] for c in characters]
    lore = client.get(f"/api/sessions/{session['id']}/lorebook", **headers).json()["items"]
    assert len(lore) == 19 and any("kingdom" in e["keys"] for e in lore)
    deleted = client.delete(f"/api/worlds/{world_id}")
    assert deleted.status_code == 200 and deleted.json()["deletedSessions"] == 1
    assert not (home / "worlds" / world_id).exists()


@pytest.mark.parametrize("files,status,reason", [
    ([], 400, "no-files"),
    ([("x.json", b"{not json")], 400, "json-invalid"),
    ([("x.json", b'{"hello": 1}')], 400, "file-unrecognized"),
    ([("x.png", st_import.PNG_SIGNATURE + b"\x00\x00")], 400, "png-invalid"),
    ([("x.json", b'{"spec": "chara_card_v2", "data": {"name": ""}}')], 400, "card-invalid"),
    ([("x.json", b'{"entries": {}}')], 400, "nothing-to-import"),
    ([("x.json", b"{}")] * 9, 400, "too-many-files"),
    ([(f"c{i}.json", b'{"name": "A", "first_mes": "hi"}') for i in range(7)], 400, "too-many-cards"),
    ([("big.json", b" " * (8 * 1024 * 1024 + 1))], 413, "file-too-large"),
])
def test_invalid_imports(files, status, reason):
    with pytest.raises(StImportError) as caught:
        st_import.st_convert(files, locale="en-US")
    assert (caught.value.status, caught.value.reason) == (status, reason)


def test_png_limits_and_errors():
    card = (CARDS / "oobabooga_Example.json").read_bytes()
    good = png_card(card)
    corrupt = bytearray(good)
    corrupt[40] ^= 0xFF  # inside the tEXt chunk → CRC mismatch
    too_many = png_card(card, extra_chunks=[_chunk(b"teSt", b"")] * 4100)
    big = json.dumps({"name": "Big", "first_mes": "x" * (3 * 1024 * 1024 + 10)}).encode()
    no_card = png_card(card, keyword=b"Comment")
    for data, status, reason in ((bytes(corrupt), 400, "png-invalid"), (too_many, 413, "png-too-many-chunks"),
                                 (png_card(big), 413, "card-json-too-large"), (no_card, 400, "png-no-card"),
                                 (good[:-12], 400, "png-invalid")):
        with pytest.raises(StImportError) as caught:
            st_import.st_convert([("c.png", data)], locale="en-US")
        assert (caught.value.status, caught.value.reason) == (status, reason)
    with pytest.raises(StImportError) as caught:
        st_import.st_convert([("c.json", big)], locale="en-US")
    assert (caught.value.status, caught.value.reason) == (413, "card-json-too-large")


def test_lore_entry_limit_skips_the_excess_and_yaml_limit_is_413():
    entries = {str(i): {"uid": i, "key": [f"k{i}"], "content": f"entry {i}"} for i in range(2100)}
    conv = st_import.st_convert([("many.json", json.dumps({"entries": entries}).encode())], locale="en-US")
    assert len(conv.lorebook) == 2000
    skipped = next(i for i in conv.items if i["code"] == "lore-entries-skipped")
    assert skipped["count"] == 100 and skipped["level"] == "warning"
    assert len(yaml.safe_load(conv.package_files("many")["data/lorebook.yaml"])) == 2000
    heavy = {str(i): {"uid": i, "key": [f"k{i}"], "content": f"{i} " + "y" * 19000} for i in range(120)}
    with pytest.raises(StImportError) as caught:
        st_import.st_convert([("heavy.json", json.dumps({"entries": heavy}).encode())], locale="en-US")
    assert (caught.value.status, caught.value.reason) == (413, "lorebook-too-large")


def test_endpoint_error_envelopes(client, home):
    bad = st_post(client, [SimpleUploadedFile("x.json", b'{"hello": 1}')])
    assert bad.status_code == 400
    assert bad.json()["code"] == "st_import_invalid" and bad.json()["details"] == {"code": "file-unrecognized", "source": "x.json"}
    locale = st_post(client, [upload(WORLDINFO / "Eldoria.json")], locale="not a locale")
    assert locale.status_code == 400 and locale.json()["code"] == "invalid_locale"
    big = st_post(client, [SimpleUploadedFile("big.json", b" " * (8 * 1024 * 1024 + 1))])
    assert big.status_code == 413 and big.json()["details"]["code"] == "file-too-large"
    worlds = home / "worlds"
    assert not worlds.exists() or list(worlds.iterdir()) == []  # nothing written, staging removed


def test_locale_normalize():
    assert st_import.locale_normalize("en_us") == "en-US"
    assert st_import.locale_normalize("ZH-hans-cn") == "zh-Hans-CN"
    assert st_import.locale_normalize("ja") == "ja"
    assert st_import.locale_normalize("english!") is None and st_import.locale_normalize("") is None


@pytest.mark.parametrize("raw, reason", [
    (b'{"spec": "chara_card_v2", "data": {"name": "Bob", "description": "\\ud800"}}', "json-invalid"),
    (b'{"spec": "chara_card_v2", "data": {"name": "Bob", "description": "a\\u0000b"}}', "json-invalid"),
    (b'{"entries": {"1": {"key": ["\\u0000"], "content": "c"}}}', "json-invalid"),
    (b'{"spec": "chara_card_v2", "data": {"name": "Bob", "extensions": {"x": NaN}}}', "json-invalid"),
    (b"[" * 10000 + b"]" * 10000, "json-invalid"),
])
def test_cards_a_world_package_could_not_hold_are_400_and_write_nothing(client, home, raw, reason):
    response = st_post(client, [SimpleUploadedFile("c.json", raw)])

    assert response.status_code == 400, response.content
    assert response.json()["code"] == "st_import_invalid"
    assert response.json()["details"] == {"code": reason, "source": "c.json"}
    worlds = home / "worlds"
    assert not worlds.exists() or list(worlds.iterdir()) == []


def test_png_card_with_unstorable_text_or_deep_json_is_card_invalid(client, home):
    for card_json in (b'{"spec": "chara_card_v2", "data": {"name": "Bob", "first_mes": "\\ud83d"}}', b"[" * 10000 + b"]" * 10000):
        response = st_post(client, [SimpleUploadedFile("c.png", png_card(card_json))])
        assert response.status_code == 400, response.content
        assert response.json()["details"] == {"code": "card-invalid", "source": "c.png"}


def test_world_name_with_a_nul_character_is_invalid_name(client, home):
    response = st_post(client, [upload(WORLDINFO / "Eldoria.json")], name="a\x00b")

    assert response.status_code == 400 and response.json()["code"] == "invalid_name"
    worlds = home / "worlds"
    assert not worlds.exists() or list(worlds.iterdir()) == []
