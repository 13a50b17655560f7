"""Shapes of this app's routes in the OpenAPI document (covel/openapi.py): documentation only, the
endpoints answer as before. Named schemas_api.py because plugins_app/schemas/ holds the published
JSON Schemas (plugin.json, runtime.json, world.json, ui-spec.json)."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from covel.openapi import Wire, WireIn

Text = str | dict[str, str]


class RuntimeSummaryOut(Wire):
    id: str
    runtime_type: str
    trigger: dict[str, Any]
    execution: Literal["sync", "background"]
    turn_completion: str | None
    output_kind: str | None
    stage: str | None
    doc_path: str
    description: Text | None = None
    output_contract: str | None = None
    subagent_only: bool | None = None


class PluginSummaryOut(Wire):
    """PluginSummary (spec 004 GET /api/plugins)."""

    id: str
    display_name: Text
    description: Text | None
    kind: str
    source: Literal["builtin", "community"]
    host_state: Literal["discovered", "installed", "loaded", "error"]
    provides: list[str]
    requires: list[str]
    optional: list[str]
    conflicts: list[str]
    extensions: list[dict[str, Any]]
    event_topics: list[str]
    runtime_count: int
    runtimes: list[RuntimeSummaryOut]
    tools: list[str]
    user_settings: list[dict[str, Any]]
    tags: list[str]
    languages: dict[str, list[str]]
    error: str | None = None
    trust: dict[str, Any] | None = None
    disabled_runtimes: list[dict[str, Any]] | None = None
    ignored_fields: list[dict[str, Any]] | None = None
    version: str | None = None
    author: Any = None
    license: str | None = None
    homepage: str | None = None


class PluginsOut(Wire):
    items: list[PluginSummaryOut]


class PluginDetailOut(PluginSummaryOut):
    """PluginDetail: the summary plus contracts, data, UI and the full runtime contracts."""

    data_schemas: dict[str, Any]
    datasets: dict[str, Any]
    world_projections: dict[str, Any]
    declared_plugin_data_namespaces: list[str]
    contracts: dict[str, Any]
    ui: dict[str, list[dict[str, Any]]]
    actions: list[str]
    commands: list[dict[str, Any]]
    services: list[str]
    forms: list[str]
    hooks: list[dict[str, Any]]
    events: list[dict[str, Any]]
    action_kinds: list[dict[str, Any]]
    runtimes: list[dict[str, Any]]  # type: ignore[assignment]  # the full runtime contracts
    entry: str | None


class CapabilitiesOut(Wire):
    schema_version: int
    framework: dict[str, Any]


class PluginFlowStep(Wire):
    stage: str | None
    runtimes: list[dict[str, Any]]


class PluginFlowsOut(Wire):
    plugins: list[dict[str, Any]]
    steps: list[PluginFlowStep]


class IssueOut(Wire):
    severity: Literal["error", "warning", "info"]
    code: str
    file: str | None = None
    field: str | None = None
    message: str


class ValidationReportOut(Wire):
    """PackageValidationReport of POST /api/install/validate/{plugin,world}."""

    kind: Literal["plugin", "world"]
    id: str | None = None
    ok: bool
    counts: dict[str, int]
    issues: list[IssueOut]


class InstallOut(Wire):
    ok: bool
    kind: Literal["plugin", "world"]
    id: str
    restart_required: bool
    has_server_code: bool | None = None


class StImportOut(InstallOut):
    preview: bool
    report: dict[str, Any]


class InstallUpload(WireIn):
    """multipart/form-data: the package as a .zip in the field `file` (at most 20 MiB)."""

    file: bytes = Field(json_schema_extra={"format": "binary"})


class InstallSourceIn(WireIn):
    """application/json alternative to an upload: a package already on the server,
    ``{source: {kind: "path", path}}`` inside the allowed package roots."""

    source: dict[str, Any]


INSTALL_ERRORS: dict[int, str] = {
    400: "invalid_request: neither a `file` nor JSON {source}", 401: "operator_token_required / unauthorized (the "
    "install token)", 403: "install_api_disabled", 413: "payload_too_large: over 20 MiB"}
INSTALL_BODY = {"multipart/form-data": InstallUpload, "application/json": InstallSourceIn}
SCHEMA_CONTENT = {"application/schema+json": {"schema": {"type": "object", "additionalProperties": True}}}


# --- GitHub installs, listings, uninstall (spec 004 插件与世界安装, 全局插件) ------------------------


class GithubUrlIn(WireIn):
    """{url}: a public https://github.com/<owner>/<repo>[/tree/<ref>[/<path>]] link."""

    url: str


class GithubConfirmIn(WireIn):
    """{token, acceptRisk: true}: confirm a preview (install or update)."""

    token: str
    accept_risk: bool


class GithubBatchIn(WireIn):
    """{tokens: 1–20 install tokens, acceptRisk: true}."""

    tokens: list[str]
    accept_risk: bool


class GithubUpdatePreviewIn(WireIn):
    """{id, url?}: the installed package, and optionally a link to another version of it."""

    id: str
    url: str | None = None


class GithubSourceOut(Wire):
    repository: str
    commit: str
    path: str
    digest: str
    tracking: dict[str, Any]


class GithubPreviewOut(Wire):
    """GithubPluginPreview / GithubWorldPreview: plugins add capabilities and hasServerCode."""

    kind: Literal["plugin", "world"]
    id: str
    version: str | None = None
    source: GithubSourceOut
    trusted_source: bool
    token: str
    expires_at: str
    capabilities: dict[str, Any] | None = None
    has_server_code: bool | None = None


class GithubUpdatePreviewOut(Wire):
    """{status: current | pinned} or {status: available, preview} (preview adds previous, changes)."""

    status: Literal["current", "pinned", "available"]
    preview: GithubPreviewOut | None = None


class GithubPackagesPreviewOut(Wire):
    """POST /api/install/github/preview: {collection, items, problems}."""

    collection: dict[str, Any] | None
    items: list[GithubPreviewOut]
    problems: list[dict[str, Any]]


class BatchInstallOut(Wire):
    """POST /api/install/github/batch and /api/install/collection (201)."""

    ok: bool
    installed: list[dict[str, str]]
    restart_required: bool


class InstalledPackageOut(Wire):
    id: str
    version: str | None = None
    source: str | None
    integrity: Literal["verified", "modified", "no-receipt", "unreadable"]
    trusted_source: bool
    tracking: dict[str, Any] | None = None
    commit: str | None = None
    host_state: str | None = None
    pending_update: dict[str, Any] | None = None
    status: str | None = None


class InstalledPackagesOut(Wire):
    items: list[InstalledPackageOut]


class UninstallOut(Wire):
    ok: bool
    id: str
    restart_required: bool


class OkOut(Wire):
    ok: bool


GITHUB_ERRORS: dict[int, str] = {
    400: "invalid_github_url / invalid_request / risk_not_accepted / invalid_preview_token / package_invalid / "
         "not_a_plugin / not_a_world / too_many_packages / collection_invalid / update_unavailable",
    401: "operator_token_required / unauthorized", 403: "install_api_disabled",
    404: "github_not_found / plugin_not_installed / world_not_installed / no_pending_update",
    409: "preview_expired / preview_changed / plugin_already_exists / world_already_exists / plugin_reserved_id / "
         "package_busy / update_pending / local_changes",
    413: "payload_too_large", 429: "github_rate_limited", 502: "github_unreachable / github_upstream_error"}
