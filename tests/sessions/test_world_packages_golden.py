"""Golden issues: the schema-based world loader reports what the hand-written checks reported.

`data/world_golden.json` was written by the world loader as it was before world.yaml and the world
data descriptor were validated by the published JSON Schema (plugins_app/schemas/world.json).
Per case it holds the issues as `[file, field, code, severity]` (messages are free to change).
The cases are:

- `pkg:<group>/<id>`: every world package in the repository or in ../shared/fixtures (upstream
  fixtures, sessions/worlds, tests/sessions/worlds), loaded in place, with the WorldRecord it
  yields (so the split of the loader cannot change what loads);
- `st:<file>`: every SillyTavern fixture converted into a world package (spec 004 st-import);
- `broken:<name>`: the broken packages of tests/sessions/test_world_packages.py;
- `mut:<file kind>:<path>:<variant>`: a small copy of one fixture world.yaml or data/world.data.yaml
  (the path to one field and its scalar neighbours) with that field replaced by a value of another
  shape, deleted or given an unknown key.

A few mutation results changed on purpose, where the old hand-written checks did not follow the
one mapping every schema error now gets (required → missing-field, any other violation →
invalid-field) or reported a field under another name. `CHANGES` lists each rule with its
reason; the test applies them to the old results and then expects equality.

The data file was produced by `golden_compute` below, run with world_package_load as of commit
f9b5e30 (the hand-written checks), before any loader change, so it shows the schema-based loader
reports what that one did. When a world in the repository changes on purpose later, rewrite the
file with `python -m tests.sessions.test_world_packages_golden` and review the diff of the data
(the CHANGES rules then match nothing and go).
"""
from __future__ import annotations

import copy
import fnmatch
import hashlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.golden_support import paths as _paths, spine as _spine, variants as _variants
from tests.shared_paths import FIXTURES_DIR

REPO_ROOT = Path(__file__).resolve().parents[2]
GOLDEN_FILE = Path(__file__).resolve().parent / "data" / "world_golden.json"

WORLD_GROUPS = {
    "upstream": FIXTURES_DIR / "upstream" / "worlds",
    "builtin": REPO_ROOT / "sessions" / "worlds",
    "tests": REPO_ROOT / "tests" / "sessions" / "worlds",
}
ST_FILES = sorted([*(FIXTURES_DIR / "sillytavern" / "cards").iterdir(), *(FIXTURES_DIR / "sillytavern" / "worldinfo").iterdir()])

VARIANTS: dict[str, Any] = {
    "int": 7, "float": 2.0, "str": "zz", "bool": True, "null": None,
    "list": [7], "strlist": ["zz"], "obj": {"zq": 7}, "emptyobj": {},
}
UNKNOWN_KEY = "zzUnknown"
DESCRIPTOR = "data/world.data.yaml"
# Objects keyed by a name the package picks: their entries are folded like list items.
MAP_FIELDS = {("sources",), ("dimensions",), ("pluginSettings",), ("dimensionSources",)}


def world_dirs() -> Iterator[tuple[str, Path]]:
    for group, base in WORLD_GROUPS.items():
        for child in sorted(base.iterdir(), key=lambda p: p.name):
            if child.is_dir() and (child / "world.yaml").is_file():
                yield f"{group}/{child.name}", child


def _fold(path: tuple) -> tuple:
    out: list[Any] = []
    for step in path:
        out.append("[]" if isinstance(step, int) else "*" if tuple(out) in MAP_FIELDS else step)
    return tuple(out)


def _mutations(doc: Any) -> Iterator[tuple[tuple, str, dict[str, Any]]]:
    """(path, variant, mutated small copy) for every value of `doc` and every object in it."""
    for path in [(), *_paths(doc)]:
        target = doc
        for step in path:
            target = target[step]
        small, at = _spine(doc, path)
        if isinstance(target, dict):
            mutated = copy.deepcopy(small)
            node = mutated
            for step in at:
                node = node[step]
            node[UNKNOWN_KEY] = 1
            yield path, "unknown", mutated
        if not path:
            continue
        for variant in [*_variants(target), *(["del"] if isinstance(path[-1], str) else [])]:
            mutated = copy.deepcopy(small)
            parent = mutated
            for step in at[:-1]:
                parent = parent[step]
            if variant == "del":
                del parent[at[-1]]
            else:
                parent[at[-1]] = copy.deepcopy(VARIANTS[variant])
            yield path, variant, mutated


def _yaml(doc: Any) -> str:
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=1000)


def mutation_cases() -> Iterator[tuple[str, dict[str, str]]]:
    """(case name, {rel: text}), each (file kind, folded field path, variant) once.


    world.yaml mutations are loaded with a WORLD.md only (a `worldData` they keep is then
    `file-missing`); descriptor mutations beside a minimal world.yaml pointing at them.
    """
    from covel.yamlio import yaml_load

    seen: set[tuple[str, tuple, str]] = set()
    for _group, root in world_dirs():
        manifest = yaml_load((root / "world.yaml").read_text(encoding="utf-8"))
        descriptor_text = (root / DESCRIPTOR).read_text(encoding="utf-8") if (root / DESCRIPTOR).is_file() else None
        docs: list[tuple[str, Any]] = [("world", manifest)]
        if descriptor_text is not None:
            docs.append(("descriptor", yaml_load(descriptor_text)))
        for kind, doc in docs:
            for path, variant, mutated in _mutations(doc):
                key = (kind, _fold(path), variant)
                if key in seen:
                    continue
                seen.add(key)
                dotted = ".".join(str(step) for step in key[1]) or "(root)"
                if kind == "world":
                    files = {"world.yaml": _yaml(mutated), "WORLD.md": "# World\n"}
                else:
                    files = {"world.yaml": MINIMAL_WORLD + f"worldData: {DESCRIPTOR}\n", "WORLD.md": "# World\n",
                             DESCRIPTOR: _yaml(mutated)}
                yield f"mut:{kind}:{dotted}:{variant}", files


MINIMAL_WORLD = 'schemaVersion: "1.0"\nid: tiny\nname: Tiny\nsummary: A tiny world.\ndefaultLocale: en-US\n'


def broken_cases() -> Iterator[tuple[str, dict[str, str | None]]]:
    from tests.sessions.test_world_packages import BROKEN_WORLDS, MINIMAL

    for name, files, _expected in BROKEN_WORLDS:
        yield f"broken:{name}", {**MINIMAL, **files}


def st_cases() -> Iterator[tuple[str, dict[str, bytes]]]:
    try:
        from sessions.st_import import st_convert
    except ImportError:  # before the module moved out of plugins_app
        from plugins_app.st_import import st_convert
    for path in ST_FILES:
        conversion = st_convert([(path.name, path.read_bytes())], locale="en-US")
        yield f"st:{path.name}", conversion.package_files("st-world")


def write_files(root: Path, files: dict[str, Any]) -> Path:
    import textwrap

    for rel, content in files.items():
        if content is None:
            continue
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(textwrap.dedent(content).lstrip(), encoding="utf-8")  # as test_world_packages.write
    return root


def world_result(world: Any, *, full: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"issues": [[i.file, i.field, i.code, i.severity] for i in world.issues]}
    if full:
        out["record"] = hashlib.sha256(json.dumps(world.record(), default=str, sort_keys=True, ensure_ascii=False).encode()).hexdigest()
    return out


def golden_compute(load: Callable[..., Any], tmp: Path) -> dict[str, Any]:
    """Run every case through `load` (a world_package_load) and collect the results."""
    results: dict[str, Any] = {}
    for name, root in world_dirs():
        results[f"pkg:{name}"] = world_result(load(root, expected_id=root.name), full=True)
    for index, (name, files) in enumerate(st_cases()):
        root = write_files(tmp / f"s{index}" / "st-world", files)
        results[name] = world_result(load(root, expected_id="st-world"), full=True)
    cases = [*broken_cases(), *mutation_cases()]
    for index, (name, files) in enumerate(cases):
        root = write_files(tmp / f"c{index}" / "tiny", files)
        try:
            results[name] = world_result(load(root), full=False)
        except Exception as exc:  # the old loader had a few; recorded, not hidden
            results[name] = {"crash": type(exc).__name__}
    return results


# ---------------------------------------------------------------- the tests


@pytest.fixture(scope="module")
def golden() -> dict[str, Any]:
    return json.loads(GOLDEN_FILE.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def current(tmp_path_factory) -> dict[str, Any]:
    from sessions.world_packages import world_package_load

    return golden_compute(world_package_load, tmp_path_factory.mktemp("golden"))


def test_golden_covers_the_same_cases(golden, current):
    assert sorted(current) == sorted(golden)


def test_world_packages_and_imports_load_exactly_as_before(golden, current):
    differing = [name for name in golden if name.startswith(("pkg:", "st:")) and current[name] != golden[name]]
    assert differing == [], {name: (golden[name]["issues"], current[name]["issues"]) for name in differing[:3]}


# (case names, old issue: (field, code), new issue: (field or None = same, code) or None = gone,
#  extra issue the new loader may add: (field, code) or None, reason). Names and fields are globs.
CHANGES: list[tuple[tuple[str, ...], tuple[str, str] | None, tuple[str | None, str] | None, tuple[str, str] | None, str]] = [
    (("mut:descriptor:sources.*.path:[!d]*",),
     ("sources.*.path", "missing-field"), (None, "invalid-field"), None,
     "a value that is present but of the wrong type is invalid-field (schema `type`), not missing-field"),
    (("mut:world:characterSchema.attributes.[].id:[!d]*", "mut:world:characterAttributes.[].id:[!d]*"),
     ("characterSchema.attributes.*.id", "missing-field"), (None, "invalid-field"), None,
     "a value that is present but of the wrong type is invalid-field (schema `type`), not missing-field"),
    (("mut:world:characterSchema.attributes:[!d]*",),
     ("characterSchema.attributes", "missing-field"), (None, "invalid-field"), None,
     "a value that is present but of the wrong type is invalid-field (schema `type`), not missing-field"),
    (("mut:descriptor:sources.*.kind:del", "mut:descriptor:sources.*:emptyobj", "mut:world:characterSchema.attributes.[].type:del",
      "mut:world:characterSchema.attributes.[]:emptyobj", "mut:world:characterAttributes.[].type:del", "mut:world:characterAttributes.[]:emptyobj"),
     ("*.kind", "invalid-field"), (None, "missing-field"), None,
     "an absent required enum field is missing-field (schema `required`), not invalid-field"),
    (("mut:world:characterSchema.attributes.[].type:del", "mut:world:characterSchema.attributes.[]:emptyobj",
      "mut:world:characterAttributes.[].type:del", "mut:world:characterAttributes.[]:emptyobj"),
     ("*.type", "invalid-field"), (None, "missing-field"), None,
     "an absent required enum field is missing-field (schema `required`), not invalid-field"),
    (("mut:descriptor:sources.*.to:del", "mut:descriptor:sources.*:emptyobj"),
     ("*.to", "source-target-invalid"), (None, "missing-field"), None,
     "an absent `to` is missing-field; source-target-invalid is for a target string of unknown syntax"),
    (("mut:descriptor:sources.*.to:[!d]*",),
     ("*.to", "source-target-invalid"), (None, "invalid-field"), None,
     "a `to` that is not a string is invalid-field; source-target-invalid is for a target string of unknown syntax"),
    (("mut:descriptor:sources.*.visibility:*",),
     None, None, ("sources.*.visibility", "invalid-field"),
     "visibility is checked on every source, also on one left out for another error"),
    (("mut:world:pluginPolicy.preferTags*",),
     ("pluginPolicy.preferredTags", "invalid-field"), ("pluginPolicy.preferTags", "invalid-field"), None,
     "a legacy pluginPolicy key of the wrong type is reported under the key as written"),
    (("mut:world:pluginPolicy.avoidTags*",),
     ("pluginPolicy.avoidedTags", "invalid-field"), ("pluginPolicy.avoidTags", "invalid-field"), None,
     "a legacy pluginPolicy key of the wrong type is reported under the key as written"),
    (("mut:world:pluginPolicy.packs.[].id:del", "mut:world:pluginPolicy.packs.[]:emptyobj"),
     ("pluginPolicy.packs.0", "invalid-field"), ("pluginPolicy.packs.0.id", "missing-field"), None,
     "a pack without id is missing-field at its id"),
    (("mut:world:pluginPolicy.packs.[].id:[!d]*",),
     ("pluginPolicy.packs.0", "invalid-field"), ("pluginPolicy.packs.0.id", "invalid-field"), None,
     "a pack id of the wrong type is invalid-field at the id"),
    (("mut:world:supportedLocales:int", "mut:world:supportedLocales:str", "mut:world:supportedLocales:obj"),
     ("supportedLocales.*", "invalid-field"), None, ("supportedLocales", "invalid-field"),
     "supportedLocales that is not a list is one invalid-field on the list (a string was checked letter by letter)"),
    (("mut:world:pluginPolicy.packs:int", "mut:world:pluginPolicy.packs:str", "mut:world:pluginPolicy.packs:obj"),
     None, None, ("pluginPolicy.packs", "invalid-field"),
     "packs that is not a list is invalid-field (it was ignored, or crashed the loader)"),
]


def _name_matches(name: str, patterns: tuple[str, ...]) -> bool:
    # `[]` in a case name is a folded list index, not a glob character class.
    return any(fnmatch.fnmatchcase(name, pattern.replace("[]", "[[][]]")) for pattern in patterns)


def _expected(name: str, old: list[list[Any]], new: list[list[Any]], changes=CHANGES) -> list[list[Any]]:
    """The old issues of case `name` with the `changes` that apply to it, plus the new issues a
    change allows to be added."""
    expected = [list(issue) for issue in old]
    extras: list[tuple[str, str]] = []
    for names, before, after, extra, _reason in changes:
        if not _name_matches(name, names):
            continue
        if before is not None:
            kept = []
            for file, field, code, severity in expected:
                if field is not None and fnmatch.fnmatchcase(field, before[0]) and code == before[1]:
                    if after is not None:
                        kept.append([file, after[0] or field, after[1], severity])
                else:
                    kept.append([file, field, code, severity])
            expected = kept
        if extra is not None:
            extras.append(extra)
    for issue in new:
        if issue not in expected and any(issue[1] is not None and fnmatch.fnmatchcase(issue[1], f) and issue[2] == c for f, c in extras):
            expected.append(list(issue))
    return expected


def _issue_multiset(issues: list[list[Any]]) -> list[list[Any]]:
    return sorted(issues, key=lambda i: json.dumps(i))


def test_broken_and_mutated_worlds_report_the_same_issues(golden, current):
    """Same issues (in any order) as before, up to the CHANGES."""
    differing = {}
    for name, before in golden.items():
        if name.startswith(("pkg:", "st:")) or "crash" in before:
            continue
        expected = _expected(name, before["issues"], current[name]["issues"])
        if _issue_multiset(current[name]["issues"]) != _issue_multiset(expected):
            differing[name] = {"expected": expected, "after": current[name]["issues"]}
    assert not differing, json.dumps(dict(list(differing.items())[:5]), indent=1)


def test_every_change_is_used(golden, current):
    """A CHANGES rule that changes no case's expected issues any more is stale."""
    for change in CHANGES:
        assert any(
            _issue_multiset(_expected(name, before["issues"], current[name]["issues"], [change])) != _issue_multiset(before["issues"])
            for name, before in golden.items() if "issues" in before and _name_matches(name, change[0])
        ), change[-1]


def test_inputs_the_old_loader_crashed_on_now_report_an_error(golden, current):
    for name, expected in golden.items():
        if "crash" in expected:
            assert "crash" not in current[name], name
            assert any(issue[3] == "error" for issue in current[name]["issues"]), name


def golden_write(results: dict[str, Any], path: Path = GOLDEN_FILE) -> None:
    """One case per line, so a change to the data reads as a diff of the cases it touches."""
    lines = [json.dumps(name, ensure_ascii=False) + ": " + json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
             for name, value in sorted(results.items())]
    path.write_text("{\n" + ",\n".join(lines) + "\n}\n", encoding="utf-8")


if __name__ == "__main__":  # rewrite the data with the current loader (see the module docstring)
    import os
    import tempfile

    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "covel.settings.test")
    django.setup()
    from sessions.world_packages import world_package_load as load

    with tempfile.TemporaryDirectory() as tmp:
        golden_write(golden_compute(load, Path(tmp)))
