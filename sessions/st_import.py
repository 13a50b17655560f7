"""SillyTavern import: character cards and World Info → one Covel world package (spec 004
POST /api/install/st-import). Pure conversion; writing and activation live in sessions/world_install.py.

Inputs (recognised by content, never by file name or MIME type):
- character cards as JSON: V2/V3 (`spec: chara_card_v2|chara_card_v3`, fields under `data`), V1
  (flat `name`/`description`/`first_mes`...), and the older Pygmalion/Gradio shape (`char_name`,
  `char_persona`, `char_greeting`, `world_scenario`, `example_dialogue`);
- character cards as PNG with the card JSON base64-encoded in a `tEXt` (or `zTXt`/`iTXt`) chunk
  `ccv3` (preferred) or `chara`;
- World Info / lorebook JSON: `{entries: {...}|[...]}` in the SillyTavern, TavernAI or V2
  `character_book` field names (a mix of both in one entry is read too).

Output (`StConversion.package_files(world_id)`): world.yaml, WORLD.md,
characters/characters.json, data/lorebook.yaml and, for a PNG card, media/images/cover.png (the
image with its text chunks removed). The convention sources of world_package_load pick them up.

Conversion rules (decisions the spec leaves open, documented here):
- Card `data` wins over V1 fields mirrored at the root. `{{char}}`/`<BOT>` become the card's name
  (in lore from a card's own book, or from World Info when exactly one card is imported);
  `{{user}}` is kept as written.
- Card extensions (`regex_scripts`, `tavern_helper` scripts, `depth_prompt`...), `system_prompt`,
  `post_history_instructions` and `creator_notes` are not imported (reported as info): they are
  SillyTavern prompt plumbing or scripts, and imported text stays inert data.
- Lore entries: keys = `key`/`keys` (empty strings dropped), secondary keys, `enabled` (false when
  `disable: true` or `enabled: false`), `constant`, V2 `priority`, `insertion_order`/`order` →
  insertionOrder, position (ST numbers mapped to names). Empty content → skipped (warning). An
  entry without keys that is not constant never fires in SillyTavern, so it is imported disabled
  (warning). Identical entries (same keys and content, e.g. a card's book and the World Info it
  links) are imported once (info). Content over 20000 characters is cut there (warning).
- At most 2000 lore entries in total: the rest are reported (`lore-entries-skipped`, count) and skipped.

Limits (spec): 8 files, 6 cards (400), 8 MiB per file, 3 MiB decoded card JSON, 4096 PNG chunks,
2 MiB generated lorebook YAML (413).
"""
from __future__ import annotations

import base64
import binascii
import json
import re
import struct
import unicodedata
import zlib
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

import yaml

from covel.jsonbody import unstorable_json_problem
from plugins_app.errors import StImportError

MAX_FILES = 8
MAX_CARDS = 6
MAX_FILE_BYTES = 8 * 1024 * 1024
MAX_CARD_JSON_BYTES = 3 * 1024 * 1024
MAX_PNG_CHUNKS = 4096
MAX_LORE_ENTRIES = 2000
MAX_ENTRY_CHARS = 20000
MAX_LOREBOOK_YAML_BYTES = 2 * 1024 * 1024
MAX_NAME_CHARS = 120
MAX_SUMMARY_CHARS = 300
MAX_TAGS = 16
COVER_PATH = "media/images/cover.png"

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
TEXT_CHUNKS = (b"tEXt", b"zTXt", b"iTXt")
CARD_SPECS = {"chara_card_v2": "v2", "chara_card_v3": "v3"}
# SillyTavern's numeric world_info_position values.
ST_POSITIONS = {0: "before_char", 1: "after_char", 2: "before_an", 3: "after_an", 4: "at_depth",
                5: "before_em", 6: "after_em", 7: "outlet"}
POSITION_RE = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
CHAR_MACRO_RE = re.compile(r"\{\{char\}\}|<BOT>", re.IGNORECASE)
LOCALE_PART_RE = re.compile(r"^[A-Za-z0-9]{1,8}$")

LEVEL_INFO = "info"
LEVEL_WARNING = "warning"

CHARACTER_SCHEMA = {
    "types": ["npc", "companion"],
    "attributes": [
        {"id": "personality", "name": "Personality", "type": "string", "category": "bio",
         "description": "Temperament and manner, as the imported card describes them."},
        {"id": "scenario", "name": "Scenario", "type": "string", "category": "bio",
         "description": "The situation the card places this character in."},
        {"id": "firstMessage", "name": "Opening line", "type": "string", "category": "bio",
         "description": "How this character greets the player when the story begins."},
        {"id": "alternateGreetings", "name": "Other openings", "type": "array", "category": "bio",
         "description": "Alternative greetings from the card."},
        {"id": "exampleDialogue", "name": "Example dialogue", "type": "string", "category": "bio",
         "description": "Sample lines showing how this character speaks."},
    ],
}

_LABELS = {
    "en": {"characters": "Characters", "personality": "Personality", "scenario": "Scenario",
           "lore": "Lore", "imported": "Imported from SillyTavern"},
    "zh": {"characters": "角色", "personality": "性格", "scenario": "情境", "lore": "设定",
           "imported": "从 SillyTavern 导入"},
}


# --------------------------------------------------------------------------------------------
# Small helpers
# --------------------------------------------------------------------------------------------


def locale_normalize(tag: Any) -> str | None:
    """A BCP 47 tag in canonical case (`en_us` → `en-US`, `zh-hans-cn` → `zh-Hans-CN`), or None."""
    if not isinstance(tag, str) or not tag.strip():
        return None
    parts = tag.strip().replace("_", "-").split("-")
    if not all(LOCALE_PART_RE.match(p) for p in parts) or not re.match(r"^[A-Za-z]{2,3}$", parts[0]):
        return None
    out = [parts[0].lower()]
    for part in parts[1:]:
        if len(part) == 4 and part.isalpha():
            out.append(part.title())
        elif (len(part) == 2 and part.isalpha()) or (len(part) == 3 and part.isdigit()):
            out.append(part.upper())
        else:
            return None
    return "-".join(out)


def slugify(text: str, *, max_chars: int = 48) -> str:
    """ASCII slug of lowercase letters, digits and single hyphens ('' when nothing is left)."""
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii").lower()
    slug = re.sub(r"[^a-z0-9]+", "-", ascii_text).strip("-")
    return slug[:max_chars].rstrip("-")


def world_id_base(name: str) -> str:
    """Base world id for an imported world name: a slug starting with a letter (`st-world` when
    the name has no ASCII letters or digits). Candidates are `<base>`, `<base>-2`, ..."""
    slug = slugify(name)
    if not slug:
        return "st-world"
    return slug if slug[0].isalpha() else f"st-{slug}"[:48].rstrip("-")


def _text(value: Any) -> str:
    return value.strip() if isinstance(value, str) else ""


def _str_list(value: Any) -> list[str]:
    if isinstance(value, str):
        value = value.split(",")
    if not isinstance(value, list):
        return []
    out: list[str] = []
    for item in value:
        if isinstance(item, (int, float)) and not isinstance(item, bool):
            item = str(item)
        if isinstance(item, str) and item.strip() and item.strip() not in out:
            out.append(item.strip())
    return out


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and re.fullmatch(r"-?\d{1,9}", value.strip()):
        return int(value)
    return None


def _replace_char(text: str, name: str | None) -> tuple[str, int]:
    if not name:
        return text, 0
    return CHAR_MACRO_RE.subn(lambda _m: name, text)


def _cut(text: str, limit: int) -> str:
    """`text` cut to at most `limit` characters, at a whitespace when one is near the end."""
    if len(text) <= limit:
        return text
    head = text[:limit]
    space = max(head.rfind("\n"), head.rfind(" "))
    return head[:space].rstrip() if space > limit - 500 else head


def _first_sentences(text: str, limit: int) -> str:
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    head = text[:limit]
    stop = max(head.rfind(". "), head.rfind("。"), head.rfind("! "), head.rfind("? "))
    return head[: stop + 1] if stop > limit // 3 else _cut(head, limit - 1) + "…"


# --------------------------------------------------------------------------------------------
# PNG cards
# --------------------------------------------------------------------------------------------


@dataclass
class PngCard:
    """A PNG's embedded card text (keyword → text) and the image without its text chunks."""

    texts: dict[str, str]
    image: bytes


def png_card_read(data: bytes, *, source: str) -> PngCard:
    """Walk the PNG chunk list (length, type, data, CRC) up to IEND.

    Returns the `tEXt`/`zTXt`/`iTXt` texts by keyword and the image rebuilt without text chunks.
    Raises StImportError 400 `png-invalid` (bad signature, truncated chunk, CRC mismatch, no IEND)
    and 413 `png-too-many-chunks` (more than 4096 chunks).
    """
    if not data.startswith(PNG_SIGNATURE):
        raise StImportError(400, "png-invalid", "not a PNG file", source=source)
    texts: dict[str, str] = {}
    kept = [PNG_SIGNATURE]
    offset = len(PNG_SIGNATURE)
    count = 0
    while True:
        if offset + 8 > len(data):
            raise StImportError(400, "png-invalid", "PNG ends before its IEND chunk", source=source)
        length, ctype = struct.unpack(">I4s", data[offset:offset + 8])
        end = offset + 12 + length
        if end > len(data):
            raise StImportError(400, "png-invalid", f"PNG chunk {ctype!r} is truncated", source=source)
        count += 1
        if count > MAX_PNG_CHUNKS:
            raise StImportError(413, "png-too-many-chunks", f"PNG has more than {MAX_PNG_CHUNKS} chunks", source=source)
        body = data[offset + 8:offset + 8 + length]
        (crc,) = struct.unpack(">I", data[end - 4:end])
        if zlib.crc32(ctype + body) & 0xFFFFFFFF != crc:
            raise StImportError(400, "png-invalid", f"PNG chunk {ctype.decode('latin-1')!r} fails its CRC", source=source)
        if ctype in TEXT_CHUNKS:
            keyword, text = _png_text(ctype, body, source)
            if keyword is not None and keyword.lower() in ("chara", "ccv3"):
                texts[keyword.lower()] = text
        else:
            kept.append(data[offset:end])
        offset = end
        if ctype == b"IEND":
            break
    return PngCard(texts=texts, image=b"".join(kept))


def _png_text(ctype: bytes, body: bytes, source: str) -> tuple[str | None, str]:
    keyword, sep, rest = body.partition(b"\x00")
    if not sep:
        return None, ""
    name = keyword.decode("latin-1")
    if name.lower() not in ("chara", "ccv3"):
        return name, ""
    try:
        if ctype == b"tEXt":
            return name, rest.decode("latin-1")
        if ctype == b"zTXt":
            return name, _inflate(rest[1:], source).decode("latin-1")
        compressed, rest = rest[0], rest[2:]
        _lang, _, rest = rest.partition(b"\x00")
        _translated, _, text = rest.partition(b"\x00")
        return name, (_inflate(text, source) if compressed else text).decode("utf-8")
    except (UnicodeDecodeError, IndexError):
        raise StImportError(400, "png-invalid", "PNG text chunk is not readable", source=source) from None


def _inflate(data: bytes, source: str) -> bytes:
    inflater = zlib.decompressobj()
    try:
        out = inflater.decompress(data, MAX_CARD_JSON_BYTES * 2)
    except zlib.error:
        raise StImportError(400, "png-invalid", "compressed PNG text chunk is corrupt", source=source) from None
    if inflater.unconsumed_tail:
        raise StImportError(413, "card-json-too-large", "embedded card exceeds 3 MiB", source=source)
    return out


def _json_parse(text: str) -> Any:
    """``json.loads`` for uploaded cards and World Info. Raises ValueError for malformed JSON, JSON
    nested too deeply for the parser, and values no store can hold (NUL, unpaired surrogates,
    non-finite numbers, nesting past covel.jsonbody.JSON_MAX_DEPTH): the world package written from
    them could not be encoded, and sessions created from it could not be saved (spec 004
    §响应格式约定: bad input is a 4xx, nothing half-written)."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise ValueError("nested too deeply") from None
    problem = unstorable_json_problem(value)
    if problem is not None:
        reason, path = problem
        what = {"text": "a NUL character or an unpaired UTF-16 surrogate", "number": "a non-finite number"}.get(reason, "nesting too deep")
        raise ValueError(f"{what} at {'/'.join(path) or '(root)'}")
    return value


def _card_json_from_base64(text: str, source: str) -> Any:
    compact = "".join(text.split())
    if len(compact) * 3 // 4 > MAX_CARD_JSON_BYTES + 2:
        raise StImportError(413, "card-json-too-large", "decoded card JSON exceeds 3 MiB", source=source)
    try:
        raw = base64.b64decode(compact + "=" * (-len(compact) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise StImportError(400, "card-invalid", "embedded card is not valid base64", source=source) from None
    if len(raw) > MAX_CARD_JSON_BYTES:
        raise StImportError(413, "card-json-too-large", "decoded card JSON exceeds 3 MiB", source=source)
    try:
        return _json_parse(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise StImportError(400, "card-invalid", "embedded card is not UTF-8 JSON", source=source) from None
    except ValueError as exc:
        raise StImportError(400, "card-invalid", f"embedded card is not usable JSON: {exc}", source=source) from None


# --------------------------------------------------------------------------------------------
# Parsed inputs
# --------------------------------------------------------------------------------------------


@dataclass
class LoreEntry:
    keys: list[str]
    content: str
    title: str
    is_enabled: bool
    is_constant: bool
    secondary_keys: list[str] = field(default_factory=list)
    is_selective: bool = False
    priority: int | None = None
    insertion_order: int | None = None
    position: str | None = None
    is_case_sensitive: bool | None = None
    source: str = ""
    uid: str | None = None


@dataclass
class Card:
    source: str
    format: str  # v1 | v2 | v3 | pygmalion
    container: str  # json | png
    name: str
    description: str
    personality: str
    scenario: str
    first_message: str
    example_dialogue: str
    alternate_greetings: list[str]
    nickname: str
    tags: list[str]
    creator: str
    book_name: str
    book: list[dict[str, Any]]
    linked_world: str
    dropped: list[str]
    image: bytes | None = None


@dataclass
class WorldInfo:
    source: str
    name: str
    description: str
    entries: list[dict[str, Any]]


def _is_card(obj: dict[str, Any]) -> bool:
    if obj.get("spec") in CARD_SPECS and isinstance(obj.get("data"), dict):
        return True
    if "char_name" in obj:
        return True
    return isinstance(obj.get("name"), str) and any(k in obj for k in ("first_mes", "personality", "mes_example", "scenario"))


def _is_world_info(obj: dict[str, Any]) -> bool:
    return isinstance(obj.get("entries"), (dict, list)) and not _is_card(obj)


def card_parse(obj: dict[str, Any], *, source: str, container: str) -> Card:
    """A Card from a V1/V2/V3/Pygmalion card object. Raises StImportError 400 `card-invalid`
    when the card has no name."""
    spec = obj.get("spec")
    if spec in CARD_SPECS and isinstance(obj.get("data"), dict):
        data, fmt = obj["data"], CARD_SPECS[spec]
    elif "char_name" in obj:
        data = {"name": obj.get("char_name"), "description": obj.get("char_persona"), "first_mes": obj.get("char_greeting"),
                "scenario": obj.get("world_scenario"), "mes_example": obj.get("example_dialogue")}
        fmt = "pygmalion"
    else:
        data, fmt = obj, "v1"
    name = _text(data.get("name"))
    if not name:
        raise StImportError(400, "card-invalid", "character card has no name", source=source)
    book = data.get("character_book") if isinstance(data.get("character_book"), dict) else {}
    extensions = data.get("extensions") if isinstance(data.get("extensions"), dict) else {}
    dropped = [k for k in ("system_prompt", "post_history_instructions", "creator_notes") if _text(data.get(k))]
    dropped += [f"extensions.{k}" for k in extensions if k not in ("world", "fav", "talkativeness")]
    entries = book.get("entries") if isinstance(book.get("entries"), list) else []
    return Card(
        source=source, format=fmt, container=container, name=name[:MAX_NAME_CHARS],
        description=_text(data.get("description")), personality=_text(data.get("personality")),
        scenario=_text(data.get("scenario")), first_message=_text(data.get("first_mes")),
        example_dialogue=_text(data.get("mes_example")),
        alternate_greetings=[g.strip() for g in data.get("alternate_greetings") or [] if isinstance(g, str) and g.strip()],
        nickname=_text(data.get("nickname")), tags=_str_list(data.get("tags")), creator=_text(data.get("creator")),
        book_name=_text(book.get("name")), book=[e for e in entries if isinstance(e, dict)],
        linked_world=_text(extensions.get("world")), dropped=dropped,
    )


def world_info_parse(obj: dict[str, Any], *, source: str) -> WorldInfo:
    """World Info with entries from an `entries` object (ST: keyed by uid) or list."""
    raw = obj["entries"]
    entries = list(raw.values()) if isinstance(raw, dict) else list(raw)
    return WorldInfo(source=source, name=_text(obj.get("name")), description=_text(obj.get("description")),
                     entries=[e for e in entries if isinstance(e, dict)])


def entry_convert(raw: dict[str, Any], *, source: str, char_name: str | None, items: list[dict[str, Any]]) -> LoreEntry | None:
    """One ST/TavernAI/V2 lore entry → LoreEntry, or None (skipped and reported) without content."""
    uid = raw.get("uid", raw.get("id"))
    uid_text = str(uid) if isinstance(uid, (int, str)) and not isinstance(uid, bool) else None
    content = raw.get("content")
    if not isinstance(content, str) or not content.strip():
        items.append(_item(LEVEL_WARNING, "lore-entry-empty", "lore entry has no content; skipped", source=source,
                           field=f"entries.{uid_text}" if uid_text else None))
        return None
    keys = _str_list(raw.get("keys")) + [k for k in _str_list(raw.get("key")) if k not in _str_list(raw.get("keys"))]
    secondary = _str_list(raw.get("secondary_keys")) or _str_list(raw.get("keysecondary"))
    is_enabled = raw.get("disable") is not True and raw.get("enabled") is not False
    is_constant = raw.get("constant") is True
    content = content.strip()
    content, _count = _replace_char(content, char_name)
    if len(content) > MAX_ENTRY_CHARS:
        items.append(_item(LEVEL_WARNING, "lore-entry-truncated", f"lore entry content cut to {MAX_ENTRY_CHARS} characters",
                           source=source, field=f"entries.{uid_text}.content" if uid_text else "content", count=len(content)))
        content = _cut(content, MAX_ENTRY_CHARS)
    if not keys and not is_constant and is_enabled:
        items.append(_item(LEVEL_WARNING, "lore-entry-no-keys", "lore entry has no keys and is not constant; imported disabled",
                           source=source, field=f"entries.{uid_text}" if uid_text else None))
        is_enabled = False
    position = raw.get("position")
    if isinstance(position, bool):
        position = None
    elif isinstance(position, (int, float)):
        position = ST_POSITIONS.get(int(position))
    elif not (isinstance(position, str) and POSITION_RE.match(position)):
        position = None
    title = _text(raw.get("comment")) or _text(raw.get("name")) or (keys[0] if keys else "") or (f"Entry {uid_text}" if uid_text else "Entry")
    order = _int(raw.get("insertion_order"))
    if order is None:
        order = _int(raw.get("order"))
    case = raw.get("case_sensitive", raw.get("caseSensitive"))
    return LoreEntry(
        keys=keys, content=content, title=title[:256], is_enabled=is_enabled, is_constant=is_constant,
        secondary_keys=secondary, is_selective=raw.get("selective") is True and bool(secondary),
        priority=_int(raw.get("priority")), insertion_order=order, position=position,
        is_case_sensitive=case if isinstance(case, bool) else None, source=source, uid=uid_text,
    )


def _item(level: str, code: str, message: str, *, source: str | None = None, field: str | None = None,
          count: int | None = None) -> dict[str, Any]:
    """Report item `{level, code, source?, field?, count?, message}` (spec 004 st-import report)."""
    out: dict[str, Any] = {"level": level, "code": code}
    if source is not None:
        out["source"] = source
    if field is not None:
        out["field"] = field
    if count is not None:
        out["count"] = count
    out["message"] = message
    return out


# --------------------------------------------------------------------------------------------
# The conversion
# --------------------------------------------------------------------------------------------


@dataclass
class StConversion:
    """A converted import: everything needed to write the world package and the report.

    characters: character records `{id, name, type, aliases?, description, fields}`;
    lorebook: lore records `{id, title, keys, content, enabled, strategy, ...}`; cover: PNG bytes
    or None; sources: `[{file, kind: card|worldInfo, format, container?, name?, loreEntries}]`;
    items: report items.
    """

    name: str
    locale: str
    summary: str
    lore: str
    tags: list[str]
    author: str | None
    characters: list[dict[str, Any]]
    lorebook: list[dict[str, Any]]
    cover: bytes | None
    sources: list[dict[str, Any]]
    items: list[dict[str, Any]]
    lorebook_yaml: bytes = b""

    def manifest(self, world_id: str) -> dict[str, Any]:
        out: dict[str, Any] = {
            "schemaVersion": "1.0", "id": world_id, "name": self.name, "version": "1.0.0", "summary": self.summary,
            "defaultLocale": self.locale, "supportedLocales": [self.locale],
            "tags": self.tags, "pluginPolicy": {"presetId": "traditional-story"},
            "characterSchema": CHARACTER_SCHEMA,
        }
        if self.author:
            out["author"] = {"name": self.author}
        if self.cover is not None:
            out["cover"] = COVER_PATH
        return out

    def package_files(self, world_id: str) -> dict[str, bytes]:
        """Package-relative path → file bytes of the world package with id `world_id`."""
        files = {
            "world.yaml": yaml.safe_dump(self.manifest(world_id), allow_unicode=True, sort_keys=False, width=100).encode("utf-8"),
            "WORLD.md": self.lore.encode("utf-8"),
            "characters/characters.json": json.dumps(self.characters, ensure_ascii=False, indent=2).encode("utf-8"),
            "data/lorebook.yaml": self.lorebook_yaml,
        }
        if self.cover is not None:
            files[COVER_PATH] = self.cover
        return files

    def report(self, world_id: str) -> dict[str, Any]:
        """The st-import report: {sources, world: {id, name, locale, summary}, counts, items}."""
        return {
            "sources": self.sources,
            "world": {"id": world_id, "name": self.name, "locale": self.locale, "summary": self.summary},
            "counts": {"characters": len(self.characters), "loreEntries": len(self.lorebook), "hasCover": self.cover is not None},
            "items": self.items,
        }


def _json_load(data: bytes, source: str) -> Any:
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise StImportError(400, "file-unrecognized", "file is neither a PNG nor UTF-8 JSON", source=source) from None
    try:
        return _json_parse(text)
    except ValueError as exc:
        raise StImportError(400, "json-invalid", f"file is not valid JSON: {exc}", source=source) from None


def st_convert(files: list[tuple[str, bytes]], *, locale: str, name: str | None = None) -> StConversion:
    """Convert uploaded SillyTavern files into a world.

    files: (file name, bytes) in upload order (names are only labels); locale: normalized BCP 47
    tag; name: world name (default: the card names, else the World Info name, else the first file).
    Raises StImportError: 400 `no-files`, `too-many-files`, `too-many-cards`, `file-unrecognized`,
    `json-invalid`, `card-invalid`, `png-invalid`, `png-no-card`, `nothing-to-import`; 413
    `file-too-large`, `card-json-too-large`, `png-too-many-chunks`, `lorebook-too-large`.
    """
    if not files:
        raise StImportError(400, "no-files", "upload at least one file in the multipart field `file`")
    if len(files) > MAX_FILES:
        raise StImportError(400, "too-many-files", f"at most {MAX_FILES} files per import")
    items: list[dict[str, Any]] = []
    cards: list[Card] = []
    books: list[WorldInfo] = []
    for source, data in files:
        if len(data) > MAX_FILE_BYTES:
            raise StImportError(413, "file-too-large", "file exceeds 8 MiB", source=source)
        if data.startswith(PNG_SIGNATURE):
            png = png_card_read(data, source=source)
            text = png.texts.get("ccv3") or png.texts.get("chara")
            if text is None:
                raise StImportError(400, "png-no-card", "PNG has no `chara` or `ccv3` text chunk", source=source)
            obj = _card_json_from_base64(text, source)
            if not isinstance(obj, dict) or not _is_card(obj):
                raise StImportError(400, "card-invalid", "embedded text is not a character card", source=source)
            card = card_parse(obj, source=source, container="png")
            card.image = png.image
            cards.append(card)
        else:
            obj = _json_load(data, source)
            if isinstance(obj, dict) and _is_card(obj):
                if len(data) > MAX_CARD_JSON_BYTES:
                    raise StImportError(413, "card-json-too-large", "card JSON exceeds 3 MiB", source=source)
                cards.append(card_parse(obj, source=source, container="json"))
            elif isinstance(obj, dict) and _is_world_info(obj):
                books.append(world_info_parse(obj, source=source))
            else:
                raise StImportError(400, "file-unrecognized", "not a character card or World Info file", source=source)
        if len(cards) > MAX_CARDS:
            raise StImportError(400, "too-many-cards", f"at most {MAX_CARDS} character cards per import", source=source)

    sole_char = cards[0].name if len(cards) == 1 else None
    sources: list[dict[str, Any]] = []
    characters: list[dict[str, Any]] = []
    raw_entries: list[LoreEntry] = []
    used_ids: set[str] = set()
    macro_count = 0
    for card in cards:
        base = "char-" + (slugify(card.name, max_chars=40) or "imported")
        char_id, n = base, 2
        while char_id in used_ids:
            char_id, n = f"{base}-{n}", n + 1
        used_ids.add(char_id)
        fields: dict[str, Any] = {}
        for key, value in (("personality", card.personality), ("scenario", card.scenario),
                           ("firstMessage", card.first_message), ("exampleDialogue", card.example_dialogue)):
            if value:
                replaced, count = _replace_char(value, card.name)
                macro_count += count
                fields[key] = replaced
        if card.alternate_greetings:
            greetings = [_replace_char(g, card.name) for g in card.alternate_greetings]
            macro_count += sum(c for _g, c in greetings)
            fields["alternateGreetings"] = [g for g, _c in greetings]
        description, count = _replace_char(card.description, card.name)
        macro_count += count
        record: dict[str, Any] = {"id": char_id, "name": card.name, "type": "npc", "description": description, "fields": fields}
        if card.nickname and card.nickname != card.name:
            record["aliases"] = [card.nickname]
        characters.append(record)
        for path in card.dropped:
            items.append(_item(LEVEL_INFO, "card-field-not-imported", f"{path} is SillyTavern prompt or script data; not imported",
                               source=card.source, field=path))
        before = len(raw_entries)
        for raw in card.book:
            entry = entry_convert(raw, source=card.source, char_name=card.name, items=items)
            if entry is not None:
                raw_entries.append(entry)
        if card.linked_world and not any(card.linked_world in (b.name, PurePosixPath(b.source).stem) for b in books):
            items.append(_item(LEVEL_INFO, "linked-world-info-missing",
                               f"the card links World Info {card.linked_world!r}; upload it to import its entries",
                               source=card.source, field="extensions.world"))
        src: dict[str, Any] = {"file": card.source, "kind": "card", "format": card.format, "container": card.container,
                               "name": card.name, "loreEntries": len(raw_entries) - before}
        sources.append(src)
    for book in books:
        before = len(raw_entries)
        for raw in book.entries:
            entry = entry_convert(raw, source=book.source, char_name=sole_char, items=items)
            if entry is not None:
                raw_entries.append(entry)
        src = {"file": book.source, "kind": "worldInfo", "format": "worldInfo", "loreEntries": len(raw_entries) - before}
        if book.name:
            src["name"] = book.name
        sources.append(src)
    if macro_count:
        items.append(_item(LEVEL_INFO, "char-macro-replaced", "{{char}} was replaced by the character's name", count=macro_count))
    if not characters and not raw_entries:
        raise StImportError(400, "nothing-to-import", "no character and no lore entry with content")

    # Duplicates (same keys and content), then the total limit.
    unique: list[LoreEntry] = []
    seen: set[tuple[tuple[str, ...], str]] = set()
    duplicates = 0
    for entry in raw_entries:
        key = (tuple(sorted(k.lower() for k in entry.keys)), entry.content)
        if key in seen:
            duplicates += 1
            continue
        seen.add(key)
        unique.append(entry)
    if duplicates:
        items.append(_item(LEVEL_INFO, "lore-entry-duplicate", "identical lore entries were imported once", count=duplicates))
    if len(unique) > MAX_LORE_ENTRIES:
        items.append(_item(LEVEL_WARNING, "lore-entries-skipped", f"only the first {MAX_LORE_ENTRIES} lore entries were imported",
                           count=len(unique) - MAX_LORE_ENTRIES))
        unique = unique[:MAX_LORE_ENTRIES]
    lorebook = [_lore_record(i, e) for i, e in enumerate(unique, start=1)]

    world_name = (name or "").strip()[:MAX_NAME_CHARS]
    if not world_name:
        names = [c.name for c in cards]
        if names:
            world_name = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " & " + names[-1]
        else:
            world_name = next((b.name for b in books if b.name), "") or PurePosixPath(files[0][0]).stem or "SillyTavern import"
        world_name = world_name[:MAX_NAME_CHARS]
    summary = ""
    for card in cards:
        text = _replace_char(card.scenario, card.name)[0] or _replace_char(card.description, card.name)[0]
        if text:
            summary = _first_sentences(text, MAX_SUMMARY_CHARS)
            break
    if not summary:
        summary = next((_first_sentences(b.description, MAX_SUMMARY_CHARS) for b in books if b.description), "")
    if not summary:
        summary = f"Imported from SillyTavern: {len(characters)} characters, {len(lorebook)} lore entries."

    tags = ["sillytavern"]
    for card in cards:
        for tag in card.tags:
            if len(tags) < MAX_TAGS and len(tag) <= 64 and tag not in tags:
                tags.append(tag)
    creators = list(dict.fromkeys(c.creator for c in cards if c.creator))
    cover = next((c.image for c in cards if c.image is not None), None)
    conversion = StConversion(
        name=world_name, locale=locale, summary=summary, lore="", tags=tags,
        author=", ".join(creators)[:200] if creators else None, characters=characters, lorebook=lorebook,
        cover=cover, sources=sources, items=items,
    )
    conversion.lore = _world_md(conversion, books)
    conversion.lorebook_yaml = yaml.safe_dump(lorebook, allow_unicode=True, sort_keys=False, width=1000).encode("utf-8")
    if len(conversion.lorebook_yaml) > MAX_LOREBOOK_YAML_BYTES:
        raise StImportError(413, "lorebook-too-large", "the generated lorebook exceeds 2 MiB")
    return conversion


def _lore_record(index: int, entry: LoreEntry) -> dict[str, Any]:
    record: dict[str, Any] = {"id": f"lore-{index:04d}", "title": entry.title, "keys": entry.keys, "content": entry.content,
                              "enabled": entry.is_enabled, "strategy": "constant" if entry.is_constant else "selective"}
    if entry.is_constant:
        record["constant"] = True
    if entry.secondary_keys:
        record["secondaryKeys"] = entry.secondary_keys
        record["selective"] = entry.is_selective
    for key, value in (("priority", entry.priority), ("insertionOrder", entry.insertion_order),
                       ("position", entry.position), ("caseSensitive", entry.is_case_sensitive)):
        if value is not None:
            record[key] = value
    record["origin"] = {"file": entry.source, **({"uid": entry.uid} if entry.uid is not None else {})}
    return record


def _world_md(conversion: StConversion, books: list[WorldInfo]) -> str:
    labels = _LABELS["zh" if conversion.locale.split("-", 1)[0] == "zh" else "en"]
    lines = [f"# {conversion.name}", "", conversion.summary, ""]
    if conversion.characters:
        lines += [f"## {labels['characters']}", ""]
        for record in conversion.characters:
            lines += [f"### {record['name']}", ""]
            if record["description"]:
                lines += [record["description"], ""]
            for key in ("personality", "scenario"):
                if record["fields"].get(key):
                    lines += [f"**{labels[key]}:** {record['fields'][key]}", ""]
    described = [b for b in books if b.description]
    if described:
        lines += [f"## {labels['lore']}", ""]
        for book in described:
            lines += [f"**{book.name or PurePosixPath(book.source).stem}:** {book.description}", ""]
    lines += ["---", "", f"{labels['imported']}: " + ", ".join(s["file"] for s in conversion.sources), ""]
    return "\n".join(lines)
