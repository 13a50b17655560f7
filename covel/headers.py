"""Request headers that carry base64 JSON objects (spec 004 §请求头: ``X-Provider-Keys``,
``X-Slot-Config``, ``X-Plugin-User-Settings``). Decoding errors are 400s in the error envelope.
"""
from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from covel.errors import ApiError

CODE_INVALID_PROVIDER_KEYS = "invalid_provider_keys"


def b64_json_header(raw: str, *, code: str, what: str) -> dict[str, Any]:
    """Decode a header holding base64(JSON object) (raw JSON accepted too). Raises 400 ``code``
    (also for JSON nested too deeply for the parser)."""
    text = raw.strip()
    if not text.startswith("{"):
        try:
            text = base64.b64decode(text, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            raise ApiError(400, code, f"{what} is not base64 JSON") from None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        raise ApiError(400, code, f"{what} is not JSON") from None
    if not isinstance(value, dict):
        raise ApiError(400, code, f"{what} must be a JSON object")
    return value


def provider_keys_from_request(request) -> dict[str, str]:
    """The ``X-Provider-Keys`` header: base64(JSON) ``{provider: key}``; memory only, never stored.
    Raises 400 invalid_provider_keys when malformed, including keys that cannot be sent in an
    ``Authorization`` header (anything but printable ASCII)."""
    raw = request.headers.get("X-Provider-Keys", "")
    if not raw.strip():
        return {}
    keys = b64_json_header(raw, code=CODE_INVALID_PROVIDER_KEYS, what="X-Provider-Keys")
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in keys.items()):
        raise ApiError(400, CODE_INVALID_PROVIDER_KEYS, "X-Provider-Keys maps provider ids to key strings")
    if not all(v.isascii() and v.isprintable() for v in keys.values()):
        raise ApiError(400, CODE_INVALID_PROVIDER_KEYS, "X-Provider-Keys values must be printable ASCII")
    return keys
