"""The model-facing tool result envelope (spec 000, 统一返回格式与错误码).

Success: `{"summary"?, "data"?, "staged"?}` in that order, or `{"summary": "Done."}`
("完成。" for a Chinese instruction locale) when there is nothing else.
Failure: `{"error": {"code", "message", "hint"?}}`; messages and hints stay English.
"""

from __future__ import annotations

import json
import re
from typing import Any, Iterable

from plugins_app.toolkit.locale import EN_US, ZH_CN, instruction_locale_for


STAGED_NOTICE = {
    ZH_CN: "已暂存，回合结束时生效（可能被拒绝）。",
    EN_US: "Staged: it takes effect when the turn ends and may still be rejected.",
}
DONE_SUMMARY = {ZH_CN: "完成。", EN_US: "Done."}

#: Longest text kept from an unexpected error's first line (characters).
INTERNAL_TEXT_MAX_CHARS = 300

UUID_RE = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_UUID_FULL_RE = re.compile(rf"^{UUID_RE.pattern}$")
_ISO_TIMESTAMP_RE = re.compile(r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?$")
_TIMESTAMP_KEY_RE = re.compile(r"(^|[a-z0-9])(At|_at)$|^timestamp$")


def _is_bookkeeping_value(value: Any) -> bool:
    return isinstance(value, str) and bool(_UUID_FULL_RE.match(value) or _ISO_TIMESTAMP_RE.match(value))


def model_facing_json(value: Any) -> Any:
    """Project a tool body for the model: bookkeeping removed, everything else kept.

    Removed recursively: object entries whose value is a UUID or an ISO-8601 timestamp string,
    entries whose key names a timestamp (`createdAt`, `updated_at`, `timestamp`...), and UUID /
    timestamp strings inside arrays. Readable short ids (`npc-lin-yao`) stay: the model writes
    them back. Non-JSON values become their str(); tuples become lists.
    """
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            key = str(key)
            if _TIMESTAMP_KEY_RE.search(key) or _is_bookkeeping_value(item):
                continue
            out[key] = model_facing_json(item)
        return out
    if isinstance(value, (list, tuple)):
        return [model_facing_json(v) for v in value if not _is_bookkeeping_value(v)]
    if value is None or isinstance(value, (str, int, float, bool)):
        if isinstance(value, float) and value != value:  # NaN is not JSON
            return None
        return value
    return str(value)


def _is_empty(data: Any) -> bool:
    return data is None or data == {} or data == []


def success_envelope(
    *,
    content: Any,
    locale: str,
    proposal_kinds: Iterable[str] = (),
    event_count: int = 0,
    summary: str | None = None,
    data: Any = None,
    has_model_view: bool = False,
) -> dict[str, Any]:
    """Build the success envelope.

    Without a model view, data = model_facing_json(content) minus a top-level `ui` array.
    With a view (summary and/or data given), only the view's fields are sent.
    staged = {count, kinds, notice} when there are proposals or events: count is both,
    kinds the proposal kinds deduped in first-seen order plus "event" when events exist.
    """
    envelope: dict[str, Any] = {}
    if has_model_view:
        if summary is not None:
            envelope["summary"] = summary
        projected = model_facing_json(data) if data is not None else None
    else:
        body = content
        if isinstance(body, dict) and isinstance(body.get("ui"), list):
            body = {k: v for k, v in body.items() if k != "ui"}
        projected = model_facing_json(body)
    if not _is_empty(projected):
        envelope["data"] = projected
    kinds: list[str] = []
    count = 0
    for kind in proposal_kinds:
        count += 1
        if kind not in kinds:
            kinds.append(kind)
    if event_count:
        count += event_count
        kinds.append("event")
    if count:
        envelope["staged"] = {
            "count": count,
            "kinds": kinds,
            "notice": STAGED_NOTICE[instruction_locale_for(locale)],
        }
    if not envelope:
        envelope["summary"] = DONE_SUMMARY[instruction_locale_for(locale)]
    return envelope


def error_envelope(code: str, message: str, hint: str | None = None) -> dict[str, Any]:
    """`{"error": {"code", "message", "hint"?}}`."""
    error: dict[str, Any] = {"code": code, "message": message}
    if hint:
        error["hint"] = hint
    return {"error": error}


def internal_message(tool_name: str, error: BaseException | str) -> str:
    """`Tool "<name>" failed: <text>`: first line only, UUIDs → `<id>`, text ≤ 300 characters."""
    text = str(error).strip() or type(error).__name__ if isinstance(error, BaseException) else str(error)
    first_line = text.splitlines()[0] if text.splitlines() else text
    first_line = UUID_RE.sub("<id>", first_line)[:INTERNAL_TEXT_MAX_CHARS]
    return f'Tool "{tool_name}" failed: {first_line}'


def envelope_json(envelope: dict[str, Any]) -> str:
    """The tool message text the model reads (compact JSON, non-ASCII kept)."""
    return json.dumps(envelope, ensure_ascii=False, separators=(",", ":"))
