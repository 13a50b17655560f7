"""Plugin trust: the framework's approval keys and what a community package's install receipt says
(spec 004 §插件来源与 approval 行为, §RPC Approval 流程, §社区插件授权; spec 000 §第三方插件 server-code /
plugin tool 审批边界). Pure Python; no Django.

Approval keys (the ``action`` of an approval record):

- ``covel:plugin-server-code``: load the plugin's server code (entry module, function handlers,
  guards) for a session. Session scope only.
- ``runtime:<runtimeId>``: run one of the plugin's runtimes in a session. Session scope only.
- ``event:<topic>``: the plugin's UI emits one of its declared event topics (once or session).
- any other name: one of the plugin's RPC actions (once or session).

Reserved prefixes (``covel:``, ``runtime:``, ``event:``) can never be plugin action names: the
manifest loader, ``register_rpc`` and the plugin-rpc request all refuse them, so an internal
approval key can never be borrowed to run an ordinary action (spec 000: 框架审批键与插件 action 名相互隔离).

Install receipt: ``<plugin>/.covel-install.json`` ``{"source": "<owner>/<repo>", "files":
{"<package-relative path>": "<sha256 hex>"}}``, written by installers that know where a package
came from (a zip upload writes none). ``integrity``: ``verified`` (every file of the package is
listed with its digest), ``modified`` (a file differs, is missing or is not listed),
``no-receipt``, ``unreadable``. A package is auto-approved for server code and runtimes when its
receipt's source matches ``trust.sources`` (a GitHub owner or owner/repo) and it is ``verified``;
trusted sources never satisfy ordinary action or event approvals (spec 004 §RPC Approval 流程:
可信来源只隐式满足 covel:plugin-server-code 与 runtime:*).

``trust.sources`` lives in the jobs app's server settings; ``trusted_sources_install`` is the port
the jobs app fills at start-up (the plugin layer cannot import it).
"""
from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any, Callable

logger = logging.getLogger(__name__)

SERVER_CODE_ACTION = "covel:plugin-server-code"
RUNTIME_ACTION_PREFIX = "runtime:"
EVENT_ACTION_PREFIX = "event:"
RESERVED_ACTION_PREFIXES = ("covel:", RUNTIME_ACTION_PREFIX, EVENT_ACTION_PREFIX)

RECEIPT_FILE = ".covel-install.json"
INTEGRITY_VERIFIED = "verified"
INTEGRITY_MODIFIED = "modified"
INTEGRITY_NO_RECEIPT = "no-receipt"
INTEGRITY_UNREADABLE = "unreadable"

_SKIPPED_PARTS = ("__pycache__",)


def action_is_reserved(name: str) -> bool:
    """True when ``name`` starts with a framework approval prefix (covel:, runtime:, event:)."""
    return isinstance(name, str) and name.startswith(RESERVED_ACTION_PREFIXES)


def runtime_action(runtime_id: str) -> str:
    """The approval key of running ``runtime_id`` (``runtime:<runtimeId>``)."""
    return f"{RUNTIME_ACTION_PREFIX}{runtime_id}"


def event_action(topic: str) -> str:
    """The approval key of emitting ``topic`` from the plugin's UI (``event:<topic>``)."""
    return f"{EVENT_ACTION_PREFIX}{topic}"


def is_code_action(action: str) -> bool:
    """Server code and runtime approvals: they load long-lived modules, so session scope only."""
    return action == SERVER_CODE_ACTION or action.startswith(RUNTIME_ACTION_PREFIX)


def _package_files(root: Path) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if not path.is_file() or rel.as_posix() == RECEIPT_FILE or any(p in _SKIPPED_PARTS for p in rel.parts):
            continue
        if path.suffix == ".pyc":
            continue
        out[rel.as_posix()] = path
    return out


def receipt_read(root: Path) -> tuple[str | None, str]:
    """(receipt source or None, integrity) of the package at ``root`` (see the module docstring)."""
    path = Path(root) / RECEIPT_FILE
    if not path.is_file():
        return None, INTEGRITY_NO_RECEIPT
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        source = data.get("source")
        files = data.get("files")
        if not isinstance(files, dict) or (source is not None and not isinstance(source, str)):
            return None, INTEGRITY_UNREADABLE
        return source, files_integrity(Path(root), files)
    except (OSError, ValueError, AttributeError, RecursionError):
        return None, INTEGRITY_UNREADABLE


def files_integrity(root: Path, files: dict[str, Any]) -> str:
    """``verified`` when the package at ``root`` holds exactly ``files`` ({relative path: sha256
    hex}) with those digests, else ``modified``. Raises OSError when a file cannot be read."""
    present = _package_files(Path(root))
    if set(present) != set(files):
        return INTEGRITY_MODIFIED
    for rel, file_path in present.items():
        if hashlib.sha256(file_path.read_bytes()).hexdigest() != files[rel]:
            return INTEGRITY_MODIFIED
    return INTEGRITY_VERIFIED


def receipt_write(root: Path, source: str | None) -> None:
    """Write a receipt listing every file of the package now (installers; tests)."""
    files = {rel: hashlib.sha256(p.read_bytes()).hexdigest() for rel, p in _package_files(Path(root)).items()}
    (Path(root) / RECEIPT_FILE).write_text(json.dumps({"source": source, "files": files}, indent=2), encoding="utf-8")


_trusted_sources: Callable[[], list[str]] | None = None


def trusted_sources_install(provider: Callable[[], list[str]]) -> None:
    """Install the reader of the effective ``trust.sources`` server setting (jobs app, at start-up)."""
    global _trusted_sources
    _trusted_sources = provider


def trusted_sources() -> list[str]:
    """The effective ``trust.sources`` (normalized owner or owner/repo, lower case); [] without a provider."""
    if _trusted_sources is None:
        return []
    try:
        return [s for s in _trusted_sources() or [] if isinstance(s, str)]
    except Exception:  # the setting store is unreachable: trust nothing rather than fail the request
        logger.warning("trust.sources could not be read; no source is trusted", exc_info=True)
        return []


def source_is_trusted(source: str | None, sources: list[str]) -> bool:
    """True when the receipt source ``owner/repo`` matches an entry ``owner`` or ``owner/repo``."""
    if not source:
        return False
    normalized = source.strip().lower().strip("/")
    owner = normalized.split("/", 1)[0]
    return any(entry == normalized or ("/" not in entry and entry == owner) for entry in sources)


def plugin_trust(root: Path, *, sources: list[str] | None = None) -> dict[str, Any]:
    """PluginSummary.trust of a community package: ``{source, trustedSource, integrity, autoApproved}``."""
    source, integrity = receipt_read(root)
    trusted = source_is_trusted(source, trusted_sources() if sources is None else sources)
    return {"source": source, "trustedSource": trusted, "integrity": integrity,
            "autoApproved": trusted and integrity == INTEGRITY_VERIFIED}
