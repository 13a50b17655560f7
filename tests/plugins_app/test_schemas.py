"""The published manifest schemas (plugins_app/schemas/*.json, GET /api/framework/schemas/{name}):
valid Draft 2020-12, in step with the Python enums, usable by an editor as they are, served over
HTTP, and mapped to issues by plugins_app.validation.schema_issues."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator
from referencing import Registry, Resource

from plugins_app import manifests as mf
from plugins_app.manifest_legacy import is_legacy
from plugins_app.manifests import frontmatter_read, plugin_manifest_load
from plugins_app.validation import SCHEMA_DIR, SCHEMA_NAMES, schema_document, schema_issues
from tests.shared_paths import FIXTURES_DIR

FIXTURE_PLUGINS = FIXTURES_DIR / "upstream" / "plugins"


def node(name: str, pointer: str):
    """The schema node at JSON pointer `pointer` of schema file `name`."""
    out = json.loads((SCHEMA_DIR / name).read_text(encoding="utf-8"))
    for part in pointer.strip("/").split("/"):
        out = out[part]
    return out


def enum_nodes(value, pointer=""):
    if isinstance(value, dict):
        if "enum" in value:
            yield pointer, value["enum"]
        for key, item in value.items():
            yield from enum_nodes(item, f"{pointer}/{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from enum_nodes(item, f"{pointer}/{index}")


# ---------------------------------------------------------------- the files themselves


@pytest.mark.parametrize("name", SCHEMA_NAMES)
def test_schema_files_are_valid_draft_2020_12(name):
    schema = json.loads((SCHEMA_DIR / name).read_text(encoding="utf-8"))
    Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$id"] == f"/api/framework/schemas/{name}"  # where GET /api/framework/schemas serves it
    assert schema["title"] and schema["description"]


@pytest.mark.parametrize("name", SCHEMA_NAMES)
def test_every_declared_field_has_a_title_and_description(name):
    """Editors show them in completion; a field without them is a gap in the published format."""
    missing = []

    def described(sub):
        while isinstance(sub, dict) and "$ref" in sub and not (sub.get("title") and sub.get("description")):
            file, _, pointer = sub["$ref"].partition("#")
            sub = node(file or name, pointer)
        return isinstance(sub, dict) and bool(sub.get("title")) and bool(sub.get("description"))

    def walk(value, pointer):
        if isinstance(value, dict):
            for field, sub in (value.get("properties") or {}).items():
                if not described(sub):
                    missing.append(f"{pointer}/properties/{field}")
            for key, item in value.items():
                walk(item, f"{pointer}/{key}")
        elif isinstance(value, list):
            for index, item in enumerate(value):
                walk(item, f"{pointer}/{index}")

    walk(schema_document(name), "")
    assert missing == []


# ---------------------------------------------------------------- enums cannot drift

# Schema enum (file, JSON pointer) → the Python constant the code uses for it.
ENUM_CONSTANTS = {
    ("plugin.json", "/properties/kind"): mf.PLUGIN_KINDS,
    ("plugin.json", "/$defs/hook/properties/event"): mf.HOOK_EVENTS,
    ("plugin.json", "/$defs/hook/properties/enforce"): mf.HOOK_ENFORCE,
    ("plugin.json", "/$defs/actionKind/properties/text"): mf.ACTION_KIND_TEXT,
    ("runtime.json", "/$defs/runtime/properties/type"): mf.RUNTIME_TYPES,
    ("runtime.json", "/$defs/trigger/properties/type"): mf.TRIGGER_TYPES + mf.LEGACY_TRIGGER_TYPES,
    ("runtime.json", "/$defs/schedule/properties/stage"): mf.STAGES,
    ("runtime.json", "/$defs/schedule/properties/manual/properties/execution"): mf.EXECUTION_MODES,
    ("runtime.json", "/$defs/scheduleCompletion/properties/mode"): mf.COMPLETION_MODES,
    ("runtime.json", "/$defs/io/properties/visibility"): mf.VISIBILITIES,
    ("runtime.json", "/$defs/selfData/properties/format"): mf.SELF_DATA_FORMATS,
    ("runtime.json", "/$defs/agentCompletion/properties/require"): mf.COMPLETION_REQUIRE,
}
# Enums only the schema states (no Python constant reads them during loading); pinned here so a
# change to one is a deliberate edit of this test too.
SCHEMA_ONLY_ENUMS = {
    ("plugin.json", "/$defs/commandArgument/properties/type"): ["string", "integer", "number", "boolean"],
    ("runtime.json", "/$defs/runtimeRef/anyOf/1/properties/cardinality"): ["one", "all"],
    ("runtime.json", "/$defs/runtimeRef/anyOf/1/properties/scope"): ["turn", "session"],
    ("runtime.json", "/$defs/inputSource/properties/cardinality"): ["one", "all"],
    ("runtime.json", "/$defs/inputBinding/properties/scope"): ["turn", "committed"],
    ("runtime.json", "/$defs/scheduleCompletion/properties/settle"): ["before-next-execution"],
    ("runtime.json", "/$defs/scheduleCompletion/properties/overlap"): ["serial"],
    ("runtime.json", "/$defs/scheduleCompletion/properties/stalePolicy"): ["reject"],
    ("runtime.json", "/$defs/agent/properties/llm/properties/reasoningEffort"): ["disabled"],
}


@pytest.mark.parametrize("where,constant", sorted(ENUM_CONSTANTS.items()), ids=[f"{n}{p}" for n, p in sorted(ENUM_CONSTANTS)])
def test_schema_enums_equal_the_python_constants(where, constant):
    assert node(*where)["enum"] == list(constant)


def test_every_schema_enum_is_accounted_for():
    """A new enum in plugin.json/runtime.json must be tied to its Python constant (or pinned)."""
    found = {(name, pointer): values for name in ("plugin.json", "runtime.json")
             for pointer, values in enum_nodes(schema_document(name))}
    assert set(found) == set(ENUM_CONSTANTS) | set(SCHEMA_ONLY_ENUMS)
    for where, values in SCHEMA_ONLY_ENUMS.items():
        assert found[where] == values, where


def test_other_constants_the_schemas_list():
    ui = node("plugin.json", "/$defs/contributes/properties/ui/properties")
    assert tuple(ui) == mf.UI_SLOTS
    assert node("plugin.json", "/$defs/dataset/properties/ops/items")["examples"] == list(mf.DATASET_OPS)
    assert node("plugin.json", "/$defs/dataset/properties/tools/items")["examples"] == list(mf.DATASET_TOOLS)
    assert mf.LEGACY_KEYS.isdisjoint(schema_document("plugin.json")["properties"])


# ---------------------------------------------------------------- usable as published


def editor_validator(name: str) -> Draft202012Validator:
    """A stock Draft 2020-12 validator over the files as served, the way an editor resolves them."""
    resources = [(f"/api/framework/schemas/{n}", Resource.from_contents(json.loads((SCHEMA_DIR / n).read_text(encoding="utf-8"))))
                 for n in SCHEMA_NAMES]
    schema = json.loads((SCHEMA_DIR / name).read_text(encoding="utf-8"))
    return Draft202012Validator(schema, registry=Registry().with_resources(resources))


def extra_keys(errors) -> list[str]:
    out = []
    for err in errors:
        assert err.validator == "additionalProperties", (list(err.absolute_path), err.message)
        declared = err.schema.get("properties", {})
        out += [".".join(map(str, [*err.absolute_path, key])) for key in err.instance if key not in declared]
    return sorted(out)


def test_published_schemas_accept_every_current_layout_fixture_except_its_unknown_fields():
    """An editor using the served files flags exactly the fields the loader reports as unknown."""
    checked = 0
    for base in (FIXTURE_PLUGINS, Path(mf.__file__).resolve().parent / "builtin"):
        for root in sorted(p for p in base.iterdir() if (p / mf.PLUGIN_FILE).is_file()):
            manifest = plugin_manifest_load(root, expected_id=root.name)
            for path in [root / mf.PLUGIN_FILE, *sorted(root.glob("runtimes/*/RUNTIME.md"))]:
                rel = path.relative_to(root).as_posix()
                meta, _body, _issues = frontmatter_read(path, rel)
                if meta is None or is_legacy(meta):
                    continue  # old layouts are read through the translation, not the schema as written
                name = "plugin.json" if rel == mf.PLUGIN_FILE else "runtime.json"
                reported = sorted(i.field for i in manifest.issues if i.file == rel and i.code == "unknown-field")
                assert extra_keys(editor_validator(name).iter_errors(meta)) == reported, (root.name, rel)
                checked += 1
    assert checked > 50


# ---------------------------------------------------------------- GET /api/framework/schemas/{name}


@pytest.mark.parametrize("name", SCHEMA_NAMES)
def test_schema_endpoint_serves_the_file(client, name):
    response = client.get(f"/api/framework/schemas/{name}")
    assert response.status_code == 200
    assert response["Content-Type"] == "application/schema+json"
    assert response["Cache-Control"] == "no-cache"
    assert response.content == (SCHEMA_DIR / name).read_bytes()
    assert response.json()["$id"] == f"/api/framework/schemas/{name}"
    again = client.get(f"/api/framework/schemas/{name}", HTTP_IF_NONE_MATCH=response["ETag"])
    assert again.status_code == 304 and again.content == b"" and again["ETag"] == response["ETag"]


@pytest.mark.parametrize("name", ["nope.json", "PLUGIN.json", "plugin", "__init__.py", "..%2Fapi.py", "world.json.bak"])
def test_unknown_schema_is_a_404_envelope(client, name):
    response = client.get(f"/api/framework/schemas/{name}")
    assert response.status_code == 404
    body = response.json()
    assert body["code"] == "not_found" and isinstance(body["error"], str) and body["error"]


# ---------------------------------------------------------------- jsonschema errors → issues


def issues_of(instance, ref="plugin.json"):
    return [(i.severity, i.code, i.field) for i in schema_issues(instance, ref, file="PLUGIN.md")]


BASE = {"kind": "plugin", "description": "d"}


def test_unknown_fields_are_warnings_with_dotted_paths():
    assert issues_of({**BASE, "future": 1, "runtime": {"type": "agent", "schedule": {"stage": "audit", "foo": 1}}}) == [
        ("warning", "unknown-field", "future"),
        ("warning", "unknown-field", "runtime.schedule.foo"),
    ]


def test_missing_and_wrong_values_are_errors_in_document_order():
    assert issues_of({"kind": "addon", "runtime": {"schedule": {"trigger": {"type": "soon"}}}, "tags": ["a", 1]}) == [
        ("error", "invalid-field", "kind"),
        ("error", "invalid-field", "runtime.schedule.trigger.type"),
        ("error", "missing-field", "runtime.type"),
        ("error", "invalid-field", "tags"),
        ("error", "missing-field", "description"),
    ]


def test_messages_name_the_expected_values():
    by_field = {i.field: i.message for i in schema_issues(
        {"kind": "addon", "description": 3, "tags": "x", "runtime": {"type": "agent", "agent": {"loop": {"maxSteps": "2"}}}},
        "plugin.json", file="PLUGIN.md")}
    assert by_field["kind"] == "must be one of core, plugin; got 'addon'"
    assert by_field["description"] == "expected string or locale map, got int"
    assert by_field["tags"] == "expected list of strings, got string"
    assert by_field["runtime.agent.loop.maxSteps"] == "expected integer, got string"


@pytest.mark.parametrize("value", [7, {}, {"en": 1}, ["x"], None])
def test_a_wrong_text_value_is_one_issue(value):
    assert issues_of({**BASE, "displayName": value}) == [("error", "invalid-field", "displayName")]


def test_an_unknown_key_inside_a_wrongly_typed_value_is_not_reported():
    assert issues_of({**BASE, "runtime": {"type": "agent", "schedule": [{"foo": 1}]}}) == [
        ("error", "invalid-field", "runtime.schedule")]
    assert issues_of({**BASE, "runtime": {"type": "agent", "agent": {"llm": {"toolChoice": [{"zz": 1}]}}}}) == [
        ("error", "invalid-field", "runtime.agent.llm.toolChoice")]
    assert issues_of({**BASE, "provides": [{"contract": "a@1"}, 5]}) == [("error", "invalid-field", "provides.1")]


def test_an_object_where_a_record_is_allowed_reports_the_record_fields():
    """toolChoice may be a string or {name}: an object is checked as that record."""
    assert issues_of({**BASE, "runtime": {"type": "agent", "agent": {"llm": {"toolChoice": {"zz": 1}}}}}) == [
        ("warning", "unknown-field", "runtime.agent.llm.toolChoice.zz"),
        ("error", "missing-field", "runtime.agent.llm.toolChoice.name"),
    ]
    assert issues_of({**BASE, "provides": ["a@1", {"contract": 3, "x": True}]}) == [
        ("error", "invalid-field", "provides.1.contract"),
        ("warning", "unknown-field", "provides.1.x"),
    ]


def test_list_items_and_map_entries_that_are_records_are_fields_of_their_own():
    assert issues_of({**BASE, "contributes": {"commands": [{"name": "a", "description": "d", "action": "a"}, {"name": "b"}],
                                              "data": {"notes": 5}}}) == [
        ("error", "missing-field", "contributes.commands.1.description"),
        ("error", "missing-field", "contributes.commands.1.action"),
        ("error", "invalid-field", "contributes.data.notes"),
    ]


def test_integral_floats_are_not_integers():
    """JSON Schema would take 2.0 for an integer; the readers would then drop it silently."""
    assert issues_of({**BASE, "runtime": {"type": "agent", "agent": {"loop": {"maxSteps": 2.0, "timeoutMs": 2}}}}) == [
        ("error", "invalid-field", "runtime.agent.loop.maxSteps")]


def test_a_part_of_a_document_is_checked_against_a_definition_with_its_path():
    issues = schema_issues({"type": "agent", "soon": 1}, "runtime.json#/$defs/runtime", file="x.md", prefix="runtime")
    assert [(i.code, i.field, i.file) for i in issues] == [("unknown-field", "runtime.soon", "x.md")]


def test_unknown_schema_names_are_refused():
    with pytest.raises(KeyError):
        schema_issues({}, "../settings.json", file=None)
