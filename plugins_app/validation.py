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
