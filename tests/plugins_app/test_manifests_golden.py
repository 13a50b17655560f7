"""Golden issues: the schema-based plugin loader reports what the hand-written checker reported.

`data/manifest_golden.json` was written by the loader as it was before manifests were validated by
the published JSON Schemas (plugins_app/schemas/*.json). It holds, per case, the issues as
`[file, field, code, severity]` (messages are free to change) plus the runtimes that loaded and
the ones that were disabled. The cases are:

- `pkg:<group>/<id>`: every plugin package kept in the repository or in ../shared/fixtures
  (upstream fixtures, plugins_app/builtin, tests/sessions/plugins), loaded in place;
- `broken:<name>`: the broken packages of tests/plugins_app/test_manifests.py;
- `mut:<file kind>:<path>:<variant>`: a small copy of one fixture manifest (the path to one field
  and its scalar neighbours) with that field replaced by a value of another shape, deleted, or
  given an unknown key (see `mutation_cases`). These pin the type, enum, required and
  unknown-field rules of every declared field, not only the ones the fixtures happen to get wrong.

A case the old loader crashed on is stored as `{"crash": "<exception>"}`; the new loader must
not crash there (and must report an error instead).

The data file was produced by `golden_compute` below, run with plugin_manifest_load as of commit
f9b5e30 (the hand-written checker), before any loader change, so it shows the schema-based loader
reports what that one did. When a package in the repository changes on purpose later, rewrite the
file with `python -m tests.plugins_app.test_manifests_golden` and review the diff of the data.
"""
from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.golden_support import paths as _paths, spine as _spine, variants as _variants
from tests.shared_paths import FIXTURES_DIR

REPO_ROOT = Path(__file__).resolve().parents[2]
GOLDEN_FILE = Path(__file__).resolve().parent / "data" / "manifest_golden.json"

PACKAGE_GROUPS = {
    "upstream": FIXTURES_DIR / "upstream" / "plugins",
    "builtin": REPO_ROOT / "plugins_app" / "builtin",
    "tests": REPO_ROOT / "tests" / "sessions" / "plugins",
}

# Replacement values: one of each YAML shape, so every declared type is crossed with every other.
VARIANTS: dict[str, Any] = {
    "int": 7, "float": 2.0, "str": "zz", "bool": True, "null": None,
    "list": [7], "strlist": ["zz"], "obj": {"zq": 7}, "emptyobj": {},
}
UNKNOWN_KEY = "zzUnknown"
# Objects keyed by a name the package picks: their entries are folded like list items.
MAP_FIELDS = {
    ("contracts",), ("contributes", "data"), ("contributes", "datasets"), ("contributes", "worldProjections"),
    ("io", "inputs"), ("runtime", "io", "inputs"),
}


def package_dirs() -> Iterator[tuple[str, Path]]:
    for group, base in PACKAGE_GROUPS.items():
        for child in sorted(base.iterdir(), key=lambda p: p.name):
            if child.is_dir() and (child / "PLUGIN.md").is_file():
                yield f"{group}/{child.name}", child


def _manifest_files(root: Path) -> list[tuple[str, str]]:
    """(rel, file kind) of PLUGIN.md and every runtimes/<rid>/RUNTIME.md|PLUGIN.md."""
    out = [("PLUGIN.md", "plugin")]
    runtimes = root / "runtimes"
    if runtimes.is_dir():
        for child in sorted(runtimes.iterdir(), key=lambda p: p.name):
            for name, kind in (("RUNTIME.md", "runtime"), ("PLUGIN.md", "legacy-runtime")):
                if (child / name).is_file():
                    out.append((f"runtimes/{child.name}/{name}", kind))
    return out


def _frontmatter(path: Path) -> dict[str, Any] | None:
    from plugins_app.manifests import frontmatter_read

    meta, _body, _issues = frontmatter_read(path, path.name)
    return meta


def _mutations(meta: dict[str, Any]) -> Iterator[tuple[tuple, str, dict[str, Any]]]:
    """(path, variant, mutated small copy) for every value of `meta` and every object in it."""
    for path in [(), *_paths(meta)]:
        target = meta
        for step in path:
            target = target[step]
        small, at = _spine(meta, path)
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


def _dump(meta: dict[str, Any]) -> str:
    return "---\n" + yaml.safe_dump(meta, sort_keys=False, allow_unicode=True, width=1000) + "---\nBody.\n"


def _fold(path: tuple) -> tuple:
    out: list[Any] = []
    for step in path:
        out.append("[]" if isinstance(step, int) else "*" if tuple(out) in MAP_FIELDS else step)
    return tuple(out)


def mutation_cases() -> Iterator[tuple[str, str, dict[str, str]]]:
    """(case name, plugin id, {rel: text}) — each (file kind, field position, variant) once.

    The field position is the path with list indexes folded (`contributes.commands.[].name`), so a
    field seen in many fixtures is mutated in the first one only. A PLUGIN.md mutation is loaded
    alone; a runtime mutation beside a PLUGIN.md declaring the package's tools and datasets.
    """
    seen: set[tuple[str, tuple, str]] = set()
    for group, root in package_dirs():
        if not group.startswith("upstream/") and not group.startswith("builtin/"):
            continue
        package_meta = _frontmatter(root / "PLUGIN.md") or {}
        contributes = package_meta.get("contributes") if isinstance(package_meta.get("contributes"), dict) else {}
        # Runtime mutations sit beside a small PLUGIN.md declaring what runtimes refer to.
        plugin_text = _dump({"id": root.name, "kind": "plugin", "description": "d", "contributes": {
            k: v for k, v in contributes.items() if k in ("tools", "datasets")}})
        for rel, kind in _manifest_files(root):
            meta = _frontmatter(root / rel)
            if meta is None:
                continue
            for path, variant, mutated in _mutations(meta):
                folded = _fold(path)
                key = (kind, folded, variant)
                if key in seen:
                    continue
                seen.add(key)
                files = {rel: _dump(mutated)}
                if rel != "PLUGIN.md":
                    files["PLUGIN.md"] = plugin_text
                dotted = ".".join(str(step) for step in folded) or "(root)"
                yield f"mut:{kind}:{dotted}:{variant}", root.name, files


def broken_cases() -> Iterator[tuple[str, str, dict[str, str]]]:
    from tests.plugins_app.test_manifests import BROKEN_PLUGINS

    for name, files, _expected, _scope in BROKEN_PLUGINS:
        yield f"broken:{name}", "demo", files


def write_files(root: Path, files: dict[str, str]) -> Path:
    import textwrap

    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")  # as test_manifests.write_plugin
    return root


def _digest(value: Any) -> str:
    import hashlib

    return hashlib.sha256(json.dumps(value, default=str, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def manifest_result(manifest: Any, *, full: bool, only_file: str | None = None) -> dict[str, Any]:
    """The comparable outcome of one load: issues, runtimes, disabled runtimes (and, for real
    packages, the built runtime contracts so the refactor cannot change what loads).
    only_file: keep the issues of that file only (a mutated runtime beside an unchanged PLUGIN.md)."""
    out: dict[str, Any] = {
        "issues": [[i.file, i.field, i.code, i.severity] for i in manifest.issues if only_file in (None, i.file)],
        "runtimes": list(manifest.runtime_ids),
        "disabled": [d["sourcePath"] for d in manifest.disabled_runtimes],
    }
    if full:
        out["detail"] = _digest({
            "id": manifest.id, "kind": manifest.kind, "version": manifest.version, "provides": manifest.provides,
            "requires": manifest.requires, "optional": manifest.optional_contracts, "conflicts": manifest.conflicts,
            "contracts": manifest.contracts, "entry": manifest.entry, "entryLanguage": manifest.entry_language,
            "contributes": vars(manifest.contributes), "legacy": manifest.is_legacy_layout,
            "ignored": manifest.ignored_fields, "runtimes": [r.detail() for r in manifest.runtimes],
        })
    return out


def golden_compute(load: Callable[..., Any], tmp: Path) -> dict[str, Any]:
    """Run every case through `load` (a plugin_manifest_load) and collect the results."""
    results: dict[str, Any] = {}
    for name, root in package_dirs():
        results[f"pkg:{name}"] = manifest_result(load(root, expected_id=root.name), full=True)
    for index, (name, plugin_id, files) in enumerate([*broken_cases(), *mutation_cases()]):
        root = write_files(tmp / f"c{index}" / plugin_id, files)
        mutated = next(iter(files)) if name.startswith("mut:") and len(files) > 1 else None
        try:
            results[name] = manifest_result(load(root, expected_id=plugin_id), full=False, only_file=mutated)
        except Exception as exc:  # the old loader had a few; recorded, not hidden
            results[name] = {"crash": type(exc).__name__}
    return results


# ---------------------------------------------------------------- the tests


@pytest.fixture(scope="module")
def golden() -> dict[str, Any]:
    return json.loads(GOLDEN_FILE.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def current(tmp_path_factory) -> dict[str, Any]:
    from plugins_app.manifests import plugin_manifest_load

    return golden_compute(plugin_manifest_load, tmp_path_factory.mktemp("golden"))


def test_golden_covers_the_same_cases(golden, current):
    assert sorted(current) == sorted(golden)


def test_packages_load_exactly_as_before(golden, current):
    """Real packages: same issues in the same order, same runtimes and contracts."""
    differing = [name for name in golden if name.startswith("pkg:") and current[name] != golden[name]]
    assert differing == [], {name: (golden[name]["issues"], current[name]["issues"]) for name in differing[:3]}


def _only_follow_on_issues_dropped(before: dict[str, Any], after: dict[str, Any]) -> bool:
    """True when `after` is `before` minus issues that followed from a wrongly typed value: each
    dropped issue sits at or under a field that has an invalid-field error in `after` (the old
    checker went on reading such a value, e.g. a string of tool names letter by letter)."""
    if {k: v for k, v in before.items() if k != "issues"} != {k: v for k, v in after.items() if k != "issues"}:
        return False
    remaining = iter(before["issues"])
    if not all(any(issue == old for old in remaining) for issue in after["issues"]):
        return False  # not an order-preserving subset
    wrong_types = [(i[0], i[1]) for i in after["issues"] if i[2] == "invalid-field" and i[1]]
    dropped = [i for i in before["issues"] if i not in after["issues"]]
    return all(any(file == issue[0] and issue[1] and (issue[1] == field or issue[1].startswith(field + "."))
                   for file, field in wrong_types) for issue in dropped)


def test_broken_and_mutated_manifests_report_the_same_issues(golden, current):
    """Same issues in the same order (the first error is the disabled runtime's message), except
    follow-on issues of a wrongly typed value, which are gone: a wrong type is reported once."""
    differing = {}
    for name, expected in golden.items():
        if name.startswith("pkg:") or "crash" in expected:
            continue
        if current[name] != expected and not _only_follow_on_issues_dropped(expected, current[name]):
            differing[name] = {"before": expected, "after": current[name]}
    assert not differing, json.dumps(dict(list(differing.items())[:5]), indent=1)


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
    from plugins_app.manifests import plugin_manifest_load as load

    with tempfile.TemporaryDirectory() as tmp:
        golden_write(golden_compute(load, Path(tmp)))
