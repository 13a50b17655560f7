"""Offline answers of world generation for the `scripted` model provider.

The scripted provider (turns/engine/providers/scripted.py) asks ``respond(turn)`` of the folder
named by the request's ``plugin_root``; jobs/worldgen.py points it here. ``turn["worldgen"]``:
``{part, concept, locale, accepted: {manifest?, characters?, ...}, contract?: {contract, schema,
example}}``. Each answer is the text a real model would write for that part: YAML (manifest,
characters, lorebook, rules, contract records) or Markdown (lore). Everything is derived from the
concept, so the same request always gives the same world.
"""
from __future__ import annotations

import hashlib
import json
import re
from typing import Any

import yaml


def _zh(locale: str) -> bool:
    return (locale or "").lower().startswith("zh")


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:8]


def _world_id(concept: str) -> str:
    words = re.findall(r"[a-z0-9]+", concept.lower())[:4]
    slug = "-".join(words)
    if not slug or not slug[0].isalpha():
        slug = "world"
    return f"{slug[:40]}-{_digest(concept)[:6]}"


def _name(concept: str, zh: bool) -> str:
    first = re.split(r"[，。,.;；！!？?]", concept.strip(), maxsplit=1)[0].strip() or concept.strip()
    if zh:
        return first[:16] or "无名之地"
    words = first.split()[:5]
    return " ".join(w[:1].upper() + w[1:] for w in words) or "Nameless Land"


def _opening_kit(concept: str, zh: bool) -> dict[str, Any]:
    """Two numeric starting resources and the startingConditions dimension, from the concept."""
    place = _name(concept, zh)
    return {
        "supplies": {"name": "补给" if zh else "Supplies", "schema": {"type": "integer", "minimum": 0, "maximum": 20},
                     "initialValue": 6, "updateRule": "每段旅程消耗一份。" if zh else "One is used up per leg of a journey."},
        "coin": {"name": "钱币" if zh else "Coin", "schema": {"type": "integer", "minimum": 0},
                 "initialValue": 12, "updateRule": "买卖时增减。" if zh else "Changes when something is bought or sold."},
        "startingConditions": {
            "name": "开局" if zh else "Opening",
            "schema": {"type": "object", "properties": {"openingScenario": {"type": "string"},
                                                         "startingLocation": {"type": "string"},
                                                         "openingChoices": {"type": "array", "items": {"type": "string"}}}},
            "initialValue": {
                "openingScenario": f"你刚抵达{place}，城门正要关闭。" if zh else f"You arrive at {place} as the gate is closing.",
                "startingLocation": "城门" if zh else "The gate",
                "openingChoices": (["赶在关门前进城", "在城外扎营", "去找守门人求情"] if zh else
                                   ["Slip in before the gate shuts", "Camp outside the walls", "Plead with the gatekeeper"]),
            },
        },
    }


def _manifest(concept: str, locale: str, *, opening_kit: bool = False) -> dict[str, Any]:
    zh = _zh(locale)
    manifest = _manifest_base(concept, locale, zh)
    if opening_kit:
        manifest["dimensions"].update(_opening_kit(concept, zh))
    return manifest


def _manifest_base(concept: str, locale: str, zh: bool) -> dict[str, Any]:
    return {
        "id": _world_id(concept),
        "name": _name(concept, zh),
        "summary": concept.strip()[:400],
        "tags": ["generated", "adventure"],
        "dimensions": {
            "tension": {
                "name": "紧张度" if zh else "Tension",
                "description": "局势有多紧绷，0 平静，10 一触即发。" if zh else "How close things are to breaking: 0 calm, 10 about to snap.",
                "schema": {"type": "integer", "minimum": 0, "maximum": 10},
                "initialValue": 2,
                "updateRule": "冲突升级时加一，化解时减一。" if zh else "Add one when a conflict escalates, subtract one when it is defused.",
            },
        },
    }


def _lore(concept: str, name: str, zh: bool) -> str:
    if zh:
        return (
            f"# {name}\n\n{concept.strip()}\n\n## 这片土地\n\n"
            f"{name}的人们习惯了眼前的一切，直到最近的一些变化让每个人都开始不安。\n\n"
            "## 冒险入口\n\n"
            "1. 一封没有署名的信，约你在黄昏时分见面。\n"
            "2. 集市上有人高价收购一件谁也说不清来历的旧物。\n"
            "3. 最年长的向导失踪了，只留下一张画了一半的地图。\n"
        )
    return (
        f"# {name}\n\n{concept.strip()}\n\n## The land\n\n"
        f"People in {name} were used to the way things were, until a few recent changes set everyone on edge.\n\n"
        "## Ways in\n\n"
        "1. An unsigned letter asks you to a meeting at dusk.\n"
        "2. Someone at the market pays too much for an old object nobody can place.\n"
        "3. The oldest guide has vanished, leaving half a map behind.\n"
    )


def _characters(zh: bool) -> list[dict[str, Any]]:
    if zh:
        return [
            {"id": "player-traveler", "name": "旅人", "type": "player", "description": "刚到此地的外来者，带着一个不愿提起的理由。"},
            {"id": "npc-keeper", "name": "守门人阿岚", "type": "npc", "description": "沉默寡言的守门人，知道每个人进出的时间。"},
            {"id": "npc-merchant", "name": "商人季礼", "type": "npc", "description": "笑容可掬的商人，生意总在不该成交的时候成交。"},
        ]
    return [
        {"id": "player-traveler", "name": "The Traveler", "type": "player", "description": "A newcomer with a reason for coming they would rather not explain."},
        {"id": "npc-keeper", "name": "Alan the Gatekeeper", "type": "npc", "description": "A quiet gatekeeper who knows when everyone comes and goes."},
        {"id": "npc-merchant", "name": "Jilly the Merchant", "type": "npc", "description": "A cheerful trader whose deals close exactly when they should not."},
    ]


def _lorebook(name: str, zh: bool) -> list[dict[str, Any]]:
    if zh:
        rows = [("the-gate", ["城门", "守门人"], "城门在日落后关闭，只有守门人能破例。"),
                ("the-market", ["集市"], "集市每七天开一次，外地货物只在这里出现。"),
                ("old-map", ["地图", "向导"], "向导的地图只画了北边，南边是一片空白。"),
                ("the-letter", ["信", "黄昏"], "近来有好几个人收到过同样笔迹的信。")]
    else:
        rows = [("the-gate", ["gate", "gatekeeper"], f"The gate of {name} shuts at sunset; only the gatekeeper can make an exception."),
                ("the-market", ["market"], "The market opens every seventh day; goods from outside appear nowhere else."),
                ("old-map", ["map", "guide"], "The guide's map covers only the north; the south is blank."),
                ("the-letter", ["letter", "dusk"], "Several people have lately received letters in the same hand.")]
    return [{"id": i, "keys": k, "content": c} for i, k, c in rows]


def _rules(zh: bool) -> list[dict[str, Any]]:
    if zh:
        rows = [("rule-curfew", "宵禁", "日落后在外游荡的人会被盘问。"),
                ("rule-debts", "欠债", "在这里欠下的人情必须在下一个集市日之前还清。"),
                ("rule-strangers", "外人", "外来者不能独自进入南边的荒地。")]
    else:
        rows = [("rule-curfew", "Curfew", "Anyone out after sunset gets questioned."),
                ("rule-debts", "Debts", "A favour owed here must be repaid before the next market day."),
                ("rule-strangers", "Strangers", "Outsiders may not enter the southern waste alone.")]
    return [{"id": i, "title": t, "content": c} for i, t, c in rows]


def _revision(instruction: str, current: dict[str, Any], zh: bool) -> str:
    """A revision answer derived from the instruction: one new character who embodies it (the
    other sections UNCHANGED), and the instruction noted in the summary."""
    taken = {c.get("id") for c in current.get("characters") or [] if isinstance(c, dict)}
    cid = f"npc-revision-{_digest(instruction)[:6]}"
    while cid in taken:
        cid += "x"
    character = {"id": cid, "name": ("新角色" if zh else "The Newcomer") + f" {_digest(instruction)[:4]}", "type": "npc",
                 "description": (f"按修改要求加入：{instruction}" if zh else f"Added for the request: {instruction}")[:400]}
    summary = str((current.get("manifest") or {}).get("summary") or "").strip()
    note = (f"（修订：{instruction}）" if zh else f" (Revised: {instruction})")[:300]
    return ("=== WORLD_YAML ===\n" + yaml.safe_dump({"summary": summary + note}, allow_unicode=True, sort_keys=False)
            + "=== WORLD_MD ===\nUNCHANGED\n=== WORLD_PACKAGE_YAML ===\n"
            + yaml.safe_dump({"characters": [character]}, allow_unicode=True, sort_keys=False))


def respond(turn: dict[str, Any]) -> dict[str, Any] | None:
    job = turn.get("worldgen")
    if not isinstance(job, dict):
        return None
    part = job.get("part")
    concept = str(job.get("concept") or "")
    locale = str(job.get("locale") or "zh-CN")
    zh = _zh(locale)
    accepted = job.get("accepted") or {}
    name = (accepted.get("manifest") or {}).get("name") or _name(concept, zh)
    if part == "translate":
        # A recognisable draft: every text tagged with the target locale, placeholders kept.
        texts = job.get("texts") or {}
        return {"text": json.dumps({k: f"[{locale}] {v}" for k, v in texts.items()}, ensure_ascii=False)}
    if part == "revision":
        return {"text": _revision(str(job.get("instruction") or ""), job.get("current") or {}, zh)}
    if part == "manifest":
        kit = "opening-kit" in ((job.get("brief") or {}).get("content") or [])
        return {"text": yaml.safe_dump(_manifest(concept, locale, opening_kit=kit), allow_unicode=True, sort_keys=False)}
    if part == "lore":
        return {"text": _lore(concept, name, zh)}
    if part == "characters":
        return {"text": yaml.safe_dump(_characters(zh), allow_unicode=True, sort_keys=False)}
    if part == "lorebook":
        return {"text": yaml.safe_dump(_lorebook(name, zh), allow_unicode=True, sort_keys=False)}
    if part == "rules":
        return {"text": yaml.safe_dump(_rules(zh), allow_unicode=True, sort_keys=False)}
    if isinstance(part, str) and part.startswith("contract:"):
        contract = job.get("contract") or {}
        example = contract.get("example")
        if example is None:
            from turns.engine.providers.scripted import schema_sample

            example = schema_sample(contract.get("schema") or {}, "value")
        return {"text": "```json\n" + json.dumps(example, ensure_ascii=False, indent=2) + "\n```"}
    return None
