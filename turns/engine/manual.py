"""A manual run of one runtime: plugin-rpc ``kind: runtime`` in sync mode (spec 004 §插件 RPC 通道
runtime 级: 手动运行一次目标 runtime。它走完整的回合流程：组装 prompt、工具循环、提交 proposal).

```python
from turns.engine.manual import manual_runtime_run
outcome = manual_runtime_run(session_id, runtime_id, manual_payload=payload, code_grants=check)
```

The caller holds the session lock for the whole call. The runtime runs in a new turn (origin
``manual``, not a player turn) against the committed session state — agent runtimes through the
full agent loop, function runtimes with ``ctx.manual_payload`` — and its proposals are committed
in one transaction (``turn_commit``); a runtime that reports failure still leaves its turn record.
Background runs (``schedule.background``) are runtime jobs instead (turns.plugin_rpc).
"""
from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from plugins_app.manifests import RuntimeManifest
from turns.engine import trace as T
from turns.engine.commit import CommitFailed, CommitPlan, turn_commit, turn_failure_record
from turns.engine.env import CodeGrants, ExecutionEnv, community_entries_load, tools_for_registry
from turns.engine.followers import followers_plan
from turns.engine.providers.config import ModelRouter, model_config_active
from turns.engine.run import RuntimeJobRejected, _plugin_records, _user_settings
from turns.engine.runtime import ORIGIN_MANUAL, RuntimeResult, TurnInfo
from turns.engine.schedule import runtime_run
from turns.engine.snapshot import session_snapshot_load
from turns.engine.tools.context import CancelToken

ACTIVATION_MANUAL = "manual"


@dataclass
class ManualRunOutcome:
    """turn_id: the manual turn; committed: its proposals were committed (False: ``error``
    ``{code, message}`` says why, nothing of the runtime was written); result: the runtime's
    RuntimeResult; duration_ms: the whole run including the commit; deferred_jobs: the background
    followers its emitted events queued in the same commit (``[{jobId, runtimeId}]``,
    turns.engine.followers)."""

    turn_id: str
    committed: bool
    runtime: RuntimeManifest
    result: RuntimeResult
    error: dict[str, Any] | None
    duration_ms: int
    deferred_jobs: list[dict[str, str]] = field(default_factory=list)


def manual_runtime_run(
    session_id: str,
    runtime_id: str,
    *,
    manual_payload: Any = None,
    inputs: dict[str, Any] | None = None,
    provider_keys: dict[str, str] | None = None,
    plugin_settings: dict[str, Any] | None = None,
    sink: T.EventSink | None = None,
    cancel: CancelToken | None = None,
    plugin_registry: Any = None,
    model_router: ModelRouter | None = None,
    code_grants: CodeGrants | None = None,
    logical_turn: int | None = None,
) -> ManualRunOutcome:
    """Run ``runtime_id`` once in its own turn and commit it (see the module docstring).

    inputs: resolved upstream inputs (a retry from a recorded turn), else none. plugin_settings: the
    request's X-Plugin-User-Settings (merged over world and manifest defaults). code_grants: as
    for ``execution_run``. Raises RuntimeJobRejected("runtime_not_active") when the runtime is not
    active in the session. Never raises for a runtime failure (``result.status == "failed"``).
    logical_turn: the turn number the run sees (a retry from a recorded turn passes that turn's, so
    what it settles keys the same source); default the next player turn.
    """
    from sessions.models import Session

    started = time.monotonic()
    session = Session.objects.get(pk=session_id)
    if plugin_registry is None:
        from plugins_app.registry import plugin_registry as registry_default

        plugin_registry = registry_default()
    if model_router is None:
        config, _error = model_config_active(settings.COVEL_HOME, path=settings.COVEL_LLM_TOML)
        model_router = ModelRouter(config, provider_keys=provider_keys)
    trace_id = str(uuid.uuid4())
    tracer = T.Tracer(sink or T.RecordingSink(), trace_id=trace_id, session_id=session_id)
    snapshot = session_snapshot_load(session)
    records = _plugin_records(plugin_registry, snapshot.active_plugins, snapshot.metadata)
    runtime = next((r for p in records for r in p.manifest.runtimes if r.id == runtime_id), None)
    if runtime is None:
        raise RuntimeJobRejected("runtime_not_active", f"Runtime is not active in this session: {runtime_id}")
    community_entries_load(plugin_registry, records, code_grants)
    tool_registry, executor = tools_for_registry(plugin_registry)
    env = ExecutionEnv(snapshot=snapshot, plugin_registry=plugin_registry, plugins=records, tool_registry=tool_registry,
                       executor=executor, router=model_router, tracer=tracer, cancel=cancel or CancelToken(),
                       code_grants=code_grants, user_settings=_user_settings(records, snapshot.world.metadata, plugin_settings))
    turn = TurnInfo(turn_id=str(uuid.uuid4()), kind="main", origin=ORIGIN_MANUAL,
                    logical_turn=logical_turn or snapshot.completed_player_turns + 1, manual_payload=manual_payload)
    tracer.emit(T.EXECUTION_STARTED, {"turnId": turn.turn_id, "origin": ORIGIN_MANUAL, "phase": snapshot.phase, "kind": "main",
                                      "runtimeId": runtime.id}, turn_id=turn.turn_id)
    result = runtime_run(env, runtime, turn, inputs=dict(inputs or {}))
    plan = CommitPlan(turn=turn, execution_id=None, trace_id=trace_id,
                      summary={"origin": ORIGIN_MANUAL, "kind": "main", "activation": ACTIVATION_MANUAL, "runtimeId": runtime.id},
                      followers=followers_plan(env, turn, [result]))
    try:
        turn_commit(session_id=session_id, plan=plan, results=[result], tracer=tracer)
    except CommitFailed as exc:
        error = {"code": exc.code, "message": exc.message}
        turn_failure_record(session_id=session_id, plan=plan, results=[result], tracer=tracer, error=error)
        return ManualRunOutcome(turn_id=turn.turn_id, committed=False, runtime=runtime, result=result, error=error,
                                duration_ms=int((time.monotonic() - started) * 1000))
    return ManualRunOutcome(turn_id=turn.turn_id, committed=True, runtime=runtime, result=result, error=None,
                            duration_ms=int((time.monotonic() - started) * 1000), deferred_jobs=list(plan.followers_staged))
