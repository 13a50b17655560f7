"""The automatic retry of pending dimension settlements before a player turn (spec 004
§维度编辑与待结算恢复 "与回合的关系": 有待结算回执时，POST /api/actions 在开始回合前先自动重试一次).

The engine calls it through ``turns.engine.ports.settlements_retry`` (installed in
``TurnsConfig.ready``) at the start of a ``submit_actions`` execution in the playing phase, with
the session lock held. Each ``pending-settlement`` receipt of the session's dimension provider is
retried once, oldest first, exactly like a player's ``retryFromTurnId`` run of the tracker: the
tracker runs as a manual turn with the io.inputs of the stored source turn and that turn's
number, and commits on its own (its receipt becomes settled / no-change, or stays pending).
"""
from __future__ import annotations

from typing import Any

from plugins_app.models import PluginData
from sessions.models import Session
from turns.engine import settlements as S


def _pending_rows(session_id: str, provider: str) -> list[PluginData]:
    rows = PluginData.objects.filter(session_id=session_id, plugin_id=provider, namespace=S.SETTLEMENTS_NAMESPACE).order_by("id")
    return [r for r in rows if isinstance(r.value, dict) and r.value.get("status") == S.STATUS_PENDING]


def pending_settlements_retry(session_id: str, *, plugin_registry: Any, router: Any = None, code_grants: Any = None,
                              plugin_settings: dict[str, Any] | None = None) -> tuple[int, list[str]]:
    """Retry every pending settlement once. Returns (sources retried, resultIds still pending).
    A source whose turn is gone or was not committed, or a provider without a loaded tracker,
    is not retried and stays pending. Never raises for a failed retry (it stays pending)."""
    from covel.errors import ApiError
    from turns.engine.manual import manual_runtime_run
    from turns.engine.run import RuntimeJobRejected
    from turns.plugin_rpc import _retry_inputs, _retry_logical_turn

    session = Session.objects.get(pk=session_id)
    provider = S.provider_plugin_id(session.active_plugins, plugin_registry,
                                     bound=(session.metadata or {}).get("dimensionProviderPluginId"))
    if provider is None:
        return 0, []
    pending = _pending_rows(session_id, provider)
    if not pending:
        return 0, []
    record = plugin_registry.get(provider) if provider in (session.active_plugins or []) else None
    tracker = next((r for r in (record.manifest.runtimes if record is not None else [])
                    if r.id == f"{provider}/{S.TRACKER_RUNTIME}"), None)
    retried = 0
    if tracker is not None:
        for row in pending:
            source_turn = row.value.get("sourceTurnId")
            if not isinstance(source_turn, str):
                continue
            try:
                inputs = _retry_inputs(session, tracker, source_turn)
            except ApiError:
                continue  # the source turn is gone or was not committed: it stays pending
            retried += 1
            try:
                manual_runtime_run(session_id, tracker.id, inputs=inputs, logical_turn=_retry_logical_turn(session, source_turn),
                                   plugin_settings=plugin_settings, plugin_registry=plugin_registry, model_router=router,
                                   code_grants=code_grants)
            except RuntimeJobRejected:
                break
    return retried, [str(r.value.get("resultId") or r.key) for r in _pending_rows(session_id, provider)]
