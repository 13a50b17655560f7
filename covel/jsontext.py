"""JSON text for the per-turn hot paths: trace rows, stream frames, the automatic snapshot, prompt
digests and the JSON the one-statement reads aggregate (issue 18).

Encoding JSON was the largest single CPU item of a full-game turn left after the statement work
(~13% of a turn's GIL samples: ~740 ``json.dumps`` calls per turn, most of them the payloads of the
turn's ~80 trace rows and ~120 frames). orjson — a maintained C library — does the same work about
five times faster, so these paths use it; everything else keeps the standard library.

Both functions keep the text the standard library wrote where it matters:

- ``dumps(value)`` is ``json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)``:
  compact, UTF-8 (not ``\\u`` escapes), keys in insertion order, non-string keys as strings,
  datetimes / dataclasses / other objects through ``str``. Values orjson refuses (integers beyond
  64 bits, mixed-type keys with ``sort_keys``) fall back to the standard library, so no value that
  encoded before fails now. Not byte-identical in two corners that read back equal: float
  exponents (``1e16`` instead of ``1e+16``) and NaN/Infinity, written as ``null`` (they are not
  JSON: PostgreSQL's jsonb refuses them and browsers cannot parse them).
- ``loads(text)`` is ``json.loads`` for str / bytes; integers beyond 64 bits fall back likewise.
"""
from __future__ import annotations

import json
from typing import Any

import orjson

_OPTIONS = orjson.OPT_NON_STR_KEYS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS
_SORTED = _OPTIONS | orjson.OPT_SORT_KEYS


def dumps_bytes(value: Any, *, sort_keys: bool = False) -> bytes:
    """``value`` as compact UTF-8 JSON bytes (see the module docstring for the exact text)."""
    try:
        return orjson.dumps(value, default=str, option=_SORTED if sort_keys else _OPTIONS)
    except (orjson.JSONEncodeError, TypeError):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str,
                          sort_keys=sort_keys).encode("utf-8")


def dumps(value: Any, *, sort_keys: bool = False) -> str:
    """``value`` as compact JSON text (str; see the module docstring for the exact text)."""
    return dumps_bytes(value, sort_keys=sort_keys).decode("utf-8")


def loads(text: str | bytes | bytearray) -> Any:
    """The value of JSON ``text``; raises ValueError (json.JSONDecodeError) on invalid JSON."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        # orjson refuses integers beyond 64 bits that the standard library reads; invalid JSON
        # raises the standard library's JSONDecodeError (a ValueError) from here.
        return json.loads(text)
