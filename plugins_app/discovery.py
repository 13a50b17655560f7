"""Plugin discovery: find plugin package folders (pure Python, no Django).

- builtin plugins: `plugins_app/builtin/<plugin-id>/PLUGIN.md` (source "builtin");
- community plugins: `$COVEL_HOME/plugins/<plugin-id>/PLUGIN.md` (source "community").

The folder name IS the plugin id (spec 004 "插件身份": startup discovery uses the directory name;
a different `id:` in PLUGIN.md registers the plugin with hostState "error"). A community folder
that reuses a builtin id is reported and skipped (builtin ids are reserved).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from plugins_app.manifests import PLUGIN_FILE

BUILTIN_DIR = Path(__file__).resolve().parent / "builtin"
SOURCE_BUILTIN = "builtin"
SOURCE_COMMUNITY = "community"


@dataclass(frozen=True)
class DiscoveredPlugin:
    """A package folder found on disk: id (= folder name), root path, source builtin|community."""

    id: str
    root: Path
    source: str


def community_plugins_dir(covel_home: Path | str) -> Path:
    """`$COVEL_HOME/plugins` (spec 004: DELETE /api/plugins/:id removes ~/.covel/plugins/<id>)."""
    return Path(covel_home) / "plugins"


def _scan(directory: Path, source: str) -> list[DiscoveredPlugin]:
    if not directory.is_dir():
        return []
    found = []
    for child in sorted(directory.iterdir(), key=lambda p: p.name):
        if child.is_dir() and not child.name.startswith((".", "_")) and (child / PLUGIN_FILE).is_file():
            found.append(DiscoveredPlugin(id=child.name, root=child, source=source))
    return found


def plugins_discover(
    *, builtin_dir: Path | None = None, community_dir: Path | None = None
) -> tuple[list[DiscoveredPlugin], list[DiscoveredPlugin]]:
    """Return (plugins to register, shadowed community folders).

    builtin_dir defaults to plugins_app/builtin; community_dir (usually
    community_plugins_dir(COVEL_HOME)) may be None or missing. Builtins come first, each list
    sorted by folder name. A community folder with a builtin's id goes to the second list.
    """
    builtins = _scan(builtin_dir if builtin_dir is not None else BUILTIN_DIR, SOURCE_BUILTIN)
    community = _scan(community_dir, SOURCE_COMMUNITY) if community_dir is not None else []
    builtin_ids = {p.id for p in builtins}
    shadowed = [p for p in community if p.id in builtin_ids]
    return builtins + [p for p in community if p.id not in builtin_ids], shadowed
