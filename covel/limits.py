"""Request body limits (spec 004 §响应格式约定, 请求体上限), shared by the ASGI and Django layers."""
from __future__ import annotations

import re

from django.conf import settings

_CHECKPOINT = re.compile(r"^/api/sessions/[^/]+/browser-checkpoint/?$")


def body_limit_bytes(path: str, method: str) -> int:
    """Maximum request body size in bytes for ``method path``.

    1 MiB for the general API, 20 MiB under /api/install and /api/media,
    64 MiB for PUT /api/sessions/:id/browser-checkpoint.
    """
    if method.upper() == "PUT" and _CHECKPOINT.match(path):
        return settings.BODY_LIMIT_CHECKPOINT_BYTES
    if path == "/api/install" or path.startswith("/api/install/") or path == "/api/media" or path.startswith("/api/media/"):
        return settings.BODY_LIMIT_LARGE_BYTES
    return settings.BODY_LIMIT_DEFAULT_BYTES


PAYLOAD_TOO_LARGE = {"error": "Payload Too Large"}
