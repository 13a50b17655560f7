"""Short, model-friendly ids and dataset keys (spec 000 §短 ID, §数据集工具 键的规则).

Models read these ids in injected data and sometimes write them back, so they are made of words in
``[a-z0-9-]``: ``word_id`` when the caller sees every id of the namespace, ``short_id`` /
``short_id_batch`` when it does not (label words plus 8 random hex digits, unique without any
process counter). ``dataset_key`` is the key rule dataset tools look records up by.
"""

from __future__ import annotations

import hashlib
import random as _random
import re
import unicodedata
from typing import Iterable

SLUG_MAX_CHARS = 32
_WS_RE = re.compile(r"\s+")
_WORD_RE = re.compile(r"[a-z0-9]+")
# Host randomness for ids: a CSPRNG, so two workers (or a restart) never draw the same suffix.
_SYSTEM_RANDOM = _random.SystemRandom()


def _words(text: str) -> list[str]:
    return _WORD_RE.findall(unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode().lower())


def _prefix(prefix: str, default: str) -> str:
    return "-".join(_WORD_RE.findall(prefix.lower())) or default


def word_id(prefix: str, label: str, taken: set[str]) -> str:
    """Readable id `<prefix>-<ascii words>` (8-hex digest of the label when it has no ASCII
    letters or digits), with -2, -3... when taken (spec 000, 短 ID)."""
    words = _words(label)
    slug = "-".join(words)[:SLUG_MAX_CHARS].strip("-") if words else hashlib.sha256(label.encode()).hexdigest()[:8]
    base = f"{_prefix(prefix, 'char')}-{slug}"
    candidate, n = base, 2
    while candidate in taken:
        candidate, n = f"{base}-{n}", n + 1
    return candidate


def short_id(prefix: str, label: str, session_id: str | None = None, random: _random.Random | None = None) -> str:
    """``<prefix>-<label words, at most 32 characters>-<8 random hex digits>`` (``item-dragon-sword-
    3fa9c1d2``); a label without ASCII letters or digits gives ``<prefix>-<8 hex>``. Every call draws
    a new id, also for the same label (dedupe by name is the caller's job). ``session_id`` is
    accepted for the spec's signature and does not take part; ``random``: the context's random
    source (default: the system CSPRNG)."""
    source = random or _SYSTEM_RANDOM
    words = _words(label)
    slug = "-".join(words)[:SLUG_MAX_CHARS].strip("-")
    suffix = f"{source.getrandbits(32):08x}"
    return f"{_prefix(prefix, 'id')}-{slug}-{suffix}" if slug else f"{_prefix(prefix, 'id')}-{suffix}"


def short_id_batch(prefix: str, labels: Iterable[str], session_id: str | None = None,
                   random: _random.Random | None = None) -> list[str]:
    """``short_id`` for every label, each drawn on its own; the batch never repeats an id (equal
    labels and labels whose slugs truncate alike still get distinct ids)."""
    out: list[str] = []
    seen: set[str] = set()
    for label in labels:
        candidate = short_id(prefix, label, session_id, random)
        while candidate in seen:
            candidate = short_id(prefix, label, session_id, random)
        seen.add(candidate)
        out.append(candidate)
    return out


def dataset_key(text: str) -> str:
    """datasetKey: NFKC, trimmed, inner whitespace collapsed to one space, lower-cased."""
    return _WS_RE.sub(" ", unicodedata.normalize("NFKC", text).strip()).lower()
