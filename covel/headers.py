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
CODE_INVALID_PLUGIN_USER_SETTINGS = "invalid_plugin_user_settings"


def _has_lone_surrogate(value: Any) -> bool:
    """True when a decoded JSON value holds a string with an unpaired surrogate (``"\\ud800"``):
    such a string cannot be encoded as UTF-8, so it would fail later (in a response, a log line,
    an outbound request) as a 500 instead of here as a 400."""
    if isinstance(value, str):
        return any("\ud800" <= ch <= "\udfff" for ch in value)
    if isinstance(value, dict):
        return any(_has_lone_surrogate(k) or _has_lone_surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_lone_surrogate(v) for v in value)
    return False


def b64_json_header(raw: str, *, code: str, what: str) -> dict[str, Any]:
    """Decode a header holding base64(JSON object) (raw JSON accepted too). Raises 400 ``code``
    for anything else: a value that is not ASCII (HTTP carries header bytes; the server reads
    them as Latin-1, so non-ASCII text arrives garbled and base64 never contains it — send
    base64, or ``\\u`` escapes in raw JSON), bad base64, invalid UTF-8 or JSON, JSON nested too
    deeply for the parser, strings with unpaired surrogates, or a non-object."""
    text = raw.strip()
    if not text.isascii():
        raise ApiError(400, code, f"{what} must be ASCII (base64 of the JSON)")
    if not text.startswith("{"):
        try:
            text = base64.b64decode(text, validate=True).decode("utf-8")
        except (binascii.Error, ValueError):  # ValueError covers UnicodeDecodeError
            raise ApiError(400, code, f"{what} is not base64 JSON") from None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        raise ApiError(400, code, f"{what} is not JSON") from None
    if not isinstance(value, dict):
        raise ApiError(400, code, f"{what} must be a JSON object")
    try:
        broken = _has_lone_surrogate(value)
    except RecursionError:
        raise ApiError(400, code, f"{what} is nested too deeply") from None
    if broken:
        raise ApiError(400, code, f"{what} holds text that is not valid Unicode")
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


def plugin_user_settings_from_request(request) -> dict[str, dict[str, Any]]:
    """The ``X-Plugin-User-Settings`` header (spec 004 §请求头): base64(JSON) ``{pluginId: {settingKey:
    value}}`` — the values the player changed; the engine merges them over the world's
    ``pluginSettings`` and the manifest defaults for this request's turn (the player's win).
    Absent or blank: ``{}``. Raises 400 invalid_plugin_user_settings when it is not that shape."""
    raw = request.headers.get("X-Plugin-User-Settings", "")
    if not raw.strip():
        return {}
    value = b64_json_header(raw, code=CODE_INVALID_PLUGIN_USER_SETTINGS, what="X-Plugin-User-Settings")
    if not all(isinstance(k, str) and k and isinstance(v, dict) for k, v in value.items()):
        raise ApiError(400, CODE_INVALID_PLUGIN_USER_SETTINGS, "X-Plugin-User-Settings maps plugin ids to objects of settings")
    return value
