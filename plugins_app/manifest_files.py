"""Reading plugin package files: frontmatter, package-relative paths, the runtimes/ folders.

Pure Python. Paths in issues are package-relative; a declared path that leaves the package root
resolves to None (the caller reports `path-outside-package`).
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from covel.jsonbody import unstorable_json_problem
from covel.yamlio import frontmatter_parse
from plugins_app.manifest_types import PLUGIN_FILE, RUNTIME_FILE, RUNTIMES_DIR
from plugins_app.validation import CODE_FILE_INVALID, CODE_MANIFEST_INVALID, Issue, error


def frontmatter_read(path: Path, rel: str) -> tuple[dict[str, Any] | None, str, list[Issue]]:
    """Read a markdown file with YAML frontmatter.

    Returns (metadata or None on failure, body, issues). Uses `frontmatter.parse` (not `load`)
    because manifests may legitimately contain a `handler` key, which `Post` would reject.
    YAML 1.2 booleans: `off`/`on`/`yes`/`no` stay strings (see covel.yamlio).
    Frontmatter no store could hold (NUL, unpaired surrogates, non-finite numbers, nesting past
    covel.jsonbody.JSON_MAX_DEPTH or too deep for the parser) is `manifest-invalid`.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return None, "", [error(CODE_FILE_INVALID, f"cannot read file: {exc.__class__.__name__}", rel)]
    if not text.lstrip("\ufeff").startswith("---"):
        return None, text, [error(CODE_MANIFEST_INVALID, "missing YAML frontmatter (--- ... ---)", rel)]
    try:
        metadata, body = frontmatter_parse(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        return None, "", [error(CODE_MANIFEST_INVALID, f"invalid YAML frontmatter{where}", rel)]
    except RecursionError:
        return None, "", [error(CODE_MANIFEST_INVALID, "YAML frontmatter is nested too deeply", rel)]
    problem = unstorable_json_problem(metadata)
    if problem is not None:
        return None, "", [error(CODE_MANIFEST_INVALID, f"frontmatter value at {'/'.join(problem[1]) or '(root)'} cannot be "
                                "stored (NUL, unpaired surrogate, non-finite number or nesting too deep)", rel)]
    if not isinstance(metadata, dict) or not metadata:
        return None, body, [error(CODE_MANIFEST_INVALID, "frontmatter must be a YAML mapping", rel)]
    return dict(metadata), body.strip(), []


def package_path_resolve(root: Path, declared: str, *, base_dir: str = "") -> Path | None:
    """Resolve a package-relative path ("./x", "x") against root/base_dir; None if it escapes root."""
    if not isinstance(declared, str) or not declared or declared.startswith("/") or "\\" in declared:
        return None
    candidate = (root / base_dir / declared).resolve()
    try:
        candidate.relative_to(root.resolve())
    except ValueError:
        return None
    return candidate


def package_relpath(root: Path, path: Path) -> str:
    """`path` (inside root) as a package-relative POSIX path."""
    return PurePosixPath(path.resolve().relative_to(root.resolve())).as_posix()


def runtime_files(root: Path) -> list[tuple[str, Path, bool]]:
    """[(local_id, path, is_legacy_plugin_md)] under runtimes/, sorted by local id."""
    runtimes_dir = root / RUNTIMES_DIR
    out: list[tuple[str, Path, bool]] = []
    if not runtimes_dir.is_dir():
        return out
    for child in sorted(runtimes_dir.iterdir(), key=lambda p: p.name):
        if not child.is_dir() or child.name.startswith("."):
            continue
        if (child / RUNTIME_FILE).is_file():
            out.append((child.name, child / RUNTIME_FILE, False))
        if (child / PLUGIN_FILE).is_file():
            out.append((child.name, child / PLUGIN_FILE, True))
    return out


def event_schema_load(root: Path, declaration: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
    """The payload JSON Schema of one ``contributes.events`` item (spec 000 §emit-event).

    ``schema`` is an inline JSON Schema object or a package-relative path to a ``.json`` file.
    Returns ``(schema, problem)``: ``(None, None)`` when no schema is declared, ``(None, text)``
    when the declared one cannot be used (path leaves the package, missing file, not JSON, not a
    valid JSON Schema), else ``(schema, None)``. Read on demand: files are small and the caller
    (the session's event directory, the manifest validator, plugin-RPC ``event``) caches nothing.
    """
    import json

    import jsonschema

    schema = declaration.get("schema")
    if schema is None:
        return None, None
    if isinstance(schema, str):
        path = package_path_resolve(root, schema)
        if path is None:
            return None, "schema path leaves the package"
        try:
            schema = json.loads(path.read_text(encoding="utf-8"))
        except OSError:
            return None, f"schema file {declaration['schema']} not found"
        except ValueError:
            return None, f"schema file {declaration['schema']} is not JSON"
    if not isinstance(schema, dict):
        return None, "schema must be a JSON Schema object or a package-relative .json path"
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        return None, f"schema is not a valid JSON Schema: {exc.message}"
    return schema, None
