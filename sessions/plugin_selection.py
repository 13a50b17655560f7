"""Session plugin selection: which plugins a session saves and which of them can run.

Spec 004 §会话管理 (POST /api/sessions, "世界包里影响创建的字段") and §会话插件管理:

- The saved selection (``activePlugins``) is the player's requested plugins, plus the trusted builtin
  ``kind: core`` plugins (added by default unless excluded or replaced by a requested plugin that
  conflicts with them), plus providers auto-added for a required contract with exactly one
  installed provider.
- Runnable = saved plugins that are loaded, not rejected and whose required contracts have a runnable
  provider. A plugin whose dependency is missing stays saved (listed in ``unavailable``) and comes
  back when the dependency does.
- ``conflicts`` are contracts: plugin A conflicting on contract C cannot run next to another plugin
  providing C. Two requested plugins in conflict: 400 plugin_rejected at creation.
- World ``pluginPolicy.requires`` contracts: auto-add a sole provider; otherwise report
  ``unmetRequirements`` ``{contract, code, candidates?}`` (missing-provider | ambiguous-provider | excluded).

Pure Python over a PluginRegistry; no database access.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sessions.errors import PluginRejected

DIMENSIONS_CONTRACT = "world.dimensions@1"
CODE_UNKNOWN = "unknown-plugin"
CODE_LOAD_FAILED = "load-failed"
CODE_CONFLICT = "conflict"
CODE_MISSING_PROVIDER = "missing-provider"
CODE_AMBIGUOUS_PROVIDER = "ambiguous-provider"
CODE_EXCLUDED = "excluded"


@dataclass
class Resolution:
    """Result of one solve.

    active_plugins: the saved selection, in order. runnable: the subset that can run.
    rejections: ``{pluginId, code, reason}`` for saved-but-not-runnable or refused plugins.
    auto_added: providers added for required contracts. unmet_requirements: world requirements
    not met (``{contract, code, candidates?}``).
    """

    active_plugins: list[str] = field(default_factory=list)
    runnable: list[str] = field(default_factory=list)
    rejections: list[dict[str, Any]] = field(default_factory=list)
    auto_added: list[str] = field(default_factory=list)
    unmet_requirements: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"activePluginIds": list(self.runnable), "selected": list(self.active_plugins),
                "rejections": [dict(r) for r in self.rejections], "autoAdded": list(self.auto_added),
                "unmetRequirements": [dict(u) for u in self.unmet_requirements]}


def _provides(record) -> list[str]:
    return list(record.manifest.provided_contracts)


def _conflict_contract(a, b) -> str | None:
    """The contract on which plugins a and b conflict, or None."""
    for contract in a.manifest.conflicts:
        if contract in _provides(b):
            return contract
    for contract in b.manifest.conflicts:
        if contract in _provides(a):
            return contract
    return None


def plugins_resolve(
    registry,
    *,
    requested: list[str],
    excluded: list[str] = (),
    required_contracts: list[str] = (),
    strict: bool = False,
    keep: list[str] = (),
) -> Resolution:
    """Solve a session's plugin set (rules in the module docstring).

    requested: plugin ids the player asked for, in order. excluded: ids the player turned off (never
    auto-added, core included). required_contracts: the world's ``pluginPolicy.requires``.
    keep: ids already in the saved selection (auto-added earlier) that stay saved.
    strict: raise PluginRejected (400 plugin_rejected) when two requested plugins conflict;
    otherwise the later one is rejected and reported.
    """
    excluded_set = set(excluded)
    result = Resolution()
    records = {r.id: r for r in registry.all()}

    def reject(plugin_id: str, code: str, reason: str, **extra: Any) -> None:
        if not any(r["pluginId"] == plugin_id for r in result.rejections):
            result.rejections.append({"pluginId": plugin_id, "code": code, "reason": reason, **extra})

    saved: list[str] = []
    for plugin_id in list(requested) + [k for k in keep if k not in requested]:
        if plugin_id in excluded_set or plugin_id in saved:
            continue
        saved.append(plugin_id)
    runnable: list[str] = []
    for plugin_id in saved:
        record = records.get(plugin_id)
        if record is None:
            reject(plugin_id, CODE_UNKNOWN, f"plugin {plugin_id} is not installed")
        elif not record.is_loaded:
            reject(plugin_id, CODE_LOAD_FAILED, record.error or f"plugin {plugin_id} failed to load")
        else:
            clash = next(((other, c) for other in runnable if (c := _conflict_contract(records[other], record))), None)
            if clash is not None:
                rejection = {"pluginId": plugin_id, "code": CODE_CONFLICT,
                             "reason": f"conflicts with {clash[0]} on {clash[1]}", "with": clash[0], "contract": clash[1]}
                if strict and plugin_id in requested:
                    raise PluginRejected(rejection)
                reject(plugin_id, CODE_CONFLICT, rejection["reason"], **{"with": clash[0], "contract": clash[1]})
            else:
                runnable.append(plugin_id)
    # Trusted builtin core plugins are on by default; a requested plugin that conflicts replaces one.
    for record in registry.all():
        if record.manifest.kind != "core" or record.source != "builtin" or not record.is_loaded:
            continue
        if record.id in excluded_set or record.id in saved:
            continue
        if any(_conflict_contract(records[other], record) for other in runnable):
            continue
        saved.append(record.id)
        runnable.append(record.id)

    def providers(contract: str, pool: list[str]) -> list[str]:
        return [pid for pid in pool if contract in _provides(records[pid])]

    def candidates(contract: str) -> list[str]:
        return [r.id for r in registry.loaded() if contract in _provides(r)]

    def try_add(plugin_id: str) -> bool:
        record = records[plugin_id]
        if any(_conflict_contract(records[other], record) for other in runnable):
            return False
        saved.append(plugin_id)
        runnable.append(plugin_id)
        result.auto_added.append(plugin_id)
        return True

    changed = True
    while changed:
        changed = False
        for plugin_id in list(runnable):
            for contract in records[plugin_id].manifest.requires:
                if providers(contract, runnable):
                    continue
                found = [c for c in candidates(contract) if c not in excluded_set and c not in saved]
                if len(found) == 1 and try_add(found[0]):
                    changed = True
                    continue
                code = CODE_AMBIGUOUS_PROVIDER if len(found) > 1 else CODE_MISSING_PROVIDER
                runnable.remove(plugin_id)
                reject(plugin_id, code, f"no enabled provider for {contract}", contract=contract)
                changed = True
                break
    for contract in required_contracts:
        if providers(contract, runnable):
            continue
        all_candidates = candidates(contract)
        found = [c for c in all_candidates if c not in excluded_set and c not in saved]
        if len(found) == 1 and try_add(found[0]):
            continue
        if all_candidates and all(c in excluded_set for c in all_candidates):
            result.unmet_requirements.append({"contract": contract, "code": CODE_EXCLUDED, "candidates": all_candidates})
        elif len(found) > 1:
            result.unmet_requirements.append({"contract": contract, "code": CODE_AMBIGUOUS_PROVIDER, "candidates": found})
        else:
            result.unmet_requirements.append({"contract": contract, "code": CODE_MISSING_PROVIDER})
    result.active_plugins = saved
    result.runnable = [pid for pid in saved if pid in runnable]
    return result


def dimension_providers(registry, plugin_ids: list[str]) -> list[str]:
    """The plugins among ``plugin_ids`` that provide world.dimensions@1."""
    out = []
    for plugin_id in plugin_ids:
        record = registry.get(plugin_id)
        if record is not None and DIMENSIONS_CONTRACT in record.manifest.provided_contracts:
            out.append(plugin_id)
    return out


def setup_runtimes_initial(registry, plugin_ids: list[str]) -> dict[str, dict[str, Any]]:
    """``{runtimeId: {"state": "pending", "generation": 1, "attempts": 0, "pluginVersion"}}`` for
    every ``stage: setup`` runtime of the runnable plugins (spec 004 SetupRuntimeState)."""
    out: dict[str, dict[str, Any]] = {}
    for plugin_id in plugin_ids:
        record = registry.get(plugin_id)
        if record is None:
            continue
        for runtime in record.manifest.runtimes:
            if runtime.stage == "setup":
                out[runtime.id] = {"state": "pending", "generation": 1, "attempts": 0,
                                   "pluginVersion": record.manifest.version}
    return out
