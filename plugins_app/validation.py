"""Package diagnostics and the PackageValidationReport (spec 004, "应用内校验").

Pure Python: no Django imports, so world and plugin loaders can share it and test without a DB.

An `Issue` is one finding about a package file: `{severity, code, file?, field?, message}`.
`file` is always relative to the package root (never a host path); `field` is a dotted path
inside that file (`contributes.tools.2`, `schedule.trigger.type`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Literal, Sequence

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
    `..`, drive letter, backslash, symlink; field = member name), `zip-too-large`. With any error
    nothing is extracted (the archive is checked completely before the first write).
    """
    import io
    import zipfile
    from pathlib import Path

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
    destination.mkdir(parents=True, exist_ok=True)
    try:
        for member in members:
            if member.is_dir():
                (root / member.filename).mkdir(parents=True, exist_ok=True)
                continue
            target = root / member.filename
            target.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(member) as src, open(target, "wb") as dst:
                dst.write(src.read())
    except (zipfile.BadZipFile, OSError, ValueError, EOFError):
        return [error(CODE_ZIP_INVALID, "archive member could not be read")]
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
