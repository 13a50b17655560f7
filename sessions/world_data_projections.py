"""World projections: plugin handlers that turn a world data contract into rows of their own data
(spec 004 §POST /api/sessions: 世界数据契约没有接收插件…已启用的投影仍独立处理; §preflight: 预检不会加载也不会
执行 worldProjections handler; §Plugin 摘要: worldProjections 公开来源 contract 和输出的 namespace / key).

A plugin declares ``contributes.worldProjections.<id>``::

    from: "contract:world-ir@1"          # the world data contract it reads
    handler: ./server/project_world_ir.py  # ``handle(value)`` (or ``project``) → {output: [record]}
    outputs:
      rules: {namespace: rules, key: id}   # each output's records go to that namespace, keyed by ``key``

When a session is created (or the plugin joins it later), every enabled plugin's projection whose
``from`` names the contract of a ``contract:<c>`` world data source runs once over that source's
value; what it returns is written to the plugin's own namespaces like received world data: a row
that already holds another value is kept (a conflict), an equal one is left alone. A projection
counts as a receiver of its contract (no ``receiver-missing`` notice for a source only it reads).

Validation of the handler's return (hand-rolled: the shape is a two-level mapping, not worth a
schema): a mapping of declared output names to lists of objects carrying the output's ``key``; an
undeclared output, a non-list, or a record without its key is left out with a ``projection-invalid``
warning notice, the rest of the output is written.

The rows written at creation are recorded in the world data ledger under the target
``projection:<pluginId>/<projectionId>``, so POST /api/worlds/:id/sync-data re-runs the projection
and updates, adds or removes its rows by the ledger's rules; a projection that fails or answers
something invalid there is reported and its old rows and ledger rows are kept. A handler that raises or cannot be loaded gives
one ``projection-failed`` warning and writes nothing. Only plugins whose code runs without a session
grant (builtin and trusted ones) are projected at creation; a community plugin's projection waits
for its grant and is reported as ``projection-deferred``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from plugins_app.code_loading import CodeNotLoadable, plugin_module_cached

CONTRACT_PREFIX = "contract:"
CODE_PROJECTION_FAILED = "projection-failed"
CODE_PROJECTION_INVALID = "projection-invalid"
CODE_PROJECTION_DEFERRED = "projection-deferred"


@dataclass(frozen=True)
class ProjectedRow:
    """One record a projection produced, with where it came from (the ledger's provenance)."""

    plugin_id: str
    projection_id: str
    source_id: str
    namespace: str
    key: str
    record: Any

    @property
    def target(self) -> str:
        """The ledger target naming the projection: ``projection:<pluginId>/<projectionId>``."""
        return f"projection:{self.plugin_id}/{self.projection_id}"


@dataclass
class ProjectionResult:
    """Rows a projection pass produced: ``rows[(pluginId, namespace)] = [(key, record)]`` in handler
    order (``entries``: the same with their provenance), ``notices`` (``{level: warning, sourceId,
    pluginId, projectionId, code, message}``) and ``held``: the ``(pluginId, namespace)`` outputs of
    projections that failed or answered something invalid — a sync keeps their old rows and ledger
    (spec 004 §sync-data: 可选投影的无效输出则 warning 并推迟，保留旧记录和账本)."""

    rows: dict[tuple[str, str], list[tuple[str, Any]]] = field(default_factory=dict)
    entries: list[ProjectedRow] = field(default_factory=list)
    notices: list[dict[str, Any]] = field(default_factory=list)
    held: set[tuple[str, str]] = field(default_factory=set)


def projections_of(record, contract: str) -> list[tuple[str, dict[str, Any]]]:
    """The ``(projectionId, declaration)`` pairs of one plugin record reading ``contract``
    (``from: "contract:<contract>"``; a version-less ``contract:world-ir`` matches any version)."""
    if record is None:
        return []
    declared = getattr(record.manifest.contributes, "world_projections", None) or {}
    out = []
    for projection_id, decl in declared.items():
        source = decl.get("from") if isinstance(decl, dict) else None
        if not isinstance(source, str) or not source.startswith(CONTRACT_PREFIX):
            continue
        wanted = source[len(CONTRACT_PREFIX):]
        if wanted == contract or ("@" not in wanted and contract.split("@", 1)[0] == wanted):
            out.append((projection_id, decl))
    return out


def _handler(record, declared: str):
    """The callable of ``./path.py[:name]`` relative to the plugin root (``handle``, else ``project``)."""
    path, _, name = declared.partition(":")
    root = Path(record.manifest.root).resolve()
    candidate = (root / path).resolve()
    try:
        candidate.relative_to(root)
    except ValueError:
        raise CodeNotLoadable(f"{declared} is outside the plugin") from None
    if not candidate.is_file():
        raise CodeNotLoadable(f"{declared} not found")
    module = plugin_module_cached(root, record.id, candidate)
    target = getattr(module, name, None) if name else (getattr(module, "handle", None) or getattr(module, "project", None))
    if not callable(target):
        raise CodeNotLoadable(f"{declared} defines no handle(value)")
    return target


def world_projections_run(sources: list[dict[str, Any]], data: dict[str, Any], registry, plugin_ids: list[str]) -> ProjectionResult:
    """Run the projections of ``plugin_ids`` over the world's ``contract:`` ``sources`` (their values
    in ``data``: sourceId → value). Pure with respect to the database: returns the rows to write and
    the notices (module docstring); the caller writes them inside its transaction."""
    result = ProjectionResult()
    for source in sources:
        value = data.get(source.get("id"))
        if value is None:
            continue
        contract = source["target"][len(CONTRACT_PREFIX):].split("+", 1)[0]
        for plugin_id in plugin_ids:
            record = registry.get(plugin_id)
            for projection_id, decl in projections_of(record, contract):
                base = {"level": "warning", "sourceId": source.get("id"), "pluginId": plugin_id, "projectionId": projection_id}
                if getattr(record, "needs_code_grant", False):
                    result.notices.append({**base, "code": CODE_PROJECTION_DEFERRED,
                                           "message": f"{plugin_id} projection {projection_id} waits for its code grant"})
                    continue
                try:
                    produced = _handler(record, str(decl.get("handler") or ""))(value)
                except Exception as exc:  # plugin code: any failure is the projection's own
                    result.notices.append({**base, "code": CODE_PROJECTION_FAILED,
                                           "message": f"{plugin_id} projection {projection_id} failed: {type(exc).__name__}: {exc}"})
                    result.held |= _declared_outputs(plugin_id, decl)
                    continue
                _outputs_collect(result, base, decl, produced, plugin_id, projection_id, str(source.get("id")))
    return result


def _declared_outputs(plugin_id: str, decl: dict[str, Any]) -> set[tuple[str, str]]:
    outputs = decl.get("outputs") if isinstance(decl.get("outputs"), dict) else {}
    return {(plugin_id, o["namespace"]) for o in outputs.values() if isinstance(o, dict) and isinstance(o.get("namespace"), str)}


def _outputs_collect(result: ProjectionResult, base: dict[str, Any], decl: dict[str, Any], produced: Any, plugin_id: str,
                     projection_id: str, source_id: str) -> None:
    outputs = decl.get("outputs") if isinstance(decl.get("outputs"), dict) else {}
    if not isinstance(produced, dict):
        result.notices.append({**base, "code": CODE_PROJECTION_INVALID, "message": "a projection returns {output: [record]}"})
        result.held |= _declared_outputs(plugin_id, decl)
        return
    for name, records in produced.items():
        target = outputs.get(name)
        if not isinstance(target, dict) or not isinstance(target.get("namespace"), str) or not isinstance(records, list):
            result.notices.append({**base, "code": CODE_PROJECTION_INVALID, "message": f"output {name} is not declared or not a list"})
            continue
        key_field = str(target.get("key") or "id")
        rows = result.rows.setdefault((plugin_id, target["namespace"]), [])
        for index, item in enumerate(records):
            if not isinstance(item, dict) or item.get(key_field) in (None, ""):
                result.notices.append({**base, "code": CODE_PROJECTION_INVALID,
                                       "message": f"output {name} record {index} has no {key_field}"})
                result.held.add((plugin_id, target["namespace"]))
                continue
            rows.append((str(item[key_field]), item))
            result.entries.append(ProjectedRow(plugin_id, projection_id, source_id, target["namespace"], str(item[key_field]), item))


def world_projection_rows_write(session, result: ProjectionResult) -> tuple[int, int]:
    """Write a projection pass's rows for ``session`` (caller's transaction): absent rows are
    created, a row holding another value is kept. Returns (imported, conflicts)."""
    from plugins_app.models import PluginData

    imported = conflicts = 0
    for (plugin_id, namespace), rows in result.rows.items():
        rows = list(dict(rows).items())  # a key repeated by the handler: the last record wins
        existing = {r.key: r.value for r in PluginData.objects.filter(
            session=session, plugin_id=plugin_id, namespace=namespace, key__in=[k for k, _ in rows])}
        fresh = [PluginData(session=session, plugin_id=plugin_id, namespace=namespace, key=key, value=record)
                 for key, record in rows if key not in existing]
        PluginData.objects.bulk_create(fresh)
        imported += len(fresh)
        conflicts += sum(1 for key, record in rows if key in existing and existing[key] != record)
    return imported, conflicts
