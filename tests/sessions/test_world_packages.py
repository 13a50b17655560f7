"""World package loader: every upstream fixture world, our builtin worlds, and broken packages."""
from __future__ import annotations

import io
import shutil
import textwrap
import zipfile
from pathlib import Path

import pytest

from plugins_app.validation import zip_extract_safe
from sessions.world_packages import (
    BUILTIN_WORLDS_DIR,
    WorldPackage,
    world_package_load,
    world_packages_discover,
    world_validation_report,
)
from sessions.worldpkg.dimensions import dimensions_export, dimensions_import
from tests.shared_paths import FIXTURES_DIR

FIXTURE_WORLDS = FIXTURES_DIR / "upstream" / "worlds"


def errors(world: WorldPackage) -> list[tuple[str, str | None, str | None]]:
    return [(i.code, i.file, i.field) for i in world.issues if i.severity == "error"]


# ---------------------------------------------------------------- upstream fixture worlds


@pytest.mark.parametrize("world_id", ["emberback", "haruka-academy", "mistport"])
def test_every_fixture_world_loads_without_error_diagnostics(world_id):
    world = world_package_load(FIXTURE_WORLDS / world_id, expected_id=world_id)
    assert errors(world) == []
    assert world.ok is True
    assert world.id == world_id


def test_emberback_content_per_locale():
    world = world_package_load(FIXTURE_WORLDS / "emberback")
    assert world.default_locale == "en-US"
    assert world.supported_locales == ["en-US", "zh-CN"]  # zh-CN comes from world.zh-CN.yaml / WORLD.zh-CN.md
    assert world.name == "Emberback Relay"
    assert world.content("zh-CN").name == "余烬背中继站"
    assert world.lore.startswith("# Emberback Relay")
    assert world.content("zh-CN").lore.startswith("# 余烬背中继站")
    assert len(world.content("en-US").characters) == 3
    assert [c["id"] for c in world.content("zh-CN").characters][:2] == ["npc-tomas-reed", "npc-june-okafor"]
    assert len(world.content("zh-CN").characters) == 5
    # lorebook = data/lorebook.yaml (10) + rules with `+lorebook` (6)
    lore_sources = [e["sourceId"] for e in world.lorebook]
    assert lore_sources.count("lore") == 10 and lore_sources.count("rules") == 6
    assert list(world.dimensions)[:4] == ["crownfire", "relayGrid", "signalLog", "convoy"]
    crownfire = world.dimensions["crownfire"]
    assert crownfire["initialValue"] == {"minutesRemaining": 180, "stage": "distant"}
    # YAML 1.2 semantics: `off` is a string, not False
    assert world.dimensions["relayGrid"]["initialValue"]["systems"]["longRange"] == "off"
    assert world.content("zh-CN").dimensions["crownfire"]["name"] != "Crownfire Countdown"
    attrs = {a["id"]: a for a in world.content("zh-CN").character_schema["attributes"]}
    assert attrs["grit"]["name"] == "坚毅" and attrs["grit"]["max"] == 5  # overlay text, base structure
    assert world.plugin_policy.preset == "emberback-rescue"
    assert world.plugin_policy.packs[0].requested[:3] == ["pregame", "world-init", "char-creator"]
    hidden = [s.id for s in world.data_sources if s.is_hidden]
    assert hidden == ["storyEvents"]
    assert len(world.content("en-US").data["storyEvents"]) == 2
    assert len(world.content("zh-CN").data["storyEvents"]) == 3
    assert set(world.content("en-US").media) == {"gallery", "portraits", "presence"}


def test_haruka_reads_legacy_dimensions_split_files_and_short_locale_media():
    world = world_package_load(FIXTURE_WORLDS / "haruka-academy")
    assert world.default_locale == "zh-CN" and world.supported_locales == ["zh-CN", "en-US"]
    assert world.name == "遥风学园・春日薄荷"
    assert world.content("en-US").name == "Haruka Academy · Spring Mint"
    assert len(world.content("zh-CN").characters) == 8
    assert len(world.content("zh-CN").data["cast"]) == 4
    assert len(world.content("en-US").data["cast"]) == 8
    assert world.default_view_mode == "stage"
    assert world.plugin_policy.preset == "dialogue-mode"
    assert world.plugin_settings["scene-cast"] == {"activeSpeakerCount": 2}
    # data/dimensions.yaml holds old static blocks; the split dimensions/ files duplicate them
    assert set(world.dimensions) == {"geography", "factions", "powerSystem", "history", "economy",
                                     "socialStructure", "tone", "mechanics", "startingConditions"}
    assert world.dimensions["tone"]["schema"] == {"type": "object"}
    assert world.content("en-US").dimensions["geography"]["name"] == "Geography"
    codes = {i.code for i in world.issues}
    assert "dimension-legacy-format" in codes and "dimension-duplicate-source" in codes
    assert any(i.code == "locale-short-name" and i.file == "media/gallery.en.json" for i in world.issues)
    assert "gallery" in world.content("en-US").media


def test_mistport_legacy_policy_and_character_attributes():
    world = world_package_load(FIXTURE_WORLDS / "mistport")
    assert world.content("en-US").name == "Mistport Chronicles"
    assert world.plugin_policy.preset == "traditional-story"
    assert world.plugin_policy.requested == ["pregame", "world-init", "char-creator", "narrator"]
    assert "scene-cast" in world.plugin_policy.excluded
    assert world.plugin_policy.preferred_tags[0] == "mode:traditional-story"
    assert [a["id"] for a in world.character_schema["attributes"]][:3] == ["persona", "faction", "role"]
    assert len(world.characters) == 7
    assert world.record_metadata()["memoryBlocks"][0]["label"] == "clues"
    assert world.plugin_settings["cost-gate"]["hardTokens"] == 600000


def test_record_metadata_shape():
    world = world_package_load(FIXTURE_WORLDS / "emberback")
    record = world.record()
    assert record["id"] == "emberback" and record["locale"] == "en-US"
    meta = record["metadata"]
    assert meta["source"] == "file"
    assert meta["supportedLocales"] == ["en-US", "zh-CN"]
    assert meta["localizedText"]["name"] == {"zh-CN": "余烬背中继站"}
    assert meta["packageInfo"] == {"version": "1.1.0"}
    assert [s["id"] for s in meta["worldData"]["sources"]][0] == "dimensions"
    assert meta["pluginPolicy"]["preset"] == "emberback-rescue"


# ---------------------------------------------------------------- our builtin worlds


def test_builtin_worlds_load_clean_and_are_playable():
    worlds = world_packages_discover(builtin_dir=BUILTIN_WORLDS_DIR)
    assert len(worlds) >= 2
    locales = set()
    for world in worlds:
        assert errors(world) == [], world.id
        assert world.source == "file"
        locales.add(world.default_locale)
        content = world.content()
        assert len(content.characters) >= 6
        assert len(content.lorebook) >= 10
        assert len(world.dimensions) >= 2
        assert all("schema" in d and "initialValue" in d for d in world.dimensions.values())
        assert world.character_schema and world.character_schema["attributes"]
        assert content.lore
    assert {"zh-CN", "en-US"} <= locales


# ---------------------------------------------------------------- broken packages


def write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    return root


MINIMAL = {
    "world.yaml": 'schemaVersion: "1.0"\nid: tiny\nname: Tiny\nsummary: A tiny world.\ndefaultLocale: en-US\n',
    "WORLD.md": "# Tiny\n",
}


def test_minimal_world_loads(tmp_path):
    world = world_package_load(write(tmp_path / "tiny", MINIMAL), expected_id="tiny")
    assert world.ok and world.name == "Tiny" and world.supported_locales == ["en-US"]


def broken(tmp_path: Path, files: dict[str, str | None], folder: str = "tiny") -> WorldPackage:
    merged = {**MINIMAL, **files}
    root = tmp_path / folder
    write(root, {k: v for k, v in merged.items() if v is not None})
    return world_package_load(root, expected_id=folder)


DIM_OK = """
    morale:
      name: Morale
      schema: {type: integer, minimum: 0, maximum: 10}
      initialValue: 5
    """

BROKEN_WORLDS = [
    ("bad-yaml", {"world.yaml": "id: tiny\nname: [unclosed\n"}, ("manifest-invalid", "world.yaml", None)),
    ("missing-world-md", {"WORLD.md": None}, ("file-missing", "WORLD.md", None)),
    ("missing-field", {"world.yaml": "schemaVersion: '1.0'\nid: tiny\nname: Tiny\ndefaultLocale: en-US\n"}, ("missing-field", "world.yaml", "summary")),
    ("unknown-keyword", {"data/dimensions.yaml": "morale:\n  name: M\n  schema: {type: integer, format: int32}\n  initialValue: 1\n"},
     ("schema-unknown-keyword", "data/dimensions.yaml", "morale.schema.format")),
    ("initial-value", {"data/dimensions.yaml": "morale:\n  name: M\n  schema: {type: integer}\n  initialValue: '5'\n"},
     ("initial-value-invalid", "data/dimensions.yaml", "morale.initialValue")),
    ("missing-initial", {"data/dimensions.yaml": "morale:\n  name: M\n  schema: {type: integer}\n"},
     ("dimension-invalid", "data/dimensions.yaml", "morale.initialValue")),
    ("bad-data-yaml", {"data/lorebook.yaml": "- id: a\n  content: [oops\n"}, ("file-invalid", "data/lorebook.yaml", None)),
    ("lore-record", {"data/lorebook.yaml": "- id: a\n"}, ("record-invalid", "data/lorebook.yaml", "0")),
    ("dup-character", {"characters/characters.json": '[{"id":"a","name":"A"},{"id":"a","name":"B"}]'},
     ("record-duplicate", "characters/characters.json", "1.id")),
    ("attr-type", {"world.yaml": MINIMAL["world.yaml"] + "characterSchema:\n  attributes:\n    - {id: hp, name: HP, type: float}\n"},
     ("invalid-field", "world.yaml", "characterSchema.attributes.0.type")),
    ("source-missing", {"world.yaml": MINIMAL["world.yaml"] + "worldData: data/world.data.yaml\n",
                        "data/world.data.yaml": "schemaVersion: 1\nsources:\n  lore: {kind: yaml, path: data/nope.yaml, to: lorebook}\n"},
     ("source-missing", "data/world.data.yaml", "sources.lore.path")),
    ("source-cycle", {"world.yaml": MINIMAL["world.yaml"] + "worldData: data/world.data.yaml\n",
                      "data/a.yaml": "[]", "data/b.yaml": "[]",
                      "data/world.data.yaml": "sources:\n  a: {kind: yaml, path: data/a.yaml, to: lorebook, after: b}\n  b: {kind: yaml, path: data/b.yaml, to: lorebook, after: a}\n"},
     ("source-cycle", "data/world.data.yaml", "sources")),
    ("source-target", {"world.yaml": MINIMAL["world.yaml"] + "worldData: data/world.data.yaml\n", "data/a.yaml": "[]",
                       "data/world.data.yaml": "sources:\n  a: {kind: yaml, path: data/a.yaml, to: 'somewhere:else'}\n"},
     ("source-target-invalid", "data/world.data.yaml", "sources.a.to")),
    ("path-escape", {"world.yaml": MINIMAL["world.yaml"] + "worldData: ../outside.yaml\n"}, ("path-outside-package", "world.yaml", "worldData")),
    ("cover", {"world.yaml": MINIMAL["world.yaml"] + "cover: ../../etc/passwd.png\n"}, ("invalid-field", "world.yaml", "cover")),
]


@pytest.mark.parametrize("name,files,expected", BROKEN_WORLDS, ids=[b[0] for b in BROKEN_WORLDS])
def test_broken_world_yields_precise_issue(tmp_path, name, files, expected):
    world = broken(tmp_path, files)
    assert expected in errors(world)
    assert world.ok is False
    report = world_validation_report(world).as_dict()
    assert report["ok"] is False and report["counts"]["errors"] >= 1
    assert {"severity": "error", "code": expected[0]}.items() <= report["issues"][0].items() or any(
        i["code"] == expected[0] for i in report["issues"])


def test_id_mismatch_is_an_error(tmp_path):
    world = broken(tmp_path, {}, folder="other-folder")
    assert ("id-mismatch", "world.yaml", "id") in errors(world)


def test_missing_manifest(tmp_path):
    world = broken(tmp_path, {"world.yaml": None})
    assert errors(world) == [("manifest-missing", "world.yaml", None)]


def test_unknown_world_field_is_a_warning_only(tmp_path):
    world = broken(tmp_path, {"world.yaml": MINIMAL["world.yaml"] + "future: 1\n"})
    assert world.ok
    assert [(i.severity, i.code, i.file, i.field) for i in world.issues] == [("warning", "unknown-field", "world.yaml", "future")]


def test_discovery_keeps_broken_worlds_out_of_the_usable_set(tmp_path):
    write(tmp_path / "good", {**MINIMAL, "world.yaml": MINIMAL["world.yaml"].replace("id: tiny", "id: good")})
    write(tmp_path / "bad", {**MINIMAL, "world.yaml": MINIMAL["world.yaml"].replace("id: tiny", "id: bad") + "dimensions: {x: {name: X, schema: {type: string, pattern: a}, initialValue: a}}\n"})
    worlds = {w.id: w for w in world_packages_discover(builtin_dir=tmp_path / "none", user_dir=tmp_path)}
    assert worlds["good"].ok and worlds["good"].source == "user-file"
    assert not worlds["bad"].ok and ("schema-unknown-keyword", "world.yaml", "x.schema.pattern") in errors(worlds["bad"])


# ---------------------------------------------------------------- zip packages


def make_zip(entries: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
    return buffer.getvalue()


@pytest.mark.parametrize("member", ["../evil.txt", "/abs/evil.txt", "tiny/../../evil.txt", "C:/evil.txt", "a\\..\\evil.txt"])
def test_zip_slip_paths_are_rejected_and_nothing_is_extracted(tmp_path, member):
    data = make_zip({"world.yaml": b"id: tiny\n", member: b"x"})
    issues = zip_extract_safe(data, tmp_path / "out")
    assert [(i.code, i.field) for i in issues] == [("zip-unsafe-path", member)]
    assert not (tmp_path / "out").exists()
    assert not (tmp_path / "evil.txt").exists()


def test_zip_symlink_member_is_rejected(tmp_path):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        info = zipfile.ZipInfo("link")
        info.external_attr = (0o120777 << 16)
        archive.writestr(info, "/etc/passwd")
    issues = zip_extract_safe(buffer.getvalue(), tmp_path / "out")
    assert [(i.code, i.message) for i in issues] == [("zip-unsafe-path", "symbolic link")]


def test_not_a_zip(tmp_path):
    assert [i.code for i in zip_extract_safe(b"PK-not-really", tmp_path / "o")] == ["zip-invalid"]


def test_valid_zip_extracts_a_loadable_world(tmp_path):
    data = make_zip({f"tiny/{k}": textwrap.dedent(v).lstrip().encode() for k, v in MINIMAL.items()})
    assert zip_extract_safe(data, tmp_path / "out") == []
    world = world_package_load(tmp_path / "out" / "tiny", expected_id="tiny")
    assert world.ok


# ---------------------------------------------------------------- dimension import/export


def test_dimension_import_accepts_the_unified_definition():
    body = {"dimensions": {"reputation": {"name": "声望", "schema": {"type": "integer", "minimum": 0, "maximum": 100},
                                          "initialValue": 0, "updateRule": "完成委托 +5"}}}
    stored, issues = dimensions_import(body)
    assert issues == [] and stored == body["dimensions"] and stored is not body["dimensions"]


@pytest.mark.parametrize("definition,code,field", [
    ({"name": "R", "schema": {"type": "integer", "default": 3}, "initialValue": 1}, "schema-unknown-keyword", "dimensions.r.schema.default"),
    ({"name": "R", "schema": {"type": "integer"}, "initialValue": "1"}, "initial-value-invalid", "dimensions.r.initialValue"),
    ({"name": "R", "schema": {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}, "initialValue": {}},
     "initial-value-invalid", "dimensions.r.initialValue"),
    ({"name": "R", "schema": {"type": "object", "required": ["a"]}, "initialValue": {"a": 1}}, "schema-invalid", "dimensions.r.schema.required"),
    ({"name": "R", "schema": {"type": "integer"}}, "dimension-invalid", "dimensions.r.initialValue"),
    ({"name": "R", "schema": {"type": "integer"}, "initialValue": 1, "extra": True}, "dimension-invalid", "dimensions.r.extra"),
])
def test_dimension_import_rejects_without_coercion(definition, code, field):
    stored, issues = dimensions_import({"dimensions": {"r": definition}})
    assert stored is None
    assert (code, field) in [(i.code, i.field) for i in issues]


def test_dimension_import_needs_an_object():
    stored, issues = dimensions_import({"dimensions": []})
    assert stored is None and issues[0].code == "invalid-request"


def test_dimension_export_round_trips():
    world = world_package_load(FIXTURE_WORLDS / "emberback")
    text, content_type = dimensions_export(world.dimensions, "yaml")
    assert content_type == "application/yaml"
    from covel.yamlio import yaml_load
    assert yaml_load(text) == world.dimensions
    text, content_type = dimensions_export(world.dimensions, "json")
    assert content_type == "application/json" and '"crownfire"' in text
    with pytest.raises(ValueError):
        dimensions_export(world.dimensions, "xml")
