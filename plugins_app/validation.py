"""Package diagnostics and the PackageValidationReport (spec 004, "应用内校验").

Pure Python: no Django imports, so world and plugin loaders can share it and test without a DB.

An `Issue` is one finding about a package file: `{severity, code, file?, field?, message}`.
`file` is always relative to the package root (never a host path); `field` is a dotted path
inside that file (`contributes.tools.2`, `schedule.trigger.type`).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Literal, Sequence

from jsonschema import Draft202012Validator, validators
from referencing import Registry
from referencing.jsonschema import DRAFT202012

Severity = Literal["error", "warning", "info"]

SEVERITY_ERROR: Severity = "error"
SEVERITY_WARNING: Severity = "warning"
SEVERITY_INFO: Severity = "info"

# Issue codes shared by world and plugin validation. Wire strings appear once, here.
CODE_UNKNOWN_FIELD = "unknown-field"
CODE_INVALID_FIELD = "invalid-field"
CODE_MISSING_FIELD = "missing-field"
CODE_MANIFEST_INVALID = "manifest-invalid"
CODE_MANIFEST_MISSING = "manifest-missing"
CODE_IDENTITY_INVALID = "identity-invalid"
CODE_ID_MISMATCH = "id-mismatch"
CODE_FILE_INVALID = "file-invalid"
CODE_FILE_MISSING = "file-missing"
CODE_PATH_OUTSIDE_PACKAGE = "path-outside-package"
CODE_ZIP_INVALID = "zip-invalid"
CODE_ZIP_UNSAFE_PATH = "zip-unsafe-path"
CODE_ZIP_TOO_LARGE = "zip-too-large"
CODE_LEGACY_LAYOUT = "legacy-layout"


@dataclass(frozen=True)
class Issue:
    """One diagnostic about a package file.

    severity: "error" blocks loading/installing; "warning" is reported and ignored;
    "info" is purely informative. code: kebab-case constant (see CODE_* here and in the
    loaders). file: package-relative path or None; field: dotted field path or None.
    """

    severity: Severity
    code: str
    message: str
    file: str | None = None
    field: str | None = None

    @property
    def is_error(self) -> bool:
        return self.severity == SEVERITY_ERROR

    def as_dict(self) -> dict[str, Any]:
        """Wire shape `{severity, code, file?, field?, message}` (keys omitted when None)."""
        out: dict[str, Any] = {"severity": self.severity, "code": self.code}
        if self.file is not None:
            out["file"] = self.file
        if self.field is not None:
            out["field"] = self.field
        out["message"] = self.message
        return out


def error(code: str, message: str, file: str | None = None, field: str | None = None) -> Issue:
    return Issue(SEVERITY_ERROR, code, message, file, field)


def warning(code: str, message: str, file: str | None = None, field: str | None = None) -> Issue:
    return Issue(SEVERITY_WARNING, code, message, file, field)


def info(code: str, message: str, file: str | None = None, field: str | None = None) -> Issue:
    return Issue(SEVERITY_INFO, code, message, file, field)


def has_errors(issues: Iterable[Issue]) -> bool:
    return any(issue.is_error for issue in issues)


@dataclass
class PackageValidationReport:
    """`{kind, id, ok, counts, issues[]}` returned by POST /api/install/validate/{plugin,world}.

    ok is False when any issue is an error. counts always has `errors` and `warnings`; extra
    content counts (e.g. `runtimes`, `characters`) are added by the builder. id is None when the
    package identity could not be derived (an `identity-invalid` issue is present then).
    """

    kind: Literal["plugin", "world"]
    id: str | None
    issues: list[Issue] = field(default_factory=list)
    extra_counts: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not has_errors(self.issues)

    def as_dict(self) -> dict[str, Any]:
        counts = {
            "errors": sum(1 for i in self.issues if i.severity == SEVERITY_ERROR),
            "warnings": sum(1 for i in self.issues if i.severity == SEVERITY_WARNING),
        }
        counts.update(self.extra_counts)
        out: dict[str, Any] = {"kind": self.kind}
        if self.id is not None:
            out["id"] = self.id
        out.update({"ok": self.ok, "counts": counts, "issues": [i.as_dict() for i in self.issues]})
        return out


def report_build(
    *,
    kind: Literal["plugin", "world"],
    package_id: str | None,
    issues: Sequence[Issue],
    extra_counts: dict[str, int] | None = None,
) -> PackageValidationReport:
    """Build a report; issues are ordered errors first, then warnings, then info (stable)."""
    order = {SEVERITY_ERROR: 0, SEVERITY_WARNING: 1, SEVERITY_INFO: 2}
    ordered = sorted(issues, key=lambda i: order[i.severity])
    return PackageValidationReport(kind=kind, id=package_id, issues=list(ordered), extra_counts=dict(extra_counts or {}))


# --------------------------------------------------------------------------------------------
# Uploaded .zip packages (spec 004 "插件与世界安装": ZIP contents are checked by the archive reader)
# --------------------------------------------------------------------------------------------

MAX_ZIP_BYTES = 20 * 1024 * 1024  # upload limit (spec: multipart field file, at most 20 MiB)
MAX_ZIP_UNCOMPRESSED_BYTES = 200 * 1024 * 1024
MAX_ZIP_ENTRIES = 5000
# Inflated/compressed bytes of one member past 1 MiB written: text and JSON packages stay far below;
# an archive beyond it is a compression bomb (a 208 KB zip once unpacked to 190 MB).
MAX_ZIP_MEMBER_RATIO = 200


def zip_entry_problem(name: str, external_attr: int) -> str | None:
    """Why a zip member name is unsafe (absolute, drive letter, backslash, `..`, symlink), or None."""
    import stat

    if not name or name.startswith(("/", "\\")) or "\\" in name or "\x00" in name:
        return "absolute or malformed path"
    if len(name) > 1 and name[1] == ":":
        return "drive-letter path"
    if any(part == ".." for part in name.split("/")):
        return "path escapes the package (..)"
    mode = (external_attr >> 16) & 0o170000
    if mode and stat.S_ISLNK(mode):
        return "symbolic link"
    return None


def zip_extract_safe(data: bytes, destination: "Path") -> list[Issue]:
    """Extract a zip archive into `destination` if and only if every member is safe.

    Returns issues: `zip-invalid` (not a zip / corrupt), `zip-unsafe-path` (zip-slip: absolute,
    `..`, drive letter, backslash, symlink; field = member name), `zip-too-large` (declared or real
    inflated size, entry count, compression ratio), `zip-invalid` also for a member inflating past its
    declared size. With a path error nothing is extracted (names are checked before the first
    write); a size error found while inflating removes what was written.
    """
    import io
    import zipfile
    from pathlib import Path

    from plugins_app.archives import ArchiveLimits, ArchiveRejected, zip_extract_metered

    destination = Path(destination)
    if len(data) > MAX_ZIP_BYTES:
        return [error(CODE_ZIP_TOO_LARGE, f"archive exceeds {MAX_ZIP_BYTES} bytes")]
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        members = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError):
        return [error(CODE_ZIP_INVALID, "not a readable zip archive")]
    issues: list[Issue] = []
    if len(members) > MAX_ZIP_ENTRIES:
        issues.append(error(CODE_ZIP_TOO_LARGE, f"archive has more than {MAX_ZIP_ENTRIES} entries"))
    if sum(m.file_size for m in members) > MAX_ZIP_UNCOMPRESSED_BYTES:
        issues.append(error(CODE_ZIP_TOO_LARGE, "archive expands beyond the size limit"))
    root = destination.resolve()
    for member in members:
        problem = zip_entry_problem(member.filename, member.external_attr)
        if problem is None:
            target = (root / member.filename).resolve()
            if target != root and root not in target.parents:
                problem = "path escapes the package"
        if problem:
            issues.append(error(CODE_ZIP_UNSAFE_PATH, problem, None, member.filename))
    if has_errors(issues):
        return issues
    # Inflated by measured size, not by what the headers claim (plugins_app/archives.py).
    limits = ArchiveLimits(max_total_bytes=MAX_ZIP_UNCOMPRESSED_BYTES, max_entries=MAX_ZIP_ENTRIES,
                           max_ratio=MAX_ZIP_MEMBER_RATIO)
    try:
        zip_extract_metered(archive, destination, limits)
    except ArchiveRejected as exc:
        code = CODE_ZIP_INVALID if exc.reason in ("invalid", "size-mismatch") else CODE_ZIP_TOO_LARGE
        return [error(code, exc.message, None, exc.member)]
    return []


def package_root_find(extracted: "Path", marker: str) -> "Path | None":
    """The package root inside an extracted archive: the directory itself when `marker`
    (PLUGIN.md / world.yaml) is at its root, else its single top-level folder holding it."""
    from pathlib import Path

    extracted = Path(extracted)
    if (extracted / marker).is_file():
        return extracted
    children = [c for c in extracted.iterdir() if not c.name.startswith((".", "__MACOSX"))]
    if len(children) == 1 and children[0].is_dir() and (children[0] / marker).is_file():
        return children[0]
    return None


# --------------------------------------------------------------------------------------------
# Manifests checked against the published JSON Schemas (GET /api/framework/schemas/{name})
# --------------------------------------------------------------------------------------------
#
# plugins_app/schemas/ holds plugin.json (PLUGIN.md frontmatter), runtime.json (RUNTIME.md
# frontmatter), world.json (world.yaml and the world data descriptor) and ui-spec.json (one
# contributes.ui file, checked by plugins_app/ui_specs.py), Draft 2020-12. The
# loaders validate with them and turn each jsonschema error into an Issue, so what an editor
# flags and what the server reports come from one source:
#
#   additionalProperties: false → warning unknown-field, one per extra key (never fatal)
#   required                    → error missing-field at the missing key
#   anything else               → error invalid-field (type, enum, const, pattern, anyOf, ...)
#
# Where an issue is reported: a named property is a field; so is an item of a list (`.0`) or an
# entry of a map whose schema has a `title` (records such as a command or a source). An item of
# an untitled list (a list of strings) is reported once, on the list itself. A value matching no
# branch of an `anyOf` is one issue at its path; when exactly one branch has the value's JSON type
# and that branch is a record (`properties`), the record's own issues are reported instead (a
# `{name}` tool choice missing `name` is missing-field at `...toolChoice.name`). Issues come in
# document order, missing fields after the fields an object has.

SCHEMA_DIR = Path(__file__).resolve().parent / "schemas"
SCHEMA_NAMES = ("plugin.json", "runtime.json", "world.json", "ui-spec.json")
SCHEMA_BASE = "/api/framework/schemas/"  # every schema's $id is SCHEMA_BASE + name


def schema_path(name: str) -> Path:
    """File of a published schema. Raises KeyError for a name not in SCHEMA_NAMES (never a path
    built from the name, so a request cannot reach other files)."""
    if name not in SCHEMA_NAMES:
        raise KeyError(name)
    return SCHEMA_DIR / name


@functools.lru_cache(maxsize=None)
def schema_bytes(name: str) -> bytes:
    """The schema file as served (bytes, read once). Raises KeyError for an unknown name."""
    return schema_path(name).read_bytes()


@functools.lru_cache(maxsize=None)
def schema_document(name: str) -> dict[str, Any]:
    """Parsed schema `name` ("plugin.json", ...). Raises KeyError for an unknown name."""
    return json.loads(schema_bytes(name))


@functools.lru_cache(maxsize=1)
def _schema_registry() -> Registry:
    # Registered without `$schema`: jsonschema picks the validator class of a referenced document
    # from its `$schema`, which would drop the integer rule below for everything behind a $ref.
    return Registry().with_resources(
        (SCHEMA_BASE + name, DRAFT202012.create_resource({k: v for k, v in schema_document(name).items() if k != "$schema"}))
        for name in SCHEMA_NAMES
    )


def _integer(checker: Any, value: Any) -> bool:
    # JSON Schema counts 2.0 as an integer; the manifest readers (and the old checker) do not, so a
    # `maxSteps: 2.0` would pass validation and then be dropped silently.
    return isinstance(value, int) and not isinstance(value, bool)


_Validator = validators.extend(
    Draft202012Validator, type_checker=Draft202012Validator.TYPE_CHECKER.redefine("integer", _integer)
)


@functools.lru_cache(maxsize=None)
def schema_validator(ref: str) -> Any:
    """A Draft 2020-12 validator for `ref`: a schema name, optionally with a JSON pointer
    fragment ("world.json#/$defs/worldData"). Raises KeyError for an unknown schema name."""
    name = ref.split("#", 1)[0]
    schema_path(name)
    return _Validator({"$ref": SCHEMA_BASE + ref}, registry=_schema_registry())


def schema_issues(instance: Any, ref: str, *, file: str | None, prefix: str = "") -> list[Issue]:
    """Validate `instance` against schema `ref` (see schema_validator) and map the errors to
    issues (rules above). file: the package-relative file the issues name; prefix: dotted path
    the instance sits at in that file ("" for a whole document, "characterSchema" for a part)."""
    validator = schema_validator(ref)
    mapped: list[tuple[tuple, Issue]] = []
    for err in validator.iter_errors(instance):
        _error_map(validator, err, instance, file, prefix, mapped)
    mapped.sort(key=lambda pair: pair[0])
    seen: set[tuple[str | None, str]] = set()
    out: list[Issue] = []
    for _position, issue in mapped:
        if (issue.field, issue.code) not in seen:
            seen.add((issue.field, issue.code))
            out.append(issue)
    return out


# Keywords whose value is one subschema applying to a part of the instance (the next path
# step), and those holding named / numbered subschemas.
_INSTANCE_STEPS = {"items": "item", "additionalProperties": "entry", "unevaluatedItems": "item", "unevaluatedProperties": "entry"}
_NAMED = ("properties", "patternProperties", "$defs", "dependentSchemas")
_NUMBERED = ("anyOf", "oneOf", "allOf", "prefixItems")
_IN_PLACE = ("not", "if", "then", "else", "contains", "propertyNames")


class _Located:
    """Where an error sits in the schemas: the node holding the failing keyword (with the
    resolver for its `$ref`s) and, per instance path step, how it was entered."""

    def __init__(self, validator: Any, err: Any) -> None:
        self.root_resolver = resolver = _schema_registry().resolver()
        node: Any = validator.schema  # {"$ref": <the schema or definition validated against>}
        self.steps: list[tuple[str, Any, Any]] = []  # (property|item|entry, subschema, resolver)
        tokens = list(err.absolute_schema_path)
        index = 0
        while index < len(tokens):
            token = tokens[index]
            # jsonschema follows $ref without recording it in the path: follow it here when the
            # keyword is not the node's own.
            while isinstance(node, dict) and "$ref" in node and (isinstance(token, int) or token not in node):
                resolved = resolver.lookup(node["$ref"])
                node, resolver = resolved.contents, resolved.resolver
            last = index == len(tokens) - 1
            if token in _NAMED and not last:
                node = node[token][tokens[index + 1]]
                if token in ("properties", "patternProperties"):
                    self.steps.append(("property", node, resolver))
                index += 2
            elif token in _NUMBERED and not last and isinstance(tokens[index + 1], int):
                node = node[token][tokens[index + 1]]
                if token == "prefixItems":
                    self.steps.append(("item", node, resolver))
                index += 2
            elif (token in _INSTANCE_STEPS or token in _IN_PLACE) and not last and isinstance(node.get(token), dict):
                node = node[token]
                if token in _INSTANCE_STEPS:
                    self.steps.append((_INSTANCE_STEPS[token], node, resolver))
                index += 1
            else:
                break
        self.node, self.resolver = node, resolver

    def reported_depth(self, path_length: int) -> int:
        """How many instance path steps the issue keeps: up to the first untitled item/entry."""
        if len(self.steps) != path_length:
            return path_length  # a schema shape this walk does not know: keep the full path
        for depth, (via, node, resolver) in enumerate(self.steps):
            if via != "property" and "title" not in _deref(node, resolver, stop_at_title=True)[0]:
                return depth
        return path_length


def _deref(node: Any, resolver: Any, *, stop_at_title: bool = False) -> tuple[Any, Any]:
    """Follow `$ref`s (stop_at_title: stop at a node that has its own title)."""
    while isinstance(node, dict) and "$ref" in node and not (stop_at_title and "title" in node):
        resolved = resolver.lookup(node["$ref"])
        node, resolver = resolved.contents, resolved.resolver
    return node, resolver


_JSON_NAMES = {"string": "string", "integer": "integer", "number": "number", "boolean": "boolean",
               "null": "null", "object": "object", "array": "list"}


def _describe(node: Any, resolver: Any) -> str:
    """Human name of what a schema accepts: "string", "list of strings", "string or locale map"."""
    node, resolver = _deref(node, resolver)
    if not isinstance(node, dict):
        return "value"
    for union in ("anyOf", "oneOf"):
        if union in node:
            names = list(dict.fromkeys(_describe(branch, resolver) for branch in node[union]))
            return " or ".join(names)
    if "enum" in node:
        return "one of " + ", ".join(map(str, node["enum"]))
    types = node.get("type")
    if types is None:
        return "value"
    names = []
    for name in types if isinstance(types, list) else [types]:
        if name == "object" and isinstance(node.get("additionalProperties"), dict) and node["additionalProperties"].get("type") == "string":
            names.append("locale map")
        elif name == "array" and isinstance(node.get("items"), dict) and node["items"].get("type") == "string":
            names.append("list of strings")
        else:
            names.append(_JSON_NAMES.get(name, name))
    return " or ".join(names)


def _got(value: Any) -> str:
    """Name of a value's type in messages ("got int")."""
    if value is None:
        return "null"
    return {bool: "boolean", str: "string", int: "int", float: "float", list: "list", dict: "object"}.get(type(value), type(value).__name__)


def _message(err: Any, located: _Located) -> str:
    """The issue message of one jsonschema error (their own messages quote whole values)."""
    keyword, node = err.validator, located.node
    if keyword == "type":
        return f"expected {_describe(node, located.resolver)}, got {_got(err.instance)}"
    if keyword == "enum":
        return f"must be one of {', '.join(map(str, err.validator_value))}; got {err.instance!r}"
    if keyword == "const":
        return f"must be {err.validator_value!r}; got {err.instance!r}"
    if keyword == "pattern":
        what = f"a valid {node['title'].lower()}" if isinstance(node.get("title"), str) else "valid"
        return f"{err.instance!r} is not {what} (pattern {err.validator_value})"
    if keyword in ("anyOf", "oneOf"):
        return f"expected {_describe(node, located.resolver)}, got {_got(err.instance)}"
    if keyword == "minProperties" and err.validator_value == 1:
        return "must not be empty"
    if keyword == "not" and isinstance(err.validator_value, dict) and "const" in err.validator_value:
        return f"{err.validator_value['const']!r} is not allowed"
    return err.message


def _dotted(prefix: str, path: Sequence[Any]) -> str | None:
    parts = [prefix] if prefix else []
    parts += [str(step) for step in path]
    return ".".join(parts) or None


def _position(root: Any, path: Sequence[Any], *, missing_rank: int | None = None) -> tuple:
    """Document order of `path` in `root`; a missing key (missing_rank = its place in
    `required`) sorts after every key its object has."""
    out: list[int] = []
    node = root
    for depth, step in enumerate(path):
        if isinstance(node, dict):
            keys = list(node)
            if step in node:
                out.append(keys.index(step))
                node = node[step]
            else:
                out.append(len(keys) + (missing_rank or 0) if depth == len(path) - 1 else len(keys))
                node = None
        elif isinstance(node, list) and isinstance(step, int) and 0 <= step < len(node):
            out.append(step)
            node = node[step]
        else:
            out.append(0)
            node = None
    return tuple(out)


def _branch_matches(validator: Any, node: Any, resolver: Any, value: Any) -> tuple[bool, bool]:
    """(the branch accepts the JSON type of value, the branch is a record)."""
    node, _ = _deref(node, resolver)
    if not isinstance(node, dict) or "type" not in node:
        return False, False
    types = node["type"] if isinstance(node["type"], list) else [node["type"]]
    return any(validator.is_type(value, t) for t in types), "properties" in node


def _error_map(validator: Any, err: Any, root: Any, file: str | None, prefix: str,
               out: list[tuple[tuple, Issue]]) -> None:
    """Append (document position, Issue) pairs for one jsonschema error to `out`."""
    located = _Located(validator, err)
    path = list(err.absolute_path)
    keyword = err.validator
    if keyword == "additionalProperties" and err.validator_value is False and isinstance(err.instance, dict):
        declared = located.node.get("properties", {})  # the schemas use no patternProperties
        for key in err.instance:
            if key not in declared:
                out.append((_position(root, [*path, key]),
                            warning(CODE_UNKNOWN_FIELD, "unknown field", file, _dotted(prefix, [*path, key]))))
        return
    if keyword == "required" and isinstance(err.instance, dict):
        for rank, key in enumerate(err.validator_value):
            if key not in err.instance:
                out.append((_position(root, [*path, key], missing_rank=rank),
                            error(CODE_MISSING_FIELD, "required field is missing", file, _dotted(prefix, [*path, key]))))
        return
    if keyword in ("anyOf", "oneOf") and located.reported_depth(len(path)) == len(path):
        matching = []
        for index, branch in enumerate(err.validator_value):
            accepts, is_record = _branch_matches(validator, branch, located.resolver, err.instance)
            if accepts:
                matching.append((index, is_record))
        if len(matching) == 1 and matching[0][1]:
            for sub in err.context or ():
                if sub.relative_schema_path and sub.relative_schema_path[0] == matching[0][0]:
                    _error_map(validator, sub, root, file, prefix, out)
            return
    depth = located.reported_depth(len(path))
    if depth < len(path):
        container = path[:depth]
        inner = path[depth]
        where = f"item {inner}" if isinstance(inner, int) else f"entry {inner!r}"
        container_schema = located.steps[depth - 1][1] if depth else validator.schema
        container_resolver = located.steps[depth - 1][2] if depth else located.root_resolver
        message = f"expected {_describe(container_schema, container_resolver)} ({where}: {_message(err, located)})"
        out.append((_position(root, container), error(CODE_INVALID_FIELD, message, file, _dotted(prefix, container))))
        return
    out.append((_position(root, path), error(CODE_INVALID_FIELD, _message(err, located), file, _dotted(prefix, path))))
