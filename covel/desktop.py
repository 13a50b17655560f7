"""Desktop mode (``COVEL_DESKTOP_REST=1``): the files the desktop client manages under ``COVEL_HOME``
(spec 004 §桌面端的文件管理 API, 配置信息, "Opening the effective configuration").

- ``keys.env``: provider keys saved by the desktop settings page, one ``{PROVIDER}_API_KEY=value``
  line each. Read only in desktop mode; the outside environment always wins over it
  (``covel.outbound.server_key``). The in-process table follows the file (re-read when its
  mtime/size change), so a successful atomic write is what updates the runtime keys.
- ``settings.json``: the desktop's SettingsStore, one JSON object.
- ``proxy.json``: the outbound proxy (covel.proxy).
- ``config.toml``: the desktop shell's configuration; the server reads and rewrites only its
  ``data_root`` line (the SQLite file is ``<data_root>/covel.db``; read at start-up).
- ``logs/``: where the desktop shell keeps its logs (a target of POST /api/config/open-folder).

Every write is atomic (temporary file in the same directory, fsync, ``os.replace``): a reader sees
the old file or the new one, never half of one. Plain Python over settings; no app imports.
"""
from __future__ import annotations

import os
import re
import tempfile
import threading
import tomllib
from pathlib import Path
from typing import Mapping

from django.conf import settings

KEYS_ENV = "keys.env"
SETTINGS_JSON = "settings.json"
PROXY_JSON = "proxy.json"
CONFIG_TOML = "config.toml"
LOGS_DIR = "logs"
DATA_ROOT_KEY = "data_root"

_KEY_LINE = re.compile(r"^(?:export\s+)?([A-Z][A-Z0-9_]*)_API_KEY\s*=\s*(.*)$")
_DATA_ROOT_LINE = re.compile(r"^\s*data_root\s*=")
_write_lock = threading.Lock()


def is_desktop() -> bool:
    """True when the desktop file-management API is on (``COVEL_DESKTOP_REST=1``)."""
    return bool(getattr(settings, "COVEL_DESKTOP_REST", False))


def home_file(name: str) -> Path:
    """``<COVEL_HOME>/<name>``."""
    return Path(settings.COVEL_HOME) / name


def atomic_write(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically (same-directory temp file, fsync, os.replace,
    then the directory fsync'd so the rename survives a power cut). Creates the parent directory.
    On any failure the old file is untouched and the temp file removed; the OSError propagates."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with _write_lock:
        handle, temp_name = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        try:
            with os.fdopen(handle, "wb") as temp:
                temp.write(data)
                temp.flush()
                os.fsync(temp.fileno())
            os.replace(temp_name, path)
        except BaseException:
            Path(temp_name).unlink(missing_ok=True)
            raise
        try:
            dir_fd = os.open(path.parent, os.O_RDONLY)
        except OSError:  # pragma: no cover - platforms without directory handles
            return
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


# --- keys.env ---------------------------------------------------------------------------------


def provider_env_name(provider: str) -> str:
    """``openai`` → ``OPENAI_API_KEY`` (``-`` → ``_``), the name the engine reads."""
    return f"{provider.upper().replace('-', '_')}_API_KEY"


def keys_env_parse(text: str) -> dict[str, str]:
    """``{provider: value}`` from keys.env text: ``[export ]NAME_API_KEY=value`` lines (value
    stripped, one pair of surrounding quotes removed); blank, ``#`` and other lines are skipped."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        match = _KEY_LINE.match(line.strip())
        if not match:
            continue
        value = match.group(2).strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        if value:
            out[match.group(1).lower().replace("_", "-")] = value
    return out


def keys_env_render(keys: Mapping[str, str]) -> bytes:
    """keys.env text for ``{provider: value}`` (values hold no line break: callers validate)."""
    lines = ["# Provider keys saved by the Covel desktop settings. Environment variables win over them."]
    lines += [f"{provider_env_name(p)}={v}" for p, v in sorted(keys.items())]
    return ("\n".join(lines) + "\n").encode("utf-8")


_keys_cache: dict[str, tuple[tuple[int, int, int], dict[str, str]]] = {}


def saved_keys() -> dict[str, str]:
    """The keys in ``<COVEL_HOME>/keys.env`` (``{provider: value}``); {} outside desktop mode or
    without the file. Re-read when the file's inode, mtime or size changed; a file that cannot be read
    counts as empty (logged by the caller's request, never with its content)."""
    if not is_desktop():
        return {}
    path = home_file(KEYS_ENV)
    try:
        stat = path.stat()
    except OSError:
        return {}
    stamp = (stat.st_ino, stat.st_mtime_ns, stat.st_size)  # a replace is a new inode
    cached = _keys_cache.get(str(path))
    if cached and cached[0] == stamp:
        return dict(cached[1])
    try:
        keys = keys_env_parse(path.read_text("utf-8"))
    except (OSError, UnicodeDecodeError):
        return {}
    _keys_cache[str(path)] = (stamp, keys)
    return dict(keys)


def saved_keys_write(keys: Mapping[str, str]) -> None:
    """Atomically replace keys.env with ``keys`` (an empty mapping removes the file). The runtime
    table follows on the next read. OSError propagates with the old file intact."""
    path = home_file(KEYS_ENV)
    _keys_cache.pop(str(path), None)
    if not keys:
        path.unlink(missing_ok=True)
        return
    atomic_write(path, keys_env_render(keys))
    os.chmod(path, 0o600)  # keys: readable by the player only


# --- config.toml ------------------------------------------------------------------------------


def config_toml_parse(text: str) -> dict:
    """Parse config.toml text (tomllib). Raises ValueError with the parser's message; a
    ``data_root`` that is not a string is an error too."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(str(exc)) from None
    if DATA_ROOT_KEY in data and not isinstance(data[DATA_ROOT_KEY], str):
        raise ValueError("data_root must be a string (a directory path)")
    return data


def config_data_root(home: Path | None = None) -> Path | None:
    """``data_root`` of ``<home>/config.toml`` (``~`` expanded, absolute), or None when the file,
    the line or a parsable file is missing. ``home`` defaults to settings.COVEL_HOME (the
    settings module passes its own before Django is configured)."""
    path = (home if home is not None else Path(settings.COVEL_HOME)) / CONFIG_TOML
    try:
        data = config_toml_parse(path.read_text("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    value = data.get(DATA_ROOT_KEY)
    return Path(value).expanduser().resolve() if isinstance(value, str) and value.strip() else None


def config_toml_with_data_root(text: str, data_root: str) -> str:
    """``text`` with its top-level ``data_root = ...`` line replaced (or one added before the first
    table); every other line is kept as written."""
    line = f"{DATA_ROOT_KEY} = {_toml_string(data_root)}"
    lines = text.splitlines()
    first_table = next((i for i, item in enumerate(lines) if item.lstrip().startswith("[")), len(lines))
    for index in range(first_table):
        if _DATA_ROOT_LINE.match(lines[index]):
            lines[index] = line
            break
    else:
        lines.insert(first_table, line)
    return "\n".join(lines) + "\n"


def _toml_string(value: str) -> str:
    """A TOML basic string (backslash, quote and control characters escaped)."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    escaped = "".join(c if ord(c) >= 0x20 and c != "\x7f" else f"\\u{ord(c):04x}" for c in escaped)
    return f'"{escaped}"'
