"""Loading a plugin's own Python modules by file path (plugin folders are named by plugin id, hyphens
included, so they are not importable packages; STYLE.md). The plugin loader imports entry modules
with it, and plugin code uses it to reach a sibling module of its own package.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path


def module_name_of(plugin_id: str) -> str:
    """The top package name a plugin's modules are imported under (``covel_plugin_<id>``)."""
    return "covel_plugin_" + plugin_id.replace("-", "_")


_module_name = module_name_of


def module_load_by_path(root: Path, plugin_id: str, relpath: str) -> types.ModuleType:
    """Import `root/relpath` as `covel_plugin_<id>.<dotted path>` with synthetic parent packages.

    The module is (re)executed on every call; callers own caching. Raises whatever the module's
    import raises (ImportError, SyntaxError, ...).
    """
    base = _module_name(plugin_id)
    parts = Path(relpath).with_suffix("").parts
    parts = tuple(p for p in parts if p not in (".", ""))
    package_dir = root
    package_name = base
    for index in range(len(parts)):
        if package_name not in sys.modules or getattr(sys.modules[package_name], "__path__", None) != [str(package_dir)]:
            pkg = types.ModuleType(package_name)
            pkg.__path__ = [str(package_dir)]  # type: ignore[attr-defined]
            pkg.__package__ = package_name
            sys.modules[package_name] = pkg
        if index == len(parts) - 1:
            break
        package_dir = package_dir / parts[index]
        package_name = f"{package_name}.{parts[index]}"
    module_name = f"{base}.{'.'.join(parts)}"
    spec = importlib.util.spec_from_file_location(module_name, root / relpath)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {relpath}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    return module
