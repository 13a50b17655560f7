"""Request handling shared by every install and install-validate endpoint (spec 004 插件与世界安装):
who may install, and the two ways a package arrives (multipart `file` .zip, or JSON
``{source: {kind: "path" | "installed", ...}}``). The endpoints of each package kind call these.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from django.conf import settings

from covel.auth import is_operator, require_operator
from covel.errors import ApiError
from covel.jsonbody import json_body_load
from plugins_app.install import allowed_package_roots
from plugins_app.validation import PackageValidationReport

MAX_UPLOAD_BYTES = 20 * 1024 * 1024
TRUE_VALUES = ("1", "true", "yes", "on")


def install_auth(request) -> None:
    """Hosted tiers: operator token (401 operator_token_required). Self tier: the operator/desktop
    token when one is configured (401 unauthorized), and the install API must not be disabled
    (COVEL_INSTALL_API_ENABLED, default on; 403 install_api_disabled)."""
    require_operator(request)
    if settings.COVEL_OPERATOR_TOKEN and not is_operator(request):
        raise ApiError(401, "unauthorized", "Install API requires the bearer token")
    if not settings.COVEL_INSTALL_API_ENABLED:
        raise ApiError(403, "install_api_disabled", "The install API is disabled")


def validate_request(request, kind: str, validate_upload: Callable[[bytes], PackageValidationReport],
                     validate_source: Callable[[Any, list[Path]], PackageValidationReport]) -> dict:
    """POST /api/install/validate/<kind>: a multipart `file` or JSON {source}. Returns the
    PackageValidationReport dict. 413 payload_too_large over 20 MiB, 400 invalid_request otherwise."""
    install_auth(request)
    upload = request.FILES.get("file")
    if upload is not None:
        if upload.size > MAX_UPLOAD_BYTES:
            raise ApiError(413, "payload_too_large", "Upload exceeds 20 MiB")
        return validate_upload(upload.read()).as_dict()
    if request.content_type == "multipart/form-data":
        # The multipart parser consumed the stream: there is no JSON body to fall back to.
        raise ApiError(400, "invalid_request", "Send the package .zip in the multipart field `file`")
    body = json_body_load(request.body or b"null")
    if not isinstance(body, dict) or "source" not in body:
        raise ApiError(400, "invalid_request", "Send a multipart field `file` or JSON {source}")
    return validate_source(body["source"], allowed_package_roots()).as_dict()


def install_request_dispatch(request, kind: str, install_upload: Callable[[bytes], dict],
                             install_path: Callable[[Any], dict]) -> dict:
    """Dispatch an install request: multipart field `file` (.zip) or JSON {source: {kind: "path", path}}."""
    install_auth(request)
    upload = request.FILES.get("file")
    if upload is not None:
        if upload.size > MAX_UPLOAD_BYTES:
            raise ApiError(413, "payload_too_large", "Upload exceeds 20 MiB")
        return install_upload(upload.read())
    if request.content_type == "multipart/form-data":
        raise ApiError(400, "invalid_request", f"Send the {kind} .zip in the multipart field `file`")
    try:
        body = json_body_load(request.body or b"null")
    except ApiError as exc:
        if exc.code != "invalid_json_body":
            raise
        raise ApiError(400, "invalid_request", f"Send the {kind} .zip in the multipart field `file`") from None
    source = body.get("source") if isinstance(body, dict) else None
    if not isinstance(source, dict) or source.get("kind") != "path":
        raise ApiError(400, "invalid_request", f"Send the {kind} .zip in the multipart field `file`, or JSON {{source: {{kind: path, path}}}}")
    return install_path(source.get("path"))
