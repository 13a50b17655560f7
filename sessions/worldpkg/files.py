"""Reading world package files: YAML/JSON parsing, locale overlays, package-relative paths.

Pure Python. Overlay rule (see sessions.world_packages): objects merge key by key; lists of
objects with `id` merge by id when the ids overlap (base order, new ids appended), otherwise the
overlay list is that locale's list; other values are replaced.
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


def overlay_merge(base: Any, overlay: Any, *, top_level_known_only: bool = False, unknown: list[str] | None = None) -> Any:
    """Merge a locale overlay onto base content (rules in the module docstring)."""
    if isinstance(base, dict) and isinstance(overlay, dict):
        out = dict(base)
        for key, value in overlay.items():
            if key in base:
                out[key] = overlay_merge(base[key], value)
            elif top_level_known_only:
                if unknown is not None:
                    unknown.append(str(key))
            else:
                out[key] = copy.deepcopy(value)
        return out
    if isinstance(base, list) and isinstance(overlay, list):
        if all(isinstance(i, dict) and "id" in i for i in base + overlay) and base and overlay:
            base_ids = [i["id"] for i in base]
            over = {i["id"]: i for i in overlay}
            if set(base_ids) & set(over):
                merged = [overlay_merge(i, over[i["id"]]) if i["id"] in over else copy.deepcopy(i) for i in base]
                merged += [copy.deepcopy(i) for i in overlay if i["id"] not in set(base_ids)]
                return merged
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
    problem = unstorable_json_problem(data)
    if problem is not None:
        reason, at = problem
        issues.append(error(CODE_FILE_INVALID, f"value at {'/'.join(at) or '(root)'} {_UNSTORABLE_MESSAGES[reason]}", rel))
        return None
    non_json = _non_json_value_path(data)
    if non_json is not None:
        issues.append(error(CODE_FILE_INVALID, f"value at {'/'.join(non_json) or '(root)'} is not JSON data (YAML set or binary)", rel))
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
