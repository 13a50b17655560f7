"""world.json (plugins_app/schemas/, GET /api/framework/schemas/world.json): in step with the world
loader's constants, usable by an editor as published, and mapped to the loader's issues."""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator
from referencing import Registry, Resource

from covel.yamlio import yaml_load
from plugins_app.validation import SCHEMA_DIR, SCHEMA_NAMES, schema_document
from sessions import world_packages as wp
from sessions.worldpkg.manifest import ACCENT_RE
from tests.shared_paths import FIXTURES_DIR

WORLD_DIRS = [
    *sorted(p for p in (FIXTURES_DIR / "upstream" / "worlds").iterdir() if (p / "world.yaml").is_file()),
    *sorted(p for p in wp.BUILTIN_WORLDS_DIR.iterdir() if (p / "world.yaml").is_file()),
    *sorted(p for p in (Path(__file__).resolve().parent / "worlds").iterdir() if (p / "world.yaml").is_file()),
]


def world_node(pointer: str):
    out = schema_document("world.json")
    for part in pointer.strip("/").split("/"):
        out = out[part]
    return out


def test_world_schema_is_valid_draft_2020_12():
    schema = json.loads((SCHEMA_DIR / "world.json").read_text(encoding="utf-8"))
    Draft202012Validator.check_schema(schema)
    assert schema["$id"] == "/api/framework/schemas/world.json"


# ---------------------------------------------------------------- constants cannot drift


def test_world_schema_enums_and_patterns_equal_the_loader_constants():
    assert world_node("/$defs/characterAttribute/properties/type")["enum"] == sorted(wp.ATTRIBUTE_TYPES)
    assert world_node("/$defs/dataSource/properties/kind")["enum"] == sorted(wp.SOURCE_KINDS)
    assert world_node("/$defs/dataSource/properties/visibility")["enum"] == list(wp.SOURCE_VISIBILITIES)
    assert world_node("/properties/defaultViewMode")["enum"] == [*wp.VIEW_MODES, None]
    assert world_node("/properties/defaultLocale")["pattern"] == wp.LOCALE_RE.pattern
    assert world_node("/properties/supportedLocales/items")["pattern"] == wp.LOCALE_RE.pattern
    assert world_node("/properties/accentColor")["pattern"] == ACCENT_RE.pattern


def test_every_world_schema_enum_is_accounted_for():
    found = []

    def walk(value, pointer):
        if isinstance(value, dict):
            if "enum" in value:
                found.append(pointer)
            for key, item in value.items():
                walk(item, f"{pointer}/{key}")

    walk(schema_document("world.json"), "")
    assert sorted(found) == sorted(["/$defs/characterAttribute/properties/type", "/$defs/dataSource/properties/kind",
                                    "/$defs/dataSource/properties/visibility", "/properties/defaultViewMode"])


def test_world_schema_field_lists():
    properties = schema_document("world.json")["properties"]
    assert wp.LEGACY_WORLD_FIELDS <= set(properties)
    assert all(properties[key].get("deprecated") for key in wp.LEGACY_WORLD_FIELDS - {"memoryBlocks"})
    policy = world_node("/$defs/pluginPolicy/properties")
    assert set(wp.LEGACY_POLICY_FIELDS) <= set(policy) and set(wp.LEGACY_POLICY_FIELDS.values()) <= set(policy)
    assert wp.POLICY_FIELDS == {"presetId", "packs", "preferredTags", "avoidedTags", "requested", "recommended", "requires"}
    assert world_node("/required") == ["schemaVersion", "id", "name", "summary", "defaultLocale"]


# ---------------------------------------------------------------- usable as published


def editor_validator(pointer: str | None = None) -> Draft202012Validator:
    resources = [(f"/api/framework/schemas/{n}", Resource.from_contents(json.loads((SCHEMA_DIR / n).read_text(encoding="utf-8"))))
                 for n in SCHEMA_NAMES]
    schema = {"$ref": "/api/framework/schemas/world.json" + (f"#{pointer}" if pointer else "")}
    return Draft202012Validator(schema, registry=Registry().with_resources(resources))


def extra_keys(errors) -> list[str]:
    out = []
    for err in errors:
        assert err.validator == "additionalProperties", (list(err.absolute_path), err.message)
        declared = err.schema.get("properties", {})
        out += [".".join(map(str, [*err.absolute_path, key])) for key in err.instance if key not in declared]
    return sorted(out)


@pytest.mark.parametrize("root", WORLD_DIRS, ids=lambda p: p.name)
def test_published_schema_accepts_every_world_except_its_unknown_fields(root):
    """world.yaml and its descriptor, checked the way an editor would: only the fields the
    loader reports as unknown are flagged."""
    world = wp.world_package_load(root, expected_id=root.name)
    manifest = yaml_load((root / "world.yaml").read_text(encoding="utf-8"))
    reported = sorted(i.field for i in world.issues if i.file == "world.yaml" and i.code == "unknown-field")
    assert extra_keys(editor_validator().iter_errors(manifest)) == reported
    if isinstance(manifest.get("worldData"), str):
        descriptor = yaml_load((root / manifest["worldData"]).read_text(encoding="utf-8"))
        reported = sorted(i.field for i in world.issues if i.file == manifest["worldData"] and i.code == "unknown-field")
        assert extra_keys(editor_validator("/$defs/worldData").iter_errors(descriptor)) == reported


def test_world_schema_endpoint(client):
    response = client.get("/api/framework/schemas/world.json")
    assert response.status_code == 200 and response["Content-Type"] == "application/schema+json"
    assert response.json()["$defs"]["worldData"]["required"] == ["sources"]


# ---------------------------------------------------------------- loader issues from the schema

MINIMAL = 'schemaVersion: "1.0"\nid: tiny\nname: Tiny\nsummary: A tiny world.\ndefaultLocale: en-US\n'


def load(tmp_path, files: dict[str, str]):
    root = tmp_path / "tiny"
    for rel, text in {"world.yaml": MINIMAL, "WORLD.md": "# Tiny\n", **files}.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    world = wp.world_package_load(root, expected_id="tiny")
    return sorted((i.severity, i.code, i.file, i.field) for i in world.issues)


def test_wrongly_typed_policy_is_one_issue_without_warnings_inside(tmp_path):
    assert load(tmp_path, {"world.yaml": MINIMAL + "pluginPolicy: [{zz: 1}]\n"}) == [
        ("error", "invalid-field", "world.yaml", "pluginPolicy")]


def test_pack_and_attribute_fields(tmp_path):
    world_yaml = MINIMAL + textwrap.dedent("""\
        pluginPolicy:
          packs:
            - {id: a, label: A, soon: 1}
            - {label: B}
            - {id: a}
        characterSchema:
          types: [npc, player]
          attributes:
            - {id: hp, name: HP, type: number, min: 0}
            - {id: 3, type: text}
        """)
    assert load(tmp_path, {"world.yaml": world_yaml}) == sorted([
        ("warning", "unknown-field", "world.yaml", "pluginPolicy.packs.0.soon"),
        ("error", "missing-field", "world.yaml", "pluginPolicy.packs.1.id"),
        ("error", "invalid-field", "world.yaml", "pluginPolicy.packs.2.id"),  # declared twice
        ("error", "invalid-field", "world.yaml", "characterSchema.types"),  # player is reserved
        ("error", "invalid-field", "world.yaml", "characterSchema.attributes.1.id"),
        ("error", "missing-field", "world.yaml", "characterSchema.attributes.1.name"),
        ("error", "invalid-field", "world.yaml", "characterSchema.attributes.1.type"),
    ])


def test_legacy_character_attributes_are_checked_where_they_now_live(tmp_path):
    assert load(tmp_path, {"world.yaml": MINIMAL + "characterAttributes:\n  - {id: hp, type: number}\n"}) == [
        ("error", "missing-field", "world.yaml", "characterSchema.attributes.0.name"),
        ("warning", "legacy-layout", "world.yaml", "characterAttributes"),
    ]


def test_descriptor_sources(tmp_path):
    files = {
        "world.yaml": MINIMAL + "worldData: data/world.data.yaml\n",
        "data/a.yaml": "[]",
        "data/world.data.yaml": textwrap.dedent("""\
            schemaVersion: 1
            extra: 1
            sources:
              a: {kind: yaml, path: data/a.yaml, to: lorebook, visibility: secret, soon: 1}
              b: {kind: csv, path: data/a.yaml, to: lorebook}
              c: {kind: yaml, to: 'somewhere:else'}
              d: 5
            """),
    }
    assert load(tmp_path, files) == sorted([
        ("warning", "unknown-field", "data/world.data.yaml", "extra"),
        ("warning", "unknown-field", "data/world.data.yaml", "sources.a.soon"),
        ("error", "invalid-field", "data/world.data.yaml", "sources.a.visibility"),
        ("error", "invalid-field", "data/world.data.yaml", "sources.b.kind"),
        ("error", "missing-field", "data/world.data.yaml", "sources.c.path"),
        ("error", "source-target-invalid", "data/world.data.yaml", "sources.c.to"),
        ("error", "invalid-field", "data/world.data.yaml", "sources.d"),
    ])


def test_supported_locales_are_checked_one_by_one(tmp_path):
    assert load(tmp_path, {"world.yaml": MINIMAL + "supportedLocales: [en-US, english, 7]\n"}) == [
        ("error", "invalid-field", "world.yaml", "supportedLocales.1"),
        ("error", "invalid-field", "world.yaml", "supportedLocales.2"),
    ]


def test_an_invalid_json_data_file_is_file_invalid(tmp_path):
    """It used to crash the loader (the JSON error branch fell through)."""
    assert ("error", "file-invalid", "characters/characters.json", None) in load(
        tmp_path, {"characters/characters.json": '[{"id": "a",'})
