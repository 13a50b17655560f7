"""Client-visible errors of the plugin and install endpoints (spec 004 插件管理, 插件与世界安装).

Each class fixes the HTTP status and the top-level `code`; `details.code` carries the finer,
kebab-case reason (spec: 转换错误带 details: { code }).
"""
from __future__ import annotations

from typing import Any

from covel.errors import ApiError

CODE_PACKAGE_INVALID = "package_invalid"
CODE_PAYLOAD_TOO_LARGE = "payload_too_large"
CODE_TARGET_EXISTS = "target_exists"
CODE_WORLD_ALREADY_EXISTS = "world_already_exists"
CODE_PLUGIN_RESERVED_ID = "plugin_reserved_id"
CODE_ST_IMPORT_INVALID = "st_import_invalid"
CODE_ST_IMPORT_TOO_LARGE = "st_import_too_large"
CODE_ST_IMPORT_ID_EXHAUSTED = "st_import_id_exhausted"
CODE_WORLD_ACTIVATION_FAILED = "world_activation_failed"
CODE_INSTALL_FAILED = "install_failed"


class PackageInvalid(ApiError):
    """400 package_invalid: the package (or the world made from an import) has error diagnostics.

    details: {code: first error's issue code, report: PackageValidationReport}. Nothing is written.
    """

    status = 400
    code = CODE_PACKAGE_INVALID

    def __init__(self, message: str, report: dict[str, Any]) -> None:
        first = next((i for i in report.get("issues", []) if i.get("severity") == "error"), None)
        super().__init__(message=message, details={"code": first["code"] if first else "invalid", "report": report})


class TargetExists(ApiError):
    """409: the install target already exists (spec 004: `target already exists: <id>`); nothing is overwritten."""

    status = 409

    def __init__(self, package_id: str, *, code: str = CODE_TARGET_EXISTS) -> None:
        super().__init__(code=code, message=f"target already exists: {package_id}", details={"id": package_id})


class StImportError(ApiError):
    """A SillyTavern import that cannot be converted.

    status 400 (invalid content, code st_import_invalid) or 413 (a per-file limit, code
    st_import_too_large). details: {code: kebab-case reason, source?: uploaded file name}.
    """

    def __init__(self, status: int, reason: str, message: str, *, source: str | None = None) -> None:
        details: dict[str, Any] = {"code": reason}
        if source is not None:
            details["source"] = source
        code = CODE_ST_IMPORT_TOO_LARGE if status == 413 else CODE_ST_IMPORT_INVALID
        super().__init__(status=status, code=code, message=message, details=details)
        self.reason = reason


class PluginNotFound(ApiError):
    """404 plugin_not_found: the plugin id is not a loaded/known plugin."""

    status = 404
    code = "plugin_not_found"

    def __init__(self, plugin_id: str) -> None:
        super().__init__(message=f"Unknown plugin: {plugin_id}")


class PluginReloadFailed(ApiError):
    """409 plugin_reload_failed: the package no longer loads; the old generation stays in effect
    (spec 004 POST /api/plugins/:id/reload)."""

    status = 409
    code = "plugin_reload_failed"

    def __init__(self, plugin_id: str, reason: str) -> None:
        super().__init__(message=f"Reload of {plugin_id} failed: {reason}", details={"pluginId": plugin_id})


class PluginReloadDisabled(ApiError):
    """403 plugin_reload_disabled: dev hot reload is off (COVEL_PLUGIN_RELOAD_ENABLED), or the
    plugin is builtin (builtin plugins change only with a restart)."""

    status = 403
    code = "plugin_reload_disabled"

    def __init__(self, message: str = "Plugin hot reload is disabled on this server") -> None:
        super().__init__(message=message)
