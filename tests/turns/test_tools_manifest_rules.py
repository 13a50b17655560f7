"""Manifest rules of issue 19 and the toolkit pieces they share with the engine: search-tools is
never declared by hand, `advertise` and inline/file event schemas are accepted (an unusable schema
is an error), one reserved-name table, whole-string stray-} repair, COVEL_INSTRUCTION_LOCALE
(spec 000 §search-tools, §emit-event, §注解与超时, §模型写错的参数 JSON, §统一返回格式与错误码)."""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from plugins_app.manifests import BUILTIN_TOOLS, plugin_manifest_load
from plugins_app.toolkit.locale import EN_US, ZH_CN, instruction_locale_for
from plugins_app.toolkit.names import FRAMEWORK_TOOL_NAMES
from plugins_app.toolkit.repair import ArgumentJsonError, parse_arguments_json
from turns.engine.tools import default_registry
from turns.engine.tools.registry import FRAMEWORK_TOOL_NAMES as REGISTRY_NAMES


def _package(root: Path, frontmatter: str, files: dict[str, str] | None = None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "PLUGIN.md").write_text("---\n" + textwrap.dedent(frontmatter).strip() + "\n---\nBody.\n", encoding="utf-8")
    for rel, text in (files or {}).items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def _issues(manifest):
    return [(i.severity, i.code, i.field) for i in manifest.issues]


AGENT = """
id: demo
kind: plugin
description: A demo.
runtime:
  type: agent
  schedule: {stage: post-turn, trigger: {type: auto}}
  io: {visibility: system}
  agent:
    tools:
      builtin: %s
      defer: %s
"""


def test_search_tools_listed_by_hand_is_an_error(tmp_path):
    manifest = plugin_manifest_load(_package(tmp_path / "demo", AGENT % ("[emit-event, search-tools]", "true")))
    assert ("error", "tool-reference", "runtime.agent.tools.builtin.1") in _issues(manifest)


def test_deferring_search_tools_is_an_error_and_an_unlisted_deferred_name_a_warning(tmp_path):
    manifest = plugin_manifest_load(_package(tmp_path / "demo", AGENT % ("[emit-event]", "[search-tools, emit-event, nope]")))
    issues = _issues(manifest)
    assert ("error", "tool-reference", "runtime.agent.tools.defer.0") in issues
    assert ("warning", "tool-reference", "runtime.agent.tools.defer.2") in issues
    assert not any(f == "runtime.agent.tools.defer.1" for _, _, f in issues)


def test_advertise_and_inline_or_file_schemas_are_accepted(tmp_path):
    root = _package(tmp_path / "demo", """
        id: demo
        kind: plugin
        description: A demo.
        contributes:
          events:
            - topic: a.inline
              schema: {type: object, required: [x]}
            - topic: a.file
              schema: ./schemas/a.json
            - topic: a.internal
              advertise: false
        """, {"schemas/a.json": json.dumps({"type": "object"})})
    manifest = plugin_manifest_load(root)
    assert [i for i in manifest.issues if i.severity != "info"] == []
    assert manifest.contributes.events[2]["advertise"] is False


@pytest.mark.parametrize("schema, files, code", [
    ("../outside.json", {}, "path-outside-package"),
    ("./schemas/bad.json", {"schemas/bad.json": "{not json"}, "file-invalid"),
    ("{type: 7}", {}, "invalid-field"),
])
def test_an_unusable_event_schema_is_an_error(tmp_path, schema, files, code):
    root = _package(tmp_path / "demo", f"""
        id: demo
        kind: plugin
        description: A demo.
        contributes:
          events:
            - topic: a.bad
              schema: {schema}
        """, files)
    manifest = plugin_manifest_load(root)
    assert ("error", code, "contributes.events.0.schema") in _issues(manifest)


def test_one_reserved_name_table():
    # the manifest checks, the registry and the builtin registry all read the toolkit's table
    assert set(BUILTIN_TOOLS) == FRAMEWORK_TOOL_NAMES and REGISTRY_NAMES is FRAMEWORK_TOOL_NAMES
    registered = set(default_registry().builtin_names())
    # every registered builtin is reserved; the reserved names nobody registers are the loop's own
    assert registered <= FRAMEWORK_TOOL_NAMES
    assert FRAMEWORK_TOOL_NAMES - registered <= {"search-tools", "delegate"}


def test_stray_closer_is_repaired_in_the_whole_argument_text_and_inside_a_field():
    assert parse_arguments_json('{"updates":[{"id":"a"},{"id":"b"}}]}').value == {"updates": [{"id": "a"}, {"id": "b"}]}
    assert parse_arguments_json('[{"id":"a"},{"id":"b"}}]', inside_field=True).value == [{"id": "a"}, {"id": "b"}]
    # a closer of the wrong kind in the middle is not this rule's case
    with pytest.raises(ArgumentJsonError):
        parse_arguments_json('{"a":[1,2},"b":3}')


@pytest.mark.parametrize("forced, session, expected", [
    (None, "zh-CN", ZH_CN), (None, "en-US", EN_US), ("auto", "zh-TW", ZH_CN),
    ("en", "zh-CN", EN_US), ("zh-CN", "en-US", ZH_CN), ("zh_Hans", "fr", ZH_CN),
])
def test_instruction_locale_env(monkeypatch, forced, session, expected):
    if forced is None:
        monkeypatch.delenv("COVEL_INSTRUCTION_LOCALE", raising=False)
    else:
        monkeypatch.setenv("COVEL_INSTRUCTION_LOCALE", forced)
    assert instruction_locale_for(session) == expected
