"""Interaction answers inside submit_actions (spec 004 §玩家交互): find the pending interaction,
normalise the values, fill its narrative template; the answer is saved with the turn that reads it.
"""

from __future__ import annotations

import re
from typing import Any

from turns.engine.commit import CommitFailed

PLACEHOLDER_RE = re.compile(r"\{\{\s*([A-Za-z0-9_.\-]+)\s*\}\}")


def narrative_fill(template: str, values: dict[str, Any]) -> str:
    """fillNarrativeTemplate: missing values → "", a doubled sentence stop at a placeholder
    boundary is merged, field text is kept verbatim."""
    def text(value: Any) -> str:
        if value is None:
            return ""
        if isinstance(value, bool):
            return "true" if value else "false"
        return str(value)

    out = PLACEHOLDER_RE.sub(lambda m: text(values.get(m.group(1))), template)
    return re.sub(r"([。.!！?？])\1+", r"\1", out)


def _normalise(spec: dict[str, Any], fields: dict[str, Any], zh: bool) -> dict[str, Any]:
    kind = spec.get("type")
    if kind == "choice":
        options = spec.get("options") or []
        chosen = next((o for o in options if isinstance(o, dict) and o.get("id") == fields.get("selectedId")), None)
        if chosen is None and options:
            raise CommitFailed("form_rejected", "Choose one of the offered options.")
        label = (chosen or {}).get("label") if chosen else fields.get("selectedLabel")
        return {"selectedId": fields.get("selectedId"), "selectedLabel": label}
    if kind == "confirmation":
        return {"confirmed": bool(fields.get("confirmed"))}
    values: dict[str, Any] = {}
    issues = []
    for field in spec.get("fields") or []:
        name = field.get("name")
        raw = fields.get(name)
        if raw in (None, "") and "defaultValue" in field:
            raw = field["defaultValue"]
        if field.get("type") == "number" and isinstance(raw, str) and raw.strip():
            try:
                raw = float(raw) if "." in raw else int(raw)
            except ValueError:
                issues.append({"field": name, "message": f"{field.get('label') or name}: " + ("请填写数字。" if zh else "enter a number.")})
        if field.get("type") == "select" and raw not in (None, "") and field.get("options"):
            allowed = [o.get("value") if isinstance(o, dict) else o for o in field["options"]]
            if raw not in allowed:
                issues.append({"field": name, "message": f"{field.get('label') or name}: " + ("请选择列出的选项。" if zh else "choose a listed option.")})
        if field.get("required") and raw in (None, ""):
            label = field.get("label") or name
            issues.append({"field": name, "message": f"请填写“{label}”。" if zh else f"Please fill in \"{label}\"."})
        values[name] = raw
    if issues:
        error = CommitFailed("form_rejected", issues[0]["message"])
        error.details = {"issues": issues}  # type: ignore[attr-defined]
        raise error
    return values


def form_validator_run(validator: Any, values: dict[str, Any], data: Any, locale: str) -> None:
    """Run a plugin's form validator (spec 000 §自定义校验 validation): None passes, a string is a
    whole-form error, {field, message} (or a list) are field errors → CommitFailed("form_rejected");
    a validator that raises → CommitFailed("form_validator_failed")."""
    try:
        verdict = validator(dict(values), data, {"locale": locale, "messages": {}})
    except Exception as exc:  # plugin code
        raise CommitFailed("form_validator_failed", f"The form validator failed: {type(exc).__name__}") from None
    if verdict is None:
        return
    if isinstance(verdict, str):
        issues = [{"message": verdict}]
    else:
        items = verdict if isinstance(verdict, list) else [verdict]
        issues = [{k: v for k, v in dict(i).items() if k in ("field", "message")} for i in items if isinstance(i, dict)]
    if not issues:
        return
    error = CommitFailed("form_rejected", str(issues[0].get("message") or "The form was rejected."))
    error.details = {"issues": issues}  # type: ignore[attr-defined]
    raise error


def answers_resolve(actions: list[dict[str, Any]], pending: list[dict[str, Any]], *, locale: str,
                    form_validators: Any = None) -> list[dict[str, Any]]:
    """For each action with ``interaction``: {turnId, interactionId, type, pluginId, runtimeId,
    values, filledNarrative, echo}; sets the action's text to the filled narrative (when echoed).
    form_validators: (plugin_id, name) → validator callable or None; a form naming a validator
    that cannot be found is rejected (never silently skipped).
    Raises CommitFailed("invalid_interaction_submission" | "interaction_already_submitted" |
    "form_rejected" | "form_validator_failed")."""
    zh = locale.lower().startswith("zh")
    by_key = {(p["turn_id"], p["interaction_id"]): p for p in pending}
    out = []
    for action in actions:
        ref = action.get("interaction")
        if not isinstance(ref, dict):
            continue
        record = by_key.get((ref.get("turnId"), ref.get("interactionId")))
        if record is None:
            from turns.models import InteractionRecord

            if InteractionRecord.objects.filter(turn_id=ref.get("turnId"), interaction_id=ref.get("interactionId")).exclude(status="pending").exists():
                raise CommitFailed("interaction_already_submitted", "这项内容已经提交过了。" if zh else "This interaction was already submitted.")
            raise CommitFailed("invalid_interaction_submission", f"Interaction not found: {ref.get('interactionId')}")
        spec = record["spec"] or {}
        if ref.get("type") and ref.get("type") != record["type"]:
            raise CommitFailed("invalid_interaction_submission", "The interaction type does not match.")
        values = _normalise(spec, action.get("fields") or {}, zh)
        validation = spec.get("validation")
        if isinstance(validation, dict) and validation.get("name"):
            source = spec.get("sourcePluginId") or record["plugin_id"]
            validator = form_validators(source, validation["name"]) if form_validators else None
            if validator is None:
                raise CommitFailed("form_validator_failed", f"Form validator {validation['name']} of {source} is not available.")
            form_validator_run(validator, values, validation.get("data"), locale)
        template_values = dict(values)
        if spec.get("type") == "confirmation":
            template_values["confirmed"] = ("确认" if values["confirmed"] else "取消") if zh else ("confirmed" if values["confirmed"] else "cancelled")
        filled = narrative_fill(str(spec.get("narrativeTemplate") or ""), template_values) if spec.get("narrativeTemplate") else ""
        if not filled and spec.get("type") == "choice":
            filled = str(values.get("selectedLabel") or values.get("selectedId") or "")
        echo = (spec.get("submitBehavior") or {}).get("echoFilledNarrative", True) is not False
        if echo and filled and not action.get("text"):
            action["text"] = filled
        out.append({"turnId": record["turn_id"], "interactionId": record["interaction_id"], "type": record["type"],
                    "pluginId": record["plugin_id"], "runtimeId": record["runtime_id"], "values": values,
                    "filledNarrative": filled, "echo": echo})
    return out
