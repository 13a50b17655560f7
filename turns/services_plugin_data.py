"""Writes of plugin data (spec 004 §插件数据 PUT / DELETE). The only writer of PluginData rows.

Every write runs in one transaction with its ``plugin-data.changed`` session event, so a reader
never sees an event for a value that was rolled back, nor a value without its event.
"""
from __future__ import annotations

import json
from typing import Any

from django.db import transaction

from covel.errors import ApiError
from plugins_app.models import PLUGIN_DATA_VALUE_MAX_BYTES, PluginData
from plugins_app.selectors_plugin_data import RESERVED_PREFIX
from turns.events import NewEvent, session_events_append

EVENT_CHANGED = "plugin-data.changed"
TOPIC = "plugin-data"


class ValueTooLarge(ApiError):
    """413: the value serializes to more than 256 KiB of UTF-8 JSON; nothing is written."""

    status = 413
    code = "plugin_data_too_large"

    def __init__(self, size_bytes: int) -> None:
        super().__init__(message=f"Plugin data value too large: {size_bytes} bytes (max {PLUGIN_DATA_VALUE_MAX_BYTES})",
                         details={"sizeBytes": size_bytes, "maxBytes": PLUGIN_DATA_VALUE_MAX_BYTES})


class ReservedNamespace(ApiError):
    """403: namespaces starting with ``_`` belong to the kernel."""

    status = 403
    code = "reserved_namespace"

    def __init__(self, namespace: str) -> None:
        super().__init__(message=f"Namespace is reserved for the kernel: {namespace}")


class InvalidLocation(ApiError):
    """400: the namespace or key is longer than its column (128 / 256 characters); nothing is written."""

    status = 400
    code = "invalid_plugin_data_key"

    def __init__(self, name: str, limit: int) -> None:
        super().__init__(message=f"{name} must be at most {limit} characters")


NAMESPACE_MAX, KEY_MAX = 128, 256


def location_check(namespace: str, key: str) -> None:
    """Raise InvalidLocation (400) when namespace > 128 or key > 256 characters (the PluginData columns)."""
    if len(namespace) > NAMESPACE_MAX:
        raise InvalidLocation("namespace", NAMESPACE_MAX)
    if len(key) > KEY_MAX:
        raise InvalidLocation("key", KEY_MAX)


def value_size_bytes(value: Any) -> int:
    """UTF-8 byte length of the value's compact JSON serialization."""
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


def value_check(value: Any) -> None:
    """Raise ValueTooLarge (413) over 256 KiB (limit shared with proposals and handlers)."""
    size = value_size_bytes(value)
    if size > PLUGIN_DATA_VALUE_MAX_BYTES:
        raise ValueTooLarge(size)


def namespace_check_writable(namespace: str) -> None:
    """Raise ReservedNamespace (403) for kernel namespaces (``_dimensions``, ``_hidden.*`` ...)."""
    if namespace.startswith(RESERVED_PREFIX):
        raise ReservedNamespace(namespace)


def plugin_data_put(*, session_id: str, plugin_id: str, namespace: str, key: str, value: Any,
                    allow_reserved: bool = False, turn_id: str = "") -> PluginData:
    """Insert or replace one value; bumps ``version``; appends ``plugin-data.changed``
    ``{pluginId, namespace, key, op: "put", version}`` in the same transaction.

    Raises ReservedNamespace (403) unless allow_reserved (kernel writers only), InvalidLocation (400),
    ValueTooLarge (413).
    Call inside the caller's transaction when part of a bigger write (it nests).
    """
    if not allow_reserved:
        namespace_check_writable(namespace)
    location_check(namespace, key)
    value_check(value)
    with transaction.atomic():
        row = PluginData.objects.select_for_update().filter(
            session_id=session_id, plugin_id=plugin_id, namespace=namespace, key=key).first()
        if row is None:
            row = PluginData.objects.create(session_id=session_id, plugin_id=plugin_id, namespace=namespace, key=key, value=value)
        else:
            row.value = value
            row.version += 1
            row.save(update_fields=["value", "version", "updated_at"])
        if not namespace.startswith(RESERVED_PREFIX):
            session_events_append(session_id, [NewEvent(type=EVENT_CHANGED, topic=TOPIC, turn_id=turn_id, payload={
                "pluginId": plugin_id, "namespace": namespace, "key": key, "op": "put", "version": row.version})])
    return row


def plugin_data_delete(*, session_id: str, plugin_id: str, namespace: str, key: str,
                       allow_reserved: bool = False, turn_id: str = "") -> bool:
    """Delete one value; returns False when there was none (no event then). Emits
    ``plugin-data.changed`` ``{pluginId, namespace, key, op: "delete"}`` in the same transaction.
    Raises ReservedNamespace (403) unless allow_reserved."""
    if not allow_reserved:
        namespace_check_writable(namespace)
    with transaction.atomic():
        deleted, _ = PluginData.objects.filter(session_id=session_id, plugin_id=plugin_id, namespace=namespace, key=key).delete()
        if deleted and not namespace.startswith(RESERVED_PREFIX):
            session_events_append(session_id, [NewEvent(type=EVENT_CHANGED, topic=TOPIC, turn_id=turn_id, payload={
                "pluginId": plugin_id, "namespace": namespace, "key": key, "op": "delete"})])
    return bool(deleted)
