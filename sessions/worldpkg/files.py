"""Reading world package files: YAML/JSON parsing, locale overlays, package-relative paths.

Pure Python. Overlay rule (spec 004 §世界数据的语言覆盖; see overlay_merge): objects merge key by
key; lists of objects are paired by an identity field (the source's `key`, `id`, its
`localeArrayKeys`) or, when the overlay's objects carry none, by position; other values (text,
lists of text) are replaced by the overlay's.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from covel.jsonbody import unstorable_json_problem
from covel.yamlio import yaml_load
from plugins_app.validation import CODE_FILE_INVALID, Issue, error
from sessions.worldpkg.model import LOCALE_RE

def text_for(value: Any, locale: str, default_locale: str) -> str:
    """A display string from a string or locale map: locale, its language, default, first."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and value:
        for key in (locale, default_locale):
            if isinstance(value.get(key), str):
                return value[key]
        language = locale.split("-", 1)[0]
        for key, text in value.items():
            if isinstance(text, str) and str(key).split("-", 1)[0] == language:
                return text
        first = next(iter(value.values()))
        return first if isinstance(first, str) else ""
    return ""


def _identity_key(base: list[Any], overlay: list[Any], identity_keys: tuple[str, ...]) -> str | None:
    """The first of `identity_keys` every object of both lists carries, or None."""
    for key in identity_keys:
        if all(isinstance(i, dict) and i.get(key) not in (None, "") for i in base + overlay):
            return key
    return None


def overlay_merge(base: Any, overlay: Any, *, top_level_known_only: bool = False, unknown: list[str] | None = None,
                  identity_keys: tuple[str, ...] = ("id",)) -> Any:
    """Merge a locale overlay onto base content; returns a new value (neither input is changed).

    Spec 004 §世界数据的语言覆盖: an overlay translates, the base keeps the structure.
    - objects: key by key, recursively (`top_level_known_only`: overlay keys the base lacks are
      not added but listed in `unknown`);
    - lists of objects that all carry an identity field (the first of `identity_keys` — a source's
      `key`, then `id`, then its `localeArrayKeys`) and share at least one value: paired by that
      value, in the base's order (so a reordered list never gives a translation to another item),
      overlay-only items appended; sharing none, the overlay list is that locale's list;
    - lists of objects where the overlay's objects carry no identity field ("only translated
      text", e.g. `months: [{name: January}, ...]`): paired by position, so untranslated fields
      such as `days` stay; base items past the overlay's end are kept;
    - anything else (text, numbers, lists of text): the overlay's value replaces the base's.
    """
    if isinstance(base, dict) and isinstance(overlay, dict):
        out = dict(base)
        for key, value in overlay.items():
            if key in base:
                out[key] = overlay_merge(base[key], value, identity_keys=identity_keys)
            elif top_level_known_only:
                if unknown is not None:
                    unknown.append(str(key))
            else:
                out[key] = copy.deepcopy(value)
        return out
    if isinstance(base, list) and isinstance(overlay, list) and base and overlay:
        key = _identity_key(base, overlay, identity_keys)
        if key is not None:
            over = {i[key]: i for i in overlay}
            base_ids = {i[key] for i in base}
            if base_ids & set(over):
                merged = [overlay_merge(i, over[i[key]], identity_keys=identity_keys) if i[key] in over else copy.deepcopy(i)
                          for i in base]
                return merged + [copy.deepcopy(i) for i in overlay if i[key] not in base_ids]
            return copy.deepcopy(overlay)
        positional = (all(isinstance(i, dict) for i in base + overlay)
                      and not any(i.get(k) not in (None, "") for i in overlay for k in identity_keys))
        if positional:
            merged = [overlay_merge(b, o, identity_keys=identity_keys) for b, o in zip(base, overlay)]
            return merged + copy.deepcopy(base[len(overlay):]) + copy.deepcopy(overlay[len(base):])
        return copy.deepcopy(overlay)
    return copy.deepcopy(overlay)


def rel_path(root: Path, path: Path) -> str:
    """`path` (inside root) as a package-relative POSIX path."""
    return PurePosixPath(path.relative_to(root)).as_posix()


_UNSTORABLE_MESSAGES = {
    "text": "holds a NUL character or an unpaired UTF-16 surrogate",
    "number": "holds a non-finite number (NaN or infinity)",
    "depth": "is nested too deeply",
}


def _non_json_value_path(data: Any) -> list[str] | None:
    """Path to the first value JSON cannot hold that YAML can produce (!!set, !!binary), or None."""
    stack: list[tuple[Any, list[str]]] = [(data, [])]
    while stack:
        value, path = stack.pop()
        if isinstance(value, (set, frozenset, bytes, bytearray)):
            return path
        if isinstance(value, dict):
            if any(not isinstance(key, str) for key in value):  # YAML `1:` / `true:` keys
                return [*path, str(next(key for key in value if not isinstance(key, str)))]
            stack.extend((item, [*path, str(key)]) for key, item in value.items())
        elif isinstance(value, list):
            stack.extend((item, [*path, str(index)]) for index, item in enumerate(value))
    return None


def parse_file(path: Path, rel: str, issues: list[Issue]) -> Any:
    """Parse YAML/JSON; on failure record `file-invalid` (with line) and return None.

    Content a session could not store is `file-invalid` too (spec 004 §响应格式约定: bad input is
    a 4xx at install, not a 500 at session creation): text with NUL or unpaired surrogates,
    non-finite numbers, nesting past covel.jsonbody.JSON_MAX_DEPTH, YAML sets and binary values.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        issues.append(error(CODE_FILE_INVALID, "file is not readable UTF-8 text", rel))
        return None
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml_load(text)
    except RecursionError:
        issues.append(error(CODE_FILE_INVALID, "file is nested too deeply", rel))
        return None
    except json.JSONDecodeError as exc:
        issues.append(error(CODE_FILE_INVALID, f"invalid JSON at line {exc.lineno}: {exc.msg}", rel))
        return None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        issues.append(error(CODE_FILE_INVALID, f"invalid YAML{where}", rel))
        return None
    non_json = _non_json_value_path(data)
    if non_json is not None:
        issues.append(error(CODE_FILE_INVALID, f"value at {'/'.join(non_json) or '(root)'} is not JSON data "
                            "(YAML set, binary or a key that is not a string)", rel))
        return None
    problem = unstorable_json_problem(data)
    if problem is not None:
        reason, at = problem
        issues.append(error(CODE_FILE_INVALID, f"value at {'/'.join(at) or '(root)'} {_UNSTORABLE_MESSAGES[reason]}", rel))
        return None
    return data


def locale_split(filename: str, languages: set[str]) -> tuple[str, str | None]:
    """("world.en-US.yaml") → ("world.yaml", "en-US"). A bare 2-3 letter tag counts as a locale only
    for a language the world supports (so `x.ui.json` is not mistaken for a locale file)."""
    parts = filename.split(".")
    if len(parts) >= 3 and LOCALE_RE.match(parts[-2]):
        tag = parts[-2]
        if "-" in tag or tag in languages:
            return ".".join(parts[:-2] + parts[-1:]), tag
    return filename, None


def locale_canonical(tag: Any) -> str | None:
    """A language tag in its canonical case (BCP 47: language lower, script title, region upper):
    "en-us" → "en-US", "zh_hans_cn" → "zh-Hans-CN". None when it is not a language tag
    (spec 004 generate-world / translate accept any case and store the canonical form)."""
    if not isinstance(tag, str) or not tag or len(tag) > 35:
        return None
    parts = tag.replace("_", "-").split("-")
    out = [parts[0].lower()]
    for part in parts[1:]:
        out.append(part.title() if len(part) == 4 and part.isalpha() else part.upper())
    canonical = "-".join(out)
    return canonical if LOCALE_RE.match(canonical) else None


def locale_normalize(tag: str, supported: list[str]) -> str:
    """`tag` as one of the supported locales when only the language is given (`en` → `en-US`)."""
    if tag in supported:
        return tag
    language = tag.split("-", 1)[0]
    return next((s for s in supported if s.split("-", 1)[0] == language), tag)


def str_list(value: Any) -> list[str]:
    """The strings of a list (anything else: [])."""
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def safe_path(root: Path, declared: str) -> Path | None:
    """Resolve a package-relative path; None when it is absolute, has a backslash or leaves root."""
    if not isinstance(declared, str) or not declared or declared.startswith("/") or "\\" in declared:
        return None
    candidate = (root / declared).resolve()
    try:
        candidate.relative_to(root.resolve())
    except ValueError:
        return None
    return candidate


# --------------------------------------------------------------------------------------------
# The loader
# --------------------------------------------------------------------------------------------
