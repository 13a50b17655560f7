"""Argument JSON repair (spec 000, 模型写错的参数 JSON).

Exactly five typo classes are corrected, each tried on its own (never combined), and a
correction counts only when the corrected text parses as-is:

1. trailing extra closers: a complete value followed by at most four `]` / `}`;
2. unescaped quotes inside a string value, only when the inner quotes come in pairs;
3. an array element that starts before the previous one was closed (`}, {` inside an object);
4. mismatched closers: a `}` where no object is open is dropped, or the text's last closer of
   the wrong kind is swapped for the right one;
5. a doubled object opener `{"{"`.

Inside a field (a string where the schema wants an array/object), closers still open at the
end are added as a sixth, separate attempt. Everything else (truncation, a missing comma
between strings, a quote followed by `,` or `:` inside a value) is an ArgumentJsonError.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable

_CLOSER_FOR = {"{": "}", "[": "]"}
_QUOTE_CLOSE_FOLLOWERS = frozenset(',}]:"')


class ArgumentJsonError(ValueError):
    """Text is not JSON and no single rule repairs it. message names the reason and position."""

    def __init__(self, reason: str, position: int, line: int, column: int) -> None:
        self.reason = reason
        self.position = position
        self.line = line
        self.column = column
        super().__init__(f"{reason} at line {line} column {column} (char {position})")


@dataclass(frozen=True)
class RepairedJson:
    """value: the parsed JSON; rule: None when the text was valid, else the rule name."""

    value: Any
    rule: str | None


def _strict_loads(text: str) -> Any:
    return json.loads(text)


def _skip_ws(text: str, i: int) -> int:
    while i < len(text) and text[i] in " \t\r\n":
        i += 1
    return i


def _string_end(text: str, start: int) -> int:
    """Index of the unescaped quote closing the string opened at text[start] (or -1)."""
    i = start + 1
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch == '"':
            return i
        i += 1
    return -1


def _rule_trailing_closers(text: str) -> str | None:
    stripped = text.strip()
    try:
        _, end = json.JSONDecoder().raw_decode(stripped)
    except json.JSONDecodeError:
        return None
    rest = stripped[end:]
    closers = [c for c in rest if c not in " \t\r\n"]
    if not closers or len(closers) > 4 or any(c not in "]}" for c in closers):
        return None
    return stripped[:end]


def _rule_unescaped_quotes(text: str) -> str | None:
    out: list[str] = []
    stack: list[str] = []
    expecting_key = False
    changed = False
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == '"':
            is_key = bool(stack) and stack[-1] == "{" and expecting_key
            if is_key:
                end = _string_end(text, i)
                if end < 0:
                    return None
                out.append(text[i : end + 1])
                i = end + 1
                expecting_key = False
                continue
            # A value string: a quote closes it only when followed by , } ] : " or the end.
            interior: list[int] = []
            j = i + 1
            close = -1
            while j < len(text):
                c = text[j]
                if c == "\\":
                    j += 2
                    continue
                if c == '"':
                    nxt = _skip_ws(text, j + 1)
                    if nxt >= len(text) or text[nxt] in _QUOTE_CLOSE_FOLLOWERS:
                        close = j
                        break
                    interior.append(j)
                j += 1
            if close < 0:
                return None
            if interior:
                if len(interior) % 2:
                    return None
                changed = True
                piece = list(text[i : close + 1])
                for pos in reversed(interior):
                    piece[pos - i] = '\\"'
                out.append("".join(piece))
            else:
                out.append(text[i : close + 1])
            i = close + 1
            continue
        if ch in "{[":
            stack.append(ch)
            expecting_key = ch == "{"
        elif ch in "}]":
            if stack:
                stack.pop()
            expecting_key = False
        elif ch == ",":
            expecting_key = bool(stack) and stack[-1] == "{"
        out.append(ch)
        i += 1
    return "".join(out) if changed else None


def _scan_structure(text: str, on_char: Callable[[int, str, list[str]], str | None]) -> str | None:
    """Walk text outside strings, tracking open brackets; on_char may return a replacement."""
    out: list[str] = []
    stack: list[str] = []
    changed = False
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == '"':
            end = _string_end(text, i)
            if end < 0:
                return None
            out.append(text[i : end + 1])
            i = end + 1
            continue
        replacement = on_char(i, ch, stack)
        if replacement is not None:
            changed = True
            out.append(replacement)
            # The replacement decides the structural effect itself.
            i += 1
            continue
        if ch in "{[":
            stack.append(ch)
        elif ch in "}]" and stack:
            stack.pop()
        out.append(ch)
        i += 1
    return "".join(out) if changed else None


def _rule_unclosed_element(text: str) -> str | None:
    def on_char(i: int, ch: str, stack: list[str]) -> str | None:
        if ch != "," or not stack or stack[-1] != "{":
            return None
        before = text[:i].rstrip()
        after = _skip_ws(text, i + 1)
        if not before.endswith("}") or after >= len(text) or text[after] != "{":
            return None
        stack.pop()
        return "},"

    return _scan_structure(text, on_char)


def _rule_stray_object_closer(text: str) -> str | None:
    # "No object open" means the innermost open bracket is not an object: an array (or nothing).
    # This holds at any depth, so the rule works on the whole argument text
    # ({"updates":[{"id":"a"},{"id":"b"}}]}) as well as on JSON text inside one field.
    def on_char(i: int, ch: str, stack: list[str]) -> str | None:
        if ch == "}" and (not stack or stack[-1] != "{"):
            return ""
        return None

    return _scan_structure(text, on_char)


def _rule_wrong_last_closer(text: str) -> str | None:
    last = max(text.rfind("}"), text.rfind("]"))
    if last < 0 or text[last + 1 :].strip():
        return None
    stack: list[str] = []
    i = 0
    while i < last:
        ch = text[i]
        if ch == '"':
            end = _string_end(text, i)
            if end < 0 or end > last:
                return None
            i = end + 1
            continue
        if ch in "{[":
            stack.append(ch)
        elif ch in "}]":
            if not stack or _CLOSER_FOR[stack[-1]] != ch:
                return None
            stack.pop()
        i += 1
    if len(stack) != 1 or _CLOSER_FOR[stack[0]] == text[last]:
        return None
    return text[:last] + _CLOSER_FOR[stack[0]] + text[last + 1 :]


def _rule_doubled_opener(text: str) -> str | None:
    # Only structural `{"{"` counts: string contents are copied through untouched.
    out: list[str] = []
    changed = False
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == '"':
            end = _string_end(text, i)
            if end < 0:
                return None
            out.append(text[i : end + 1])
            i = end + 1
            continue
        if ch == "{" and text.startswith('{"{"', i):
            out.append("{")
            i += 3  # drop the repeated `"{`; the key's own quote follows
            changed = True
            continue
        out.append(ch)
        i += 1
    return "".join(out) if changed else None


def _rule_close_open_brackets(text: str) -> str | None:
    stack: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == '"':
            end = _string_end(text, i)
            if end < 0:
                return None
            i = end + 1
            continue
        if ch in "{[":
            stack.append(ch)
        elif ch in "}]":
            if not stack or _CLOSER_FOR[stack[-1]] != ch:
                return None
            stack.pop()
        i += 1
    if not stack:
        return None
    return text.rstrip() + "".join(_CLOSER_FOR[c] for c in reversed(stack))


_RULES: tuple[tuple[str, Callable[[str], str | None]], ...] = (
    ("trailing-closers", _rule_trailing_closers),
    ("unescaped-quotes", _rule_unescaped_quotes),
    ("unclosed-element", _rule_unclosed_element),
    ("stray-closer", _rule_stray_object_closer),
    ("wrong-last-closer", _rule_wrong_last_closer),
    ("doubled-opener", _rule_doubled_opener),
)


def parse_arguments_json(text: str, *, inside_field: bool = False) -> RepairedJson:
    """Parse model-written JSON, applying at most one repair rule (see module docstring).

    inside_field: True for JSON text found in a field (adds the close-open-brackets attempt,
    never used for the whole argument text because that may be real truncation).
    Returns RepairedJson(value, rule). Raises ArgumentJsonError with the strict parser's reason
    and position when nothing applies.
    """
    try:
        return RepairedJson(_strict_loads(text), None)
    except json.JSONDecodeError as exc:
        first_error = exc
    rules = _RULES + ((("close-open-brackets", _rule_close_open_brackets),) if inside_field else ())
    for name, rule in rules:
        candidate = rule(text)
        if candidate is None:
            continue
        try:
            return RepairedJson(_strict_loads(candidate), name)
        except json.JSONDecodeError:
            continue
    raise ArgumentJsonError(first_error.msg, first_error.pos, first_error.lineno, first_error.colno)
