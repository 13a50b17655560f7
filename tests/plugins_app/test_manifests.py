"""Plugin manifests, discovery and the registry: every upstream fixture manifest, our builtin
plugins, Python entries, and broken packages."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from plugins_app.discovery import BUILTIN_DIR
from plugins_app.manifests import plugin_manifest_load
from plugins_app.registry import HOST_ERROR, HOST_LOADED, registry_build
from plugins_app.validation import report_build
from tests.shared_paths import FIXTURES_DIR

FIXTURE_PLUGINS = FIXTURES_DIR / "upstream" / "plugins"
FIXTURE_IDS = sorted(p.name for p in FIXTURE_PLUGINS.iterdir() if p.is_dir())


def errs(issues):
    return [(i.code, i.file, i.field) for i in issues if i.severity == "error"]


# ---------------------------------------------------------------- upstream fixture manifests


@pytest.mark.parametrize("plugin_id", FIXTURE_IDS)
def test_every_fixture_manifest_parses_without_errors(plugin_id):
    manifest = plugin_manifest_load(FIXTURE_PLUGINS / plugin_id, expected_id=plugin_id)
    assert errs(manifest.issues) == []
    assert manifest.id == plugin_id
    assert manifest.description


EXPECTED_RUNTIMES = {
    "dice-check": ["dice-check/recorder", "dice-check/roller"],
    "world-init": ["world-init/dimension-clock", "world-init/dimension-context", "world-init/dimension-tracker",
                   "world-init/edit-dimensions", "world-init/schema-gen"],
    "narrator": ["narrator"],
    "cost-gate": [],
    "scene-stage": ["scene-stage/background-gen", "scene-stage/cast", "scene-stage/direction", "scene-stage/resolver", "scene-stage/seed"],
    "openai-image-gen": ["openai-image-gen/image-generator", "openai-image-gen/prompt-generator"],
    "scene-cast": ["scene-cast"],
}


@pytest.mark.parametrize("plugin_id,runtime_ids", sorted(EXPECTED_RUNTIMES.items()))
def test_fixture_runtime_ids(plugin_id, runtime_ids):
    assert plugin_manifest_load(FIXTURE_PLUGINS / plugin_id).runtime_ids == runtime_ids


def test_narrator_manifest_content():
    m = plugin_manifest_load(FIXTURE_PLUGINS / "narrator")
    assert m.kind == "core" and m.display_name == "Narrator"
    assert m.provides == [{"contract": "narrative-engine@1", "default": True}]
    assert m.conflicts == ["narrative-engine@1"]
    assert m.entry == "./server/index.js" and m.entry_language == "javascript"
    (runtime,) = m.runtimes
    assert runtime.runtime_type == "agent" and runtime.stage == "narrative" and runtime.trigger.type == "auto"
    assert runtime.visibility == "story" and runtime.output_contract == "narrative-engine@1"
    assert runtime.agent.tools.builtin == ("list-characters", "get-character", "memory-search", "emit-event")
    assert runtime.agent.tools.plugin == ("world-dimension-get", "world-dimension-list")
    assert runtime.agent.loop == {"timeoutMs": 240000, "callTimeoutMs": 120000}
    assert runtime.agent.advertise_events is True
    assert set(runtime.inputs) == {"worldTime", "storyEvent", "tabletopCheck", "npc-relationships", "check-results"}
    assert runtime.prompt.startswith("You are the Narrator")
    assert [s["key"] for s in m.contributes.settings] == ["narrativePerson"]
    assert [h["event"] for h in m.contributes.hooks] == ["PostContextAssembly", "PreLLMCall", "PostLLMResponse", "TurnStop"]


def test_dice_check_function_runtimes_and_commands():
    m = plugin_manifest_load(FIXTURE_PLUGINS / "dice-check")
    roller = next(r for r in m.runtimes if r.local_id == "roller")
    recorder = next(r for r in m.runtimes if r.local_id == "recorder")
    assert roller.runtime_type == "function" and roller.stage == "pre-turn"
    assert roller.trigger.type == "scheduled" and roller.trigger.interval == 1
    assert roller.function.handler == "./handler.js" and roller.directory == "runtimes/roller"
    assert recorder.trigger.type == "event" and recorder.trigger.topic == "check.resolved"
    assert recorder.inputs["dicePool"]["from"] == {"runtime": "dice-check/roller"}
    assert m.contributes.event_topics == ["check.resolved"]
    assert m.contributes.actions == ["roll"] and m.contributes.commands[0]["name"] == "roll"
    assert m.provided_contracts == ["action-check@1"]


def test_world_init_tools_and_agent_completion():
    m = plugin_manifest_load(FIXTURE_PLUGINS / "world-init")
    assert m.contributes.tools == ["set-world-schema", "set-world-dimensions", "initialize-world", "dimension-rule-get", "update-dimensions"]
    agents = [r for r in m.runtimes if r.agent is not None]
    assert agents, "world-init has agent runtimes"
    completions = [r.agent.completion for r in agents if r.agent.completion]
    assert any(c.get("require") == "tool-use" for c in completions)


def test_legacy_layout_is_translated_with_a_warning():
    m = plugin_manifest_load(FIXTURE_PLUGINS / "openai-image-gen")
    assert m.is_legacy_layout
    prompt_gen = next(r for r in m.runtimes if r.local_id == "prompt-generator")
    assert prompt_gen.runtime_type == "agent" and prompt_gen.is_background is True
    assert prompt_gen.trigger.type == "manual"
    assert prompt_gen.agent.completion == {"require": "tool-use", "afterTools": [
        "submit-openai-image-text-prompt", "submit-openai-image-structured-prompt"]}
    assert prompt_gen.agent.loop["maxSteps"] == 2
    assert prompt_gen.self_data[0]["namespace"] == "prompts"
    assert "submit-openai-image-text-prompt" in m.contributes.tools
    assert any(i.code == "legacy-layout" and i.severity == "warning" for i in m.issues)
    cast = plugin_manifest_load(FIXTURE_PLUGINS / "scene-cast")
    assert cast.runtimes[0].stage == "pre-turn" and cast.contributes.settings[0]["key"] == "activeSpeakerCount"


def test_registry_reports_javascript_entries_as_not_loadable_but_lists_them(tmp_path):
    registry = registry_build(builtin_dir=tmp_path / "none", community_dir=FIXTURE_PLUGINS)
    narrator = registry.get("narrator")
    assert narrator.host_state == HOST_ERROR
    assert narrator.error == "<plugin>/PLUGIN.md: entry ./server/index.js is not a Python module; it cannot run in this server"
    summary = narrator.summary()
    assert summary["runtimeCount"] == 1 and summary["runtimes"][0]["id"] == "narrator"
    assert summary["source"] == "community" and summary["provides"] == ["narrative-engine@1"]
    assert narrator.registrations.tools == {}
    # no entry, only agent runtimes: the declarative plugin is usable
    living = registry.get("living-world-rules")
    assert living.manifest.entry is None
    # no entry but JS function handlers: those runtimes are disabled, the plugin stays
    quest = registry.get("core-quest")
    assert quest.host_state == HOST_LOADED
    assert quest.manifest.runtimes == [] and {d["sourcePath"] for d in quest.summary()["disabledRuntimes"]} == {
        "runtimes/log/RUNTIME.md", "runtimes/vocabulary/RUNTIME.md"}
    states = {r.id: r.host_state for r in registry.all()}
    assert len(states) == len(FIXTURE_IDS)


# ---------------------------------------------------------------- our builtin plugins


def test_builtin_plugins_register_cleanly():
    registry = registry_build(builtin_dir=BUILTIN_DIR, community_dir=None)
    records = registry.all()
    assert len(records) >= 2
    for record in records:
        assert record.source == "builtin"
        assert record.host_state == HOST_LOADED, (record.id, record.error)
        assert errs(record.issues) == [], record.id
        contributes = record.manifest.contributes  # hook- or extension-only plugins (cost-gate, director) run no runtime
        assert record.manifest.runtimes or contributes.hooks or contributes.extensions, record.id


# ---------------------------------------------------------------- broken plugins


def write_plugin(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    return root


BASE = """
    ---
    id: demo
    kind: plugin
    description: Demo plugin.
    {extra}
    ---
    Body.
    """


def plugin_md(extra: str = "") -> str:
    return textwrap.dedent(BASE).replace("{extra}", textwrap.dedent(extra).strip().replace("\n", "\n"))


RUNTIME_OK = "---\ntype: agent\nschedule:\n  stage: post-turn\n  trigger: {type: auto}\n---\nPrompt.\n"

BROKEN_PLUGINS = [
    ("bad-yaml", {"PLUGIN.md": "---\nid: demo\nkind: [oops\n---\n"}, ("manifest-invalid", "PLUGIN.md", None), "package"),
    ("no-frontmatter", {"PLUGIN.md": "just text\n"}, ("manifest-invalid", "PLUGIN.md", None), "package"),
    ("missing-description", {"PLUGIN.md": "---\nid: demo\nkind: plugin\n---\n"}, ("missing-field", "PLUGIN.md", "description"), "package"),
    ("bad-kind", {"PLUGIN.md": "---\nid: demo\nkind: addon\ndescription: d\n---\n"}, ("invalid-field", "PLUGIN.md", "kind"), "package"),
    ("id-mismatch", {"PLUGIN.md": "---\nid: other\nkind: plugin\ndescription: d\n---\n"}, ("id-mismatch", "PLUGIN.md", "id"), "package"),
    ("tools-local", {"PLUGIN.md": "---\nid: demo\nkind: plugin\ndescription: d\nruntime:\n  type: agent\n  schedule: {stage: narrative, trigger: {type: auto}}\n  agent:\n    tools:\n      local: [x]\n---\n"},
     ("tools-local", "PLUGIN.md", "runtime.agent.tools.local"), "package"),
    ("duplicate-runtime", {"PLUGIN.md": "---\nid: demo\nkind: plugin\ndescription: d\n---\n", "runtimes/note/RUNTIME.md": RUNTIME_OK,
                           "runtimes/note/PLUGIN.md": "---\nname: demo/note\npluginType: plugin\nruntimeType: agent\nmodel: default\n---\n"},
     ("duplicate-runtime", "runtimes/note/PLUGIN.md", None), "package"),
    ("detached-stage", {"PLUGIN.md": "---\nid: demo\nkind: plugin\ndescription: d\n---\n",
                        "runtimes/late/RUNTIME.md": "---\ntype: agent\nschedule:\n  stage: narrative\n  trigger: {type: auto}\n  completion: {mode: detached}\n---\n"},
     ("detached-stage", "runtimes/late/RUNTIME.md", "schedule.stage"), "runtime"),
    ("background-suspend", {"PLUGIN.md": "---\nid: demo\nkind: plugin\ndescription: d\n---\n",
                            "runtimes/bg/RUNTIME.md": "---\ntype: agent\nschedule:\n  trigger: {type: manual}\n  background: true\nagent:\n  tools: {builtin: [suspend]}\n---\n"},
     ("background-suspend", "runtimes/bg/RUNTIME.md", "agent.tools.builtin"), "runtime"),
    ("dataset-undeclared", {"PLUGIN.md": "---\nid: demo\nkind: plugin\ndescription: d\n---\n",
                            "runtimes/a/RUNTIME.md": "---\ntype: agent\nschedule: {stage: post-turn, trigger: {type: auto}}\nagent:\n  tools: {datasets: [npcs]}\n---\n"},
     ("dataset-reference", "runtimes/a/RUNTIME.md", "agent.tools.datasets.0"), "runtime"),
    ("dataset-shadow", {"PLUGIN.md": "---\nid: demo\nkind: plugin\ndescription: d\ncontributes:\n  datasets:\n    world-dimension: {schema: {type: object}}\n---\n",
                        "runtimes/a/RUNTIME.md": "---\ntype: agent\nschedule: {stage: post-turn, trigger: {type: auto}}\nagent:\n  tools: {datasets: [world-dimension]}\n---\n"},
     ("dataset-reference", "runtimes/a/RUNTIME.md", "agent.tools.datasets.0"), "runtime"),
    ("event-without-topic", {"PLUGIN.md": "---\nid: demo\nkind: plugin\ndescription: d\n---\n",
                             "runtimes/e/RUNTIME.md": "---\ntype: function\nschedule: {trigger: {type: event}}\nfunction: {handler: ./h.py}\n---\n"},
     ("missing-field", "runtimes/e/RUNTIME.md", "schedule.trigger.topic"), "runtime"),
    ("command-action", {"PLUGIN.md": "---\nid: demo\nkind: plugin\ndescription: d\ncontributes:\n  commands:\n    - {name: roll, description: Roll, action: roll}\n---\n"},
     ("command-action", "PLUGIN.md", "contributes.commands.0.action"), "package"),
    ("service-import-twice", {"PLUGIN.md": "---\nid: demo\nkind: plugin\ndescription: d\n---\n",
                              "runtimes/s/RUNTIME.md": "---\ntype: agent\nschedule: {stage: post-turn, trigger: {type: auto}}\nagent:\n  tools:\n    services: [inventory.items@1, {contract: inventory.items@1, as: bag}]\n---\n"},
     ("service-import", "runtimes/s/RUNTIME.md", "agent.tools.services.1"), "runtime"),
    ("entry-outside", {"PLUGIN.md": "---\nid: demo\nkind: plugin\ndescription: d\nentry: ../../evil.py\n---\n"},
     ("path-outside-package", "PLUGIN.md", "entry"), "package"),
    ("reserved-namespace", {"PLUGIN.md": "---\nid: demo\nkind: plugin\ndescription: d\ncontributes:\n  data:\n    _logs: {schema: ./x.json}\n---\n"},
     ("invalid-field", "PLUGIN.md", "contributes.data._logs"), "package"),
]


@pytest.mark.parametrize("name,files,expected,scope", BROKEN_PLUGINS, ids=[b[0] for b in BROKEN_PLUGINS])
def test_broken_plugin_yields_precise_issue_and_registers_nothing(tmp_path, name, files, expected, scope):
    write_plugin(tmp_path / "demo", files)
    registry = registry_build(builtin_dir=tmp_path, community_dir=None)
    record = registry.get("demo")
    assert expected in errs(record.issues)
    if scope == "package":
        assert record.host_state == HOST_ERROR
        assert record.registrations.tools == {} and record.registrations.rpcs == {}
    else:  # the broken runtime is dropped, the package stays
        assert expected[1] in {d["sourcePath"] for d in record.summary()["disabledRuntimes"]}
        assert all(r.source_path != expected[1] for r in record.manifest.runtimes)
    report = report_build(kind="plugin", package_id=record.id, issues=record.issues).as_dict()
    assert report["ok"] is False and report["issues"][0]["severity"] == "error"


def test_unknown_fields_are_warnings_with_file_and_field(tmp_path):
    write_plugin(tmp_path / "demo", {"PLUGIN.md": "---\nid: demo\nkind: plugin\ndescription: d\nfuture: 1\n---\n",
                                      "runtimes/a/RUNTIME.md": "---\ntype: agent\nschedule: {stage: audit, trigger: {type: auto}, soon: 1}\n---\n"})
    record = registry_build(builtin_dir=tmp_path, community_dir=None).get("demo")
    assert record.host_state == HOST_LOADED
    assert record.summary()["ignoredFields"] == [
        {"sourcePath": "PLUGIN.md", "field": "future", "message": "unknown field"},
        {"sourcePath": "runtimes/a/RUNTIME.md", "field": "schedule.soon", "message": "unknown field"},
    ]
    report = report_build(kind="plugin", package_id="demo", issues=record.issues).as_dict()
    assert report["ok"] is True and report["counts"] == {"errors": 0, "warnings": 2}


# ---------------------------------------------------------------- Python entries


ENTRY_PLUGIN = "---\nid: demo\nkind: plugin\ndescription: d\nentry: ./server/entry.py\ncontributes:\n  tools: [lookup-note]\n  actions: [ping]\n  forms: [check-name]\n  services: [demo.notes@1]\n  hooks:\n    - {event: TurnStart}\nruntime:\n  type: agent\n  schedule: {stage: post-turn, trigger: {type: auto}}\n  agent:\n    tools: {plugin: [lookup-note]}\n---\nPrompt.\n"
ENTRY_OK = '''
from .helpers import lookup

def register(api):
    api.register_tool("lookup-note", lookup, description="Read one note.")
    api.register_rpc("ping", lambda ctx, payload: {"pong": True})
    api.register_form_validator("check-name", lambda values: [])
    api.register_service("demo.notes@1", {"read": lookup})
    api.register_hook("TurnStart", lambda event: None)
'''


def test_python_entry_registers_everything_declared(tmp_path):
    write_plugin(tmp_path / "demo", {"PLUGIN.md": ENTRY_PLUGIN, "server/entry.py": ENTRY_OK,
                                      "server/helpers.py": "def lookup(args, ctx=None):\n    return {'key': args['key']}\n"})
    registry = registry_build(builtin_dir=tmp_path, community_dir=None)
    record = registry.get("demo")
    assert record.host_state == HOST_LOADED, record.error
    tool = registry.tool("demo", "lookup-note")
    assert tool.target({"key": "k"}) == {"key": "k"} and tool.options["description"] == "Read one note."
    assert set(record.registrations.rpcs) == {"ping"}
    assert set(record.registrations.form_validators) == {"check-name"}
    assert [r.plugin_id for r in registry.service_providers("demo.notes@1")] == ["demo"]
    assert list(record.registrations.hooks) == ["TurnStart"]


@pytest.mark.parametrize("entry,code", [
    (ENTRY_OK.replace('"lookup-note", lookup', '"other-tool", lookup'), "registration-undeclared"),
    (ENTRY_OK.replace('    api.register_rpc("ping", lambda ctx, payload: {"pong": True})\n', ""), "contribution-not-implemented"),
    (ENTRY_OK + "    raise RuntimeError('boom')\n", "entry-failed"),
    ("def register(api):\n    api.register_tool('lookup-note', 'not callable')\n", "registration-undeclared"),
    ("x = (\n", "entry-failed"),
    ("REGISTER = 1\n", "entry-failed"),
])
def test_failing_entry_leaves_nothing_half_registered(tmp_path, entry, code):
    write_plugin(tmp_path / "demo", {"PLUGIN.md": ENTRY_PLUGIN, "server/entry.py": entry,
                                      "server/helpers.py": "def lookup(args, ctx=None):\n    return args\n"})
    registry = registry_build(builtin_dir=tmp_path, community_dir=None)
    record = registry.get("demo")
    assert record.host_state == HOST_ERROR
    assert code in [i.code for i in record.issues if i.severity == "error"]
    assert registry.tool("demo", "lookup-note") is None
    assert record.registrations.rpcs == {} and record.registrations.services == {} and record.registrations.hooks == {}
    assert registry.service_providers("demo.notes@1") == []


def test_community_id_mismatch_and_builtin_shadowing(tmp_path):
    write_plugin(tmp_path / "builtin" / "demo", {"PLUGIN.md": "---\nid: demo\nkind: plugin\ndescription: d\n---\n"})
    write_plugin(tmp_path / "home" / "plugins" / "demo", {"PLUGIN.md": "---\nid: demo\nkind: plugin\ndescription: fake\n---\n"})
    write_plugin(tmp_path / "home" / "plugins" / "mine", {"PLUGIN.md": "---\nid: yours\nkind: plugin\ndescription: d\n---\n"})
    registry = registry_build(builtin_dir=tmp_path / "builtin", community_dir=tmp_path / "home" / "plugins")
    assert registry.get("demo").source == "builtin" and registry.get("demo").manifest.description == "d"
    assert [p.id for p in registry.shadowed] == ["demo"]
    mine = registry.get("mine")
    assert mine.host_state == HOST_ERROR and mine.source == "community"
    assert mine.error == "<plugin>/PLUGIN.md: PLUGIN.md declares id 'yours' but the package folder is 'mine'"
