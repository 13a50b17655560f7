"""Which language a tool speaks (spec 000 §统一返回格式与错误码: the instruction locale).

Model-facing text of tools and prompts comes in two languages: Chinese for any Chinese session
locale, English otherwise. Player-facing text follows the session's own locale.
"""

from __future__ import annotations

import os
from typing import Any

ZH_CN = "zh-CN"
EN_US = "en-US"


#: Environment variable that pins the instruction language for every session (spec 000
#: §统一返回格式与错误码: "instructionLocaleFor(context.locale) ... 遵守 COVEL_INSTRUCTION_LOCALE").
#: Any Chinese tag (zh, zh-CN...) → Chinese, any other tag (en, en-US...) → English; unset, empty or
#: "auto" → follow the session locale. Read on every call, so tests and operators can change it live.
INSTRUCTION_LOCALE_ENV = "COVEL_INSTRUCTION_LOCALE"


def _is_chinese(tag: str) -> bool:
    return tag.replace("_", "-").lower().split("-")[0] == "zh"


def instruction_locale_for(locale: str | None) -> str:
    """"zh-CN" or "en-US": the language of model-facing tool and prompt text.

    COVEL_INSTRUCTION_LOCALE, when set to a language tag, decides for every session; otherwise
    "zh-CN" for any Chinese session locale (zh, zh-Hans, zh_TW...), else "en-US".
    """
    forced = os.environ.get(INSTRUCTION_LOCALE_ENV, "").strip()
    if forced and forced.lower() != "auto":
        return ZH_CN if _is_chinese(forced) else EN_US
    if locale and _is_chinese(locale):
        return ZH_CN
    return EN_US


def locale_text(texts: dict[str, Any], locale: str | None) -> Any:
    """Pick ``texts[ZH_CN]`` or ``texts[EN_US]`` for ``locale`` (``{ZH_CN: ..., EN_US: ...}``)."""
    return texts[instruction_locale_for(locale)]
