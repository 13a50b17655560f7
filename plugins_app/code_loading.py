"""Loading plugin code modules once per process: function handlers and guards (pure Python).

One cache keyed by the module file and its modification time, shared by the turn engine (which
loads a handler right before it runs) and the approval decision (which loads a community
plugin's granted runtimes at once, spec 004 §RPC Approval 流程: allow 之后，服务端立即为这个会话加载该插件
已获授权的 runtime), so a module body runs once per process whichever comes first. Callers check the
session's grants before calling in here; nothing in this module decides trust.
"""
from __future__ import annotations

import sys
import threading
import types
from dataclasses import dataclass, field
from pathlib import Path

from plugins_app.manifest_types import RuntimeManifest
from plugins_app.toolkit.modules import module_load_by_path, module_name_of

_modules: dict[str, types.ModuleType] = {}
_lock = threading.Lock()


class CodeNotLoadable(Exception):
    """A handler/guard path is outside the package, missing or fails to import (message: client-safe)."""


def runtime_code_path(root: Path, runtime: RuntimeManifest, declared: str) -> tuple[Path, Path, str]:
    """(absolute module file, package root resolved, function name or "") of ``./path.py[:name]``
    relative to the runtime's directory. Raises CodeNotLoadable when it leaves the package."""
    path, _, name = declared.partition(":")
    base = Path(root).resolve()
    candidate = (base / runtime.directory / path).resolve() if runtime.directory else (base / path).resolve()
    try:
        candidate.relative_to(base)
    except ValueError:
        raise CodeNotLoadable(f"{declared} is outside the plugin") from None
    return candidate, base, name


def plugin_module_cached(root: Path, plugin_id: str, candidate: Path) -> types.ModuleType:
    """Import ``candidate`` (a file inside ``root``) once per (file, mtime); raises what its import raises
    (CodeNotLoadable when the file is missing)."""
    if not candidate.is_file():
        raise CodeNotLoadable(f"{candidate.name} not found")
    key = f"{candidate}:{candidate.stat().st_mtime}"
    with _lock:
        module = _modules.get(key)
        if module is None:
            module = module_load_by_path(root, plugin_id, str(candidate.relative_to(root)))
            _modules[key] = module
        return module


def runtime_code_preload(root: Path, runtime: RuntimeManifest) -> str | None:
    """Import a runtime's function handler and guard modules; None, or a client-safe error text."""
    for declared in [runtime.function.handler if runtime.function is not None else None, runtime.guard]:
        if not declared:
            continue
        try:
            candidate, base, _name = runtime_code_path(root, runtime, declared)
            plugin_module_cached(base, runtime.plugin_id, candidate)
        except CodeNotLoadable as exc:
            return str(exc)
        except Exception as exc:  # plugin code may raise anything at import
            return f"{declared}: {type(exc).__name__}: {exc}"
    return None


@dataclass
class ForgottenModules:
    """What ``plugin_modules_forget`` removed; ``restore()`` puts it back (a reload that failed)."""

    imported: dict[str, types.ModuleType] = field(default_factory=dict)
    cached: dict[str, types.ModuleType] = field(default_factory=dict)

    def restore(self) -> None:
        sys.modules.update(self.imported)
        with _lock:
            _modules.update(self.cached)


def plugin_modules_forget(plugin_id: str) -> ForgottenModules:
    """Drop every imported module of ``plugin_id`` (``covel_plugin_<id>`` and below) and its cached
    handler/guard modules, so the next load reads the files again (dev hot reload)."""
    base = module_name_of(plugin_id)
    forgotten = ForgottenModules()
    for name in [n for n in sys.modules if n == base or n.startswith(base + ".")]:
        forgotten.imported[name] = sys.modules.pop(name)
    names = set(forgotten.imported)
    with _lock:
        for key in [k for k, m in _modules.items() if m.__name__ in names or m.__name__.startswith(base + ".")]:
            forgotten.cached[key] = _modules.pop(key)
    return forgotten
