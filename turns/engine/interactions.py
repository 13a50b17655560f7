"""Interaction answers inside submit_actions (spec 004 §玩家交互 and its 使用说明; spec 000
create-form / create-choices / 交互协议): find the committed interaction an action answers, check
the values with the validator of its type, fill its narrative template; the answer is saved with
the turn that reads it (turns.engine.commit).

One validator per interaction type, reading what the builtin tools write:

- ``form`` (create-form: ``fields`` FormField[]): only declared field names (an unknown one is
  ``invalid_interaction_submission``); text / textarea / select take strings, checkbox booleans,
  number finite numbers or numeric strings (normalised to numbers) — any other JSON type is
  ``invalid_interaction_submission``. What the player got wrong is ``form_rejected`` with one
  ``details.issues`` item per problem, in the session's language: required, not a number,
  ``min`` / ``max``, ``step`` (counted from ``min ?? 0``), an option a select does not list, a text
  longer than MAX_PLAYER_MESSAGE_CHARS, and a filled narrative longer than that (a whole-form
  issue, no ``field``). Missing fields take ``defaultValue`` (also for empty text / select); a
  cleared number stays empty. Then the source plugin's validator (``validation.name``), which must
  be declared in its ``contributes.forms`` and registered by an active, runnable plugin
  (``form_validator_undeclared``, ``form_provider_inactive``, ``form_provider_unavailable``); a
  validator that raises is ``form_validator_failed`` (fixed text; the plugin's own text only in
  the server log).
- ``choice`` (create-choices: ``choices`` [{id, label, ...}]; ``options`` when a plugin wrote
  that instead): ``{selectedId, selectedLabel?}`` only; ``selectedId`` must be one of the offered
  ids, ``selectedLabel`` is replaced by the offered label (a forged label never reaches the story).
- ``confirmation``: ``{confirmed: boolean}`` only.

The values of an interaction answered with a plugin action kind that declares ``fieldsSchema``
must also match that schema (``invalid_action_fields``). Identical answers to the same
interaction in one batch are merged into one; different ones are ``invalid_interaction_submission``.
Without a ``narrativeTemplate`` the answer reads as a fallback narrative with the localized prefix
(``[Player input] name: Ada``; zh-CN ``[玩家输入]``, ru-RU ``[Ввод игрока]``; other locales en-US);
``{{confirmed}}`` is filled with the localized Confirm / Cancel.
"""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable

import jsonschema

from turns.engine.commit import CommitFailed

logger = logging.getLogger("covel.turns.interactions")

PLACEHOLDER_RE = re.compile(r"\{\{\s*([A-Za-z0-9_.\-]+)\s*\}\}")
#: MAX_PLAYER_MESSAGE_CHARS (spec 004 §submit_actions, §form_rejected).
MAX_PLAYER_MESSAGE_CHARS = 100_000

FORM_REJECTED = "form_rejected"
INVALID_SUBMISSION = "invalid_interaction_submission"
ALREADY_SUBMITTED = "interaction_already_submitted"
VALIDATOR_FAILED = "form_validator_failed"
PROVIDER_INACTIVE = "form_provider_inactive"
PROVIDER_UNAVAILABLE = "form_provider_unavailable"
VALIDATOR_UNDECLARED = "form_validator_undeclared"
INVALID_ACTION = "invalid_action"
INVALID_ACTION_FIELDS = "invalid_action_fields"

TEXT_FIELDS = ("text", "textarea", "select")

ZH, EN, RU = "zh-CN", "en-US", "ru-RU"

_TEXTS: dict[str, dict[str, str]] = {
    ZH: {
        "required": "请填写“{label}”。", "number": "“{label}”需要填写数字。", "min": "“{label}”不能小于 {min}。",
        "max": "“{label}”不能大于 {max}。", "step": "“{label}”需要以 {step} 为步长（从 {base} 起）。",
        "option": "请为“{label}”选择列出的选项。", "field_long": "“{label}”最多 {limit} 个字符。",
        "form_long": "这张表单填出的内容超过了 {limit} 个字符，请缩短。",
        "already": "这项内容已经提交过了。请刷新，查看它开始的回合。",
        "validator_failed": "暂时无法校验这张表单，什么都没有保存。请稍后再提交。",
        "confirm": "确认", "cancel": "取消",
        "p_input": "[玩家输入]", "p_choice": "[玩家选择]", "p_confirmed": "[玩家确认]", "p_cancelled": "[玩家取消]",
    },
    EN: {
        "required": "Please fill in “{label}”.", "number": "“{label}” needs a number.",
        "min": "“{label}” must be at least {min}.", "max": "“{label}” must be at most {max}.",
        "step": "“{label}” goes in steps of {step} from {base}.",
        "option": "Choose one of the listed options for “{label}”.",
        "field_long": "“{label}” can be at most {limit} characters.",
        "form_long": "The filled-in form is longer than {limit} characters; please shorten it.",
        "already": "This was already submitted. Refresh to follow the turn it started.",
        "validator_failed": "The form could not be checked right now; nothing was saved. Please submit it again later.",
        "confirm": "Confirm", "cancel": "Cancel",
        "p_input": "[Player input]", "p_choice": "[Player choice]", "p_confirmed": "[Player confirmed]",
        "p_cancelled": "[Player cancelled]",
    },
    RU: {
        "required": "Заполните поле «{label}».", "number": "В поле «{label}» нужно число.",
        "min": "Значение «{label}» должно быть не меньше {min}.", "max": "Значение «{label}» должно быть не больше {max}.",
        "step": "Значение «{label}» меняется с шагом {step} от {base}.",
        "option": "Выберите для «{label}» один из предложенных вариантов.",
        "field_long": "Поле «{label}» может содержать не больше {limit} символов.",
        "form_long": "Заполненная форма длиннее {limit} символов; сократите её.",
        "already": "Это уже отправлено. Обновите страницу, чтобы увидеть начатый ход.",
        "validator_failed": "Сейчас не удалось проверить форму; ничего не сохранено. Отправьте её позже.",
        "confirm": "Подтвердить", "cancel": "Отмена",
        "p_input": "[Ввод игрока]", "p_choice": "[Выбор игрока]", "p_confirmed": "[Игрок подтвердил]",
        "p_cancelled": "[Игрок отменил]",
    },
}


def interaction_locale(locale: str | None) -> str:
    """The built-in texts' locale for a session locale: zh-CN, ru-RU, or en-US for any other."""
    language = (locale or "").replace("_", "-").lower().split("-")[0]
    return {"zh": ZH, "ru": RU}.get(language, EN)


def interaction_text(locale: str | None, key: str, **values: Any) -> str:
    """One built-in player-facing text (see ``_TEXTS``) in the session's language."""
    return _TEXTS[interaction_locale(locale)][key].format(**values)


class AnswerRejected(CommitFailed):
    """An answer refused before anything was written: the stream's single ``error.occurred``
    ``{message, code, details?}`` (spec 004 §玩家交互 拒绝)."""

    def __init__(self, code: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(code, message)
        self.details = details


def _form_rejected(issues: list[dict[str, Any]]) -> AnswerRejected:
    # details.issues lists every problem at once; message is their texts joined by newlines (spec).
    return AnswerRejected(FORM_REJECTED, "\n".join(str(i["message"]) for i in issues), {"issues": issues})


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


def _number_text(value: float | int) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _number_parse(raw: Any) -> tuple[bool, Any]:
    """(is a number, the number) of a submitted number value; int when integral."""
    if isinstance(raw, bool):
        raise AnswerRejected(INVALID_SUBMISSION, "A number field takes a number, not a boolean")
    if isinstance(raw, (int, float)):
        number = raw
    elif isinstance(raw, str):
        try:
            number = float(raw.strip())
        except ValueError:
            return False, raw
    else:
        raise AnswerRejected(INVALID_SUBMISSION, f"A number field takes a number, not {type(raw).__name__}")
    if not math.isfinite(number):
        return False, raw
    return True, int(number) if float(number).is_integer() else float(number)


def _step_ok(value: float, step: float, base: float) -> bool:
    ratio = (value - base) / step
    return abs(ratio - round(ratio)) <= 1e-9 * max(1.0, abs(ratio))


def _option_values(field_spec: dict[str, Any]) -> list[Any]:
    return [o.get("value") if isinstance(o, dict) else o for o in field_spec.get("options") or []]


def form_values(spec: dict[str, Any], fields: dict[str, Any], locale: str) -> dict[str, Any]:
    """The normalised values of a form answer (module docstring). Raises AnswerRejected
    (invalid_interaction_submission for a shape a client should not send, form_rejected with every
    issue otherwise)."""
    declared = [f for f in spec.get("fields") or [] if isinstance(f, dict) and isinstance(f.get("name"), str)]
    names = {f["name"] for f in declared}
    unknown = sorted(set(fields) - names)
    if unknown:
        raise AnswerRejected(INVALID_SUBMISSION, f"Unknown form field: {unknown[0]}")
    values: dict[str, Any] = {}
    issues: list[dict[str, Any]] = []

    def issue(name: str, key: str, **extra: Any) -> None:
        issues.append({"field": name, "message": interaction_text(locale, key, **extra)})

    for item in declared:
        name, kind = item["name"], item.get("type")
        label = item.get("label") or name
        present = name in fields
        raw = fields.get(name)
        has_default = "defaultValue" in item
        if kind == "number":
            if not present:
                value = item["defaultValue"] if has_default else None
            elif raw is None or (isinstance(raw, str) and not raw.strip()):
                value = None  # cleared: neither 0 nor the default (spec 000 create-form)
            else:
                ok, value = _number_parse(raw)
                if not ok:
                    issue(name, "number", label=label)
                    values[name] = raw
                    continue
            if value is not None:
                lo, hi, step = item.get("min"), item.get("max"), item.get("step")
                if isinstance(lo, (int, float)) and value < lo:
                    issue(name, "min", label=label, min=_number_text(lo))
                elif isinstance(hi, (int, float)) and value > hi:
                    issue(name, "max", label=label, max=_number_text(hi))
                elif isinstance(step, (int, float)) and step > 0:
                    base = lo if isinstance(lo, (int, float)) else 0
                    if not _step_ok(float(value), float(step), float(base)):
                        issue(name, "step", label=label, step=_number_text(step), base=_number_text(base))
        elif kind == "checkbox":
            if present and raw is not None and not isinstance(raw, bool):
                raise AnswerRejected(INVALID_SUBMISSION, f"Field {name} takes true or false")
            value = raw if isinstance(raw, bool) else (item["defaultValue"] if has_default else False)
        else:
            if present and raw is not None and not isinstance(raw, str):
                raise AnswerRejected(INVALID_SUBMISSION, f"Field {name} takes a string")
            value = raw if isinstance(raw, str) and raw != "" else (item["defaultValue"] if has_default else (raw if present else None))
            if value not in (None, "") and kind == "select" and item.get("options") and value not in _option_values(item):
                issue(name, "option", label=label)
            elif isinstance(value, str) and len(value) > MAX_PLAYER_MESSAGE_CHARS:
                issue(name, "field_long", label=label, limit=MAX_PLAYER_MESSAGE_CHARS)
        if item.get("required") and (value is None or value == ""):
            issue(name, "required", label=label)
        values[name] = value
    if issues:
        raise _form_rejected(issues)
    return values


def choice_values(spec: dict[str, Any], fields: dict[str, Any]) -> dict[str, Any]:
    """``{selectedId, selectedLabel}`` of a choice answer; the label is the offered one. Raises
    AnswerRejected(invalid_interaction_submission) for other fields, a missing or unoffered id."""
    unknown = sorted(set(fields) - {"selectedId", "selectedLabel"})
    if unknown:
        raise AnswerRejected(INVALID_SUBMISSION, f"Unknown choice field: {unknown[0]}")
    selected = fields.get("selectedId")
    if not isinstance(selected, str) or not selected:
        raise AnswerRejected(INVALID_SUBMISSION, "A choice answer needs selectedId")
    if "selectedLabel" in fields and not isinstance(fields["selectedLabel"], str):
        raise AnswerRejected(INVALID_SUBMISSION, "selectedLabel must be a string")
    offered = spec.get("choices") if isinstance(spec.get("choices"), list) else spec.get("options")
    for option in offered if isinstance(offered, list) else []:
        option_id = (option.get("id", option.get("value")) if isinstance(option, dict) else option)
        if option_id == selected:
            label = option.get("label") if isinstance(option, dict) else None
            return {"selectedId": selected, "selectedLabel": label if isinstance(label, str) and label else selected}
    raise AnswerRejected(INVALID_SUBMISSION, f"Choice {selected!r} is not one of the offered choices")


def confirmation_values(fields: dict[str, Any]) -> dict[str, Any]:
    """``{confirmed}`` of a confirmation answer. Raises AnswerRejected(invalid_interaction_submission)
    unless ``fields`` is exactly ``{confirmed: <boolean>}``."""
    unknown = sorted(set(fields) - {"confirmed"})
    if unknown:
        raise AnswerRejected(INVALID_SUBMISSION, f"Unknown confirmation field: {unknown[0]}")
    if not isinstance(fields.get("confirmed"), bool):
        raise AnswerRejected(INVALID_SUBMISSION, "confirmed must be true or false")
    return {"confirmed": fields["confirmed"]}


def answer_narrative(spec: dict[str, Any], values: dict[str, Any], locale: str) -> str:
    """The answer's filledNarrative: the template filled with ``values`` ({{confirmed}} localized), or
    the fallback narrative with the localized prefix when the interaction has no template."""
    kind = spec.get("type")
    template_values = dict(values)
    if kind == "confirmation":
        template_values["confirmed"] = interaction_text(locale, "confirm" if values["confirmed"] else "cancel")
    template = spec.get("narrativeTemplate")
    if isinstance(template, str) and template.strip():
        return narrative_fill(template, template_values)
    if kind == "choice":
        return f"{interaction_text(locale, 'p_choice')} {values.get('selectedLabel') or values.get('selectedId')}"
    if kind == "confirmation":
        prefix = interaction_text(locale, "p_confirmed" if values["confirmed"] else "p_cancelled")
        lead = spec.get("prompt") or spec.get("title")
        return f"{prefix} {lead}" if isinstance(lead, str) and lead.strip() else prefix
    parts = [f"{name}: {narrative_fill('{{v}}', {'v': value})}" for name, value in values.items() if value not in (None, "")]
    return f"{interaction_text(locale, 'p_input')} {', '.join(parts)}".rstrip()


def form_validator_run(validator: Any, values: dict[str, Any], data: Any, locale: str) -> None:
    """Run a plugin's form validator (spec 000 §自定义校验 validation): None passes, a string is a
    whole-form error, ``{field, message}`` (or a list) are field errors (a ``field`` that is not a
    form field becomes a whole-form error) → AnswerRejected(form_rejected); a validator that raises →
    AnswerRejected(form_validator_failed) with a fixed text (the exception only in the log)."""
    try:
        verdict = validator(dict(values), data, {"locale": locale, "messages": {}})
    except Exception:  # plugin code
        logger.exception("form validator raised")
        raise AnswerRejected(VALIDATOR_FAILED, interaction_text(locale, "validator_failed")) from None
    if verdict is None:
        return
    if isinstance(verdict, str):
        issues = [{"message": verdict}]
    else:
        items = verdict if isinstance(verdict, list) else [verdict]
        issues = []
        for item in items:
            if not isinstance(item, dict) or not isinstance(item.get("message"), str):
                continue
            issue = {"message": item["message"]}
            if isinstance(item.get("field"), str) and item["field"] in values:
                issue["field"] = item["field"]
            issues.append(issue)
    if issues:
        raise _form_rejected(issues)


def form_provider_problem(*, plugin_id: str, name: str, is_active: bool, record: Any) -> tuple[str, str] | None:
    """Why a form's validator ``name`` of ``plugin_id`` cannot run, as (code, message), or None.

    is_active: the session has the plugin enabled (selected and not paused); record: its loaded
    registry record when it can run (None: uninstalled, failed to load, unavailable).
    form_provider_inactive: disabled in the session; form_provider_unavailable: enabled but not
    runnable, or its entry did not register the validator; form_validator_undeclared: not in its
    ``contributes.forms`` (the form must be issued again; no approval fixes it).
    """
    if not is_active:
        return PROVIDER_INACTIVE, f"The plugin {plugin_id} that checks this form is not enabled in this session"
    if record is None:
        return PROVIDER_UNAVAILABLE, f"The plugin {plugin_id} that checks this form cannot run now"
    if name not in (record.manifest.contributes.forms or {}):
        return VALIDATOR_UNDECLARED, f"Form validator {name} is not declared by {plugin_id}"
    if not getattr(record, "is_code_pending", False) and name not in record.registrations.form_validators:
        return PROVIDER_UNAVAILABLE, f"The plugin {plugin_id} did not register its form validator {name}"
    return None


def form_validator_lookup(env: Any, plugin_id: str, name: str) -> Callable[..., Any]:
    """The callable of form validator ``name`` of ``plugin_id`` in this execution (``env``: the
    ExecutionEnv; only its active, loaded, unpaused plugins count). Raises AnswerRejected with
    form_provider_inactive / form_provider_unavailable / form_validator_undeclared, or
    approval_required when a community plugin's server code is not granted in the session."""
    from sessions.faults import plugins_paused

    snapshot = env.snapshot
    is_active = plugin_id in snapshot.active_plugins and plugin_id not in plugins_paused(snapshot.metadata)
    record = env.plugin(plugin_id)
    problem = form_provider_problem(plugin_id=plugin_id, name=name, is_active=is_active, record=record)
    if problem is not None:
        raise AnswerRejected(*problem)
    missing = env.code_denial(plugin_id, None)
    if missing is not None:
        raise AnswerRejected("approval_required", f"{missing} is not granted for this session")
    if record.is_code_pending:
        record = env.plugin_registry.entry_ensure(plugin_id)
    registration = record.registrations.form_validators.get(name) if record is not None and record.is_loaded else None
    if registration is None:
        raise AnswerRejected(PROVIDER_UNAVAILABLE, f"The plugin {plugin_id} did not register its form validator {name}")
    return registration.target


@dataclass
class AnswerBatch:
    """answers: one per answered interaction ``{turnId, interactionId, type, pluginId, runtimeId,
    values, filledNarrative, echo, saved}`` (``saved``: recorded by an earlier start of the turn
    being recovered; never saved again); actions: the submission's actions with identical duplicate
    answers merged and each answer's text set to its filled narrative (when echoed)."""

    answers: list[dict[str, Any]] = field(default_factory=list)
    actions: list[dict[str, Any]] = field(default_factory=list)


def answers_resolve(actions: list[dict[str, Any]], pending: list[dict[str, Any]], *, locale: str, session_id: str,
                    form_validators: Callable[[str, str], Callable[..., Any]] | None = None,
                    kind_schemas: dict[str, dict[str, Any]] | None = None,
                    saved: dict[tuple[str, str], dict[str, Any]] | None = None) -> AnswerBatch:
    """Check every interaction answer of a submission (module docstring); nothing is written here.

    pending: the session's unanswered interactions (SessionSnapshot.pending_interactions).
    form_validators(plugin_id, name) → the validator callable, raising AnswerRejected when it cannot
    run (``form_validator_lookup``). kind_schemas: ``fieldsSchema`` of the plugin action kinds by
    kind. saved: answers a recovered turn already saved (turns.engine.retry.Recovery.answered).
    Raises AnswerRejected: invalid_interaction_submission, interaction_already_submitted,
    form_rejected, form_validator_failed, form_provider_*, form_validator_undeclared,
    invalid_action_fields, and invalid_action when the actions' text with the filled answers
    exceeds MAX_PLAYER_MESSAGE_CHARS.
    """
    from turns.models import InteractionRecord

    by_key = {(p["turn_id"], p["interaction_id"]): p for p in pending}
    saved = saved or {}
    answers: list[dict[str, Any]] = []
    seen: dict[tuple[str, str], dict[str, Any]] = {}
    kept: list[dict[str, Any]] = []
    for action in actions:
        ref = action.get("interaction")
        if not isinstance(ref, dict):
            kept.append(action)
            continue
        key = (ref.get("turnId"), ref.get("interactionId"))
        record = by_key.get(key)
        if record is None:
            row = InteractionRecord.objects.filter(session_id=session_id, turn_id=key[0], interaction_id=key[1]).first()
            if row is None:
                raise AnswerRejected(INVALID_SUBMISSION, f"Interaction not found: {key[1]}")
            record = {"turn_id": row.turn_id, "interaction_id": row.interaction_id, "type": row.type,
                      "plugin_id": row.plugin_id, "runtime_id": row.runtime_id, "spec": row.spec, "status": row.status}
        spec = record["spec"] if isinstance(record.get("spec"), dict) else {}
        if ref.get("type") != record["type"]:
            raise AnswerRejected(INVALID_SUBMISSION, "The interaction type does not match the committed interaction")
        validation = spec.get("validation") if record["type"] == "form" else None
        validator = None
        if isinstance(validation, dict) and isinstance(validation.get("name"), str):
            source = spec.get("sourcePluginId") or record["plugin_id"]
            # The provider checks (and its approval) come before "already answered" (spec 004 §玩家交互).
            validator = form_validators(source, validation["name"]) if form_validators else None
            if validator is None:
                raise AnswerRejected(PROVIDER_UNAVAILABLE, f"Form validator {validation['name']} of {source} is not available")
        if key in saved:
            answer = _saved_answer(record, saved[key])
        else:
            if record.get("status", "pending") != "pending":
                raise AnswerRejected(ALREADY_SUBMITTED, interaction_text(locale, "already"))
            answer = _answer(record, spec, action, locale, validator, validation, kind_schemas or {})
        previous = seen.get(key)
        if previous is not None:
            if previous["values"] == answer["values"] and previous["kind"] == action.get("kind") and \
                    previous["actor"] == (action.get("seatId"), action.get("actorId")):
                continue  # the same answer twice in one batch: one (spec §使用说明)
            raise AnswerRejected(INVALID_SUBMISSION, f"Interaction {key[1]} is answered twice with different values")
        seen[key] = {"values": answer["values"], "kind": action.get("kind"), "actor": (action.get("seatId"), action.get("actorId"))}
        if answer["echo"] and answer["filledNarrative"] and not action.get("text"):
            action["text"] = answer["filledNarrative"]
        answers.append(answer)
        kept.append(action)
    total = sum(len(a.get("text") or "") for a in kept)
    if total > MAX_PLAYER_MESSAGE_CHARS:
        raise AnswerRejected(INVALID_ACTION, f"The actions' text with the filled answers totals {total} characters; "
                                             f"the limit is {MAX_PLAYER_MESSAGE_CHARS}")
    return AnswerBatch(answers=answers, actions=kept)


def _answer(record: dict[str, Any], spec: dict[str, Any], action: dict[str, Any], locale: str, validator: Any,
            validation: Any, kind_schemas: dict[str, dict[str, Any]]) -> dict[str, Any]:
    fields = action.get("fields") if isinstance(action.get("fields"), dict) else {}
    kind = record["type"]
    if kind == "choice":
        values = choice_values(spec, fields)
    elif kind == "confirmation":
        values = confirmation_values(fields)
    elif kind == "form":
        values = form_values(spec, fields, locale)
    else:
        raise AnswerRejected(INVALID_SUBMISSION, f"Unknown interaction type: {kind}")
    filled = answer_narrative(spec, values, locale)
    if kind == "form" and len(filled) > MAX_PLAYER_MESSAGE_CHARS:
        raise _form_rejected([{"message": interaction_text(locale, "form_long", limit=MAX_PLAYER_MESSAGE_CHARS)}])
    if validator is not None:
        form_validator_run(validator, values, validation.get("data"), locale)
    schema = kind_schemas.get(str(action.get("kind")))
    if schema is not None:
        problems = list(jsonschema.validators.validator_for(schema)(schema).iter_errors(values))
        if problems:
            raise AnswerRejected(INVALID_ACTION_FIELDS, f"The answer does not match {action.get('kind')}: {problems[0].message}",
                                 {"issues": [{"path": [str(p) for p in e.absolute_path], "message": e.message} for e in problems]})
    echo = (spec.get("submitBehavior") or {}).get("echoFilledNarrative", True) is not False
    return {"turnId": record["turn_id"], "interactionId": record["interaction_id"], "type": kind,
            "pluginId": record["plugin_id"], "runtimeId": record["runtime_id"], "values": values,
            "filledNarrative": filled, "echo": echo, "saved": False}


def _saved_answer(record: dict[str, Any], stored: dict[str, Any]) -> dict[str, Any]:
    spec = record["spec"] if isinstance(record.get("spec"), dict) else {}
    echo = (spec.get("submitBehavior") or {}).get("echoFilledNarrative", True) is not False
    return {"turnId": record["turn_id"], "interactionId": record["interaction_id"], "type": record["type"],
            "pluginId": record["plugin_id"], "runtimeId": record["runtime_id"], "values": stored.get("values") or {},
            "filledNarrative": str(stored.get("filledNarrative") or ""), "echo": echo, "saved": True}
