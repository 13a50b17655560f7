"""branch-reply function runtime: seed each story reply as candidate 0 (post-turn) and, on a
manual run, create alternative tellings or accept one (PLUGIN.md has the payloads).

Records: `turns/<turnKey>` = `{turnKey, turn, baseText, candidates: [{id, text, source}],
acceptedId}` and `message/<turnKey>` = `{turnKey, count, acceptedId, acceptedIndex, text}`;
`turnKey` is `turn-<logical turn>`. Every change also renders the `branch-reply.block` part.
"""

from __future__ import annotations

import unicodedata
from pathlib import Path
from typing import Any

TURNS, MESSAGE = "turns", "message"
UI_PART_TYPE = "branch-reply.block"
MIN_SET, MAX_SET = 2, 3
PROMPTS = Path(__file__).resolve().parents[1] / "prompts"


def _norm(text: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", text or "").casefold().split())


def _zh(locale: str | None) -> bool:
    return bool(locale) and str(locale).lower().startswith("zh")


def _failed(code: str, message: str) -> dict[str, Any]:
    return {"status": "failed", "error": {"code": code, "message": message}}


def _block(record: dict[str, Any], zh: bool) -> dict[str, Any]:
    index = next((i for i, c in enumerate(record["candidates"]) if c["id"] == record["acceptedId"]), 0)
    count = len(record["candidates"])
    label = f"第 {index + 1} / {count} 种讲法" if zh else f"Telling {index + 1} of {count}"
    message = {"turnKey": record["turnKey"], "count": count, "acceptedId": record["acceptedId"], "acceptedIndex": index,
               "text": record["candidates"][index]["text"]}
    part = {"id": f"branch-reply-{record['turnKey']}", "type": UI_PART_TYPE, "status": "success",
            "content": {**message, "label": label, "candidates": record["candidates"]}}
    return message, {"parts": [part]}


def _save(ctx, record: dict[str, Any]) -> dict[str, Any]:
    message, block = _block(record, _zh(ctx.locale))
    ctx.plugin_data.set(TURNS, record["turnKey"], record)
    ctx.plugin_data.set(MESSAGE, record["turnKey"], message)
    return {"turnKey": record["turnKey"], "candidates": record["candidates"], "acceptedId": record["acceptedId"],
            "proposals": [{"type": "ui.render", "payload": block}]}


def _seed(ctx) -> dict[str, Any] | None:
    text = ctx.inputs.get("narrative")
    if not isinstance(text, str) or not text.strip() or ctx.logical_turn is None:
        return None
    key = f"turn-{ctx.logical_turn}"
    existing = ctx.plugin_data.get(TURNS, key, None)
    if isinstance(existing, dict) and existing.get("baseText") == text:
        return None
    record = {"turnKey": key, "turn": ctx.logical_turn, "baseText": text,
              "candidates": [{"id": f"{key}-candidate-0", "text": text, "source": "original"}], "acceptedId": f"{key}-candidate-0"}
    return _save(ctx, record)


def _rewrite(ctx, base: str, taken: list[str]) -> str | None:
    """One alternative telling from the plugin's model slot, or None (no answer, or a repeat)."""
    zh = _zh(ctx.locale)
    instruction = (PROMPTS / ("rewrite.zh-CN.md" if zh else "rewrite.en-US.md")).read_text(encoding="utf-8").strip()
    try:
        answer = ctx.model.complete([{"role": "system", "content": instruction}, {"role": "user", "content": base}],
                                    context={"branch_reply": {"baseText": base, "variant": len(taken)}})
    except Exception as exc:  # noqa: BLE001 - the model is optional here: no answer means no alternative (never filler)
        ctx.log(f"createCandidates: no alternative ({type(exc).__name__})")
        return None
    text = str((answer or {}).get("text") or "").strip()
    if not text or _norm(text) in {_norm(t) for t in taken}:
        return None
    return text


def _create(ctx, payload: dict[str, Any]) -> dict[str, Any]:
    key = payload.get("turnId")
    record = ctx.plugin_data.get(TURNS, key, None) if isinstance(key, str) and key else None
    base = payload.get("baseText") if isinstance(payload.get("baseText"), str) and payload["baseText"].strip() else None
    if record is None:
        if base is None:
            return _failed("not-found", f"turnId: no reply {key!r} (use the block's turnKey, turn-<n>)")
        record = {"turnKey": key, "turn": None, "baseText": base,
                  "candidates": [{"id": f"{key}-candidate-0", "text": base, "source": "original"}], "acceptedId": f"{key}-candidate-0"}
    count = payload.get("count", MAX_SET)
    if isinstance(count, bool) or not isinstance(count, int) or not MIN_SET <= count <= MAX_SET:
        return _failed("invalid-input", f"count: a whole number from {MIN_SET} to {MAX_SET}")
    record = {**record, "candidates": list(record["candidates"])}
    source = base or record["baseText"]
    for _ in range(count - len(record["candidates"])):
        text = _rewrite(ctx, source, [c["text"] for c in record["candidates"]])
        if text is None:
            break
        record["candidates"].append({"id": f"{key}-candidate-{len(record['candidates'])}", "text": text, "source": "alternative"})
    return _save(ctx, record)


def _accept(ctx, payload: dict[str, Any]) -> dict[str, Any]:
    key = payload.get("turnId")
    record = ctx.plugin_data.get(TURNS, key, None) if isinstance(key, str) and key else None
    if record is None:
        return _failed("not-found", f"turnId: no reply {key!r}")
    wanted = payload.get("candidateId")
    if not any(c["id"] == wanted for c in record["candidates"]):
        return _failed("not-found", f"candidateId: {wanted!r} is not a candidate of {key}")
    return _save(ctx, {**record, "acceptedId": wanted})


def handle(ctx) -> dict[str, Any] | None:
    payload = ctx.manual_payload
    if not isinstance(payload, dict) or not payload:
        return _seed(ctx)
    action = payload.get("action")
    if action == "createCandidates":
        return _create(ctx, payload)
    if action == "acceptCandidate":
        return _accept(ctx, payload)
    return _failed("invalid-input", "action: createCandidates or acceptCandidate")
