"""Which language a tool speaks (spec 000 §统一返回格式与错误码: the instruction locale).

Model-facing text of tools and prompts comes in two languages: Chinese for any Chinese session
locale, English otherwise. Player-facing text follows the session's own locale.
"""

from __future__ import annotations

from typing import Any

ZH_CN = "zh-CN"
EN_US = "en-US"


def instruction_locale_for(locale: str | None) -> str:
    """"zh-CN" for any Chinese locale (zh, zh-Hans, zh_TW...), else "en-US"."""
    if locale and locale.replace("_", "-").lower().split("-")[0] == "zh":
        return ZH_CN
    return EN_US


def locale_text(texts: dict[str, Any], locale: str | None) -> Any:
    """Pick ``texts[ZH_CN]`` or ``texts[EN_US]`` for ``locale`` (``{ZH_CN: ..., EN_US: ...}``)."""
    return texts[instruction_locale_for(locale)]
