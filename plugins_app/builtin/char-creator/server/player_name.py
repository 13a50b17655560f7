"""The `player-name` form validator and the salted name digests it compares (spec 000, 自定义校验
validation; World Model: a player is never an existing character).

validation.data travels to the client, so it carries only salted digests of the normalised names
and aliases of the characters that existed when the form was issued, never the names.
"""

from __future__ import annotations

import hashlib
import secrets
from typing import Any, Iterable

from plugins_app.toolkit import normalize_name

VALIDATOR_NAME = "player-name"
NAME_FIELD = "characterName"

_MESSAGES = {
    "zh": "「{name}」已经是这个世界里另一个角色的名字或别名，请换一个名字。",
    "en": '"{name}" is already the name or alias of another character in this world. Please choose a different name.',
}


def name_digest(salt: str, name: str) -> str:
    """Hex sha256 of `salt:normalised name` (normalisation as sync-characters compares names)."""
    return hashlib.sha256(f"{salt}:{normalize_name(name)}".encode()).hexdigest()


def validation_data(names: Iterable[str], *, salt: str | None = None) -> dict[str, Any]:
    """`{salt, names: [digest]}` for the names taken by existing characters (sorted, deduped)."""
    salt = salt or secrets.token_hex(8)
    return {"salt": salt, "names": sorted({name_digest(salt, n) for n in names if n.strip()})}


def validate_player_name(values: dict[str, Any], data: Any, context: dict[str, Any] | None = None) -> Any:
    """Form validator: None when the name is free, else `{field: "characterName", message}` in the
    session locale (context["locale"]). Synchronous and pure."""
    name = values.get(NAME_FIELD)
    if not isinstance(name, str) or not name.strip() or not isinstance(data, dict):
        return None
    if name_digest(str(data.get("salt", "")), name) not in set(data.get("names") or []):
        return None
    locale = str((context or {}).get("locale") or "en-US")
    template = _MESSAGES["zh" if locale.lower().startswith("zh") else "en"]
    return {"field": NAME_FIELD, "message": template.format(name=name.strip())}
