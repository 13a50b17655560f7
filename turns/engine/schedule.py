"""Runtime selection and scheduling for one turn (spec 004 §Turn 执行).

Stages run in order setup, pre-turn, narrative, post-turn, audit; a stage ends before the next
starts. Inside a stage, ``needs`` / ``after`` / ``io.inputs`` (by runtime id or by output
contract) order the runtimes; runtimes with no pending dependency run concurrently in worker
threads. A runtime sees the successful upstream results of this execution: their proposals
through its state view, their outputs as ``io.inputs``. A failed or skipped ``needs`` target
skips the dependant (``dependency-failed``); ``after`` only orders. Dependency cycles fail the
runtimes on the cycle.

Detached runtimes (``schedule.detached`` / ``completion.mode: detached``, spec 004 §Turn 执行): in a
main turn, a safe one — a function runtime in post-turn/audit that no other selected runtime
depends on (a leaf) — does not run. When it becomes ready its ``io.inputs`` are resolved (frozen)
and it yields a ``DeferredResult`` (status ``deferred``, a pre-allocated ``job_id``); the turn's
commit turns it into a runtime job (jobs app). An unsafe declaration runs in the foreground and
leaves a ``runtime.detach.rejected`` trace row (the diagnostic). ``runtime_run`` runs one runtime
outside a turn schedule (the runtime job worker).
"""

from __future__ import annotations

import concurrent.futures
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

from plugins_app.manifests import STAGES, RuntimeManifest
from turns.engine import hooks, trace as T
from turns.engine.agent import agent_runtime_run, is_story_runtime
from turns.engine.commit import STATUS_DEFERRED
from turns.engine.env import ExecutionEnv
from turns.engine.function import function_runtime_run, guard_run
from turns.engine.runtime import (
    STATUS_FAILED,
    STATUS_SKIPPED,
    STATUS_SUCCESS,
    RuntimeResult,
    TurnInfo,
)
from turns.engine.setup import setup_state_of, DONE, BLOCKED
from turns.engine.cadence import (  # noqa: F401  (MAIN_STAGES and the skip reasons stay importable here)
    MAIN_STAGES,
    SKIP_COOLDOWN,
    SKIP_INTERVAL,
    SKIP_MAX_TRIGGER_COUNT,
    TRIGGER_LEDGER_KEY,
    trigger_cadence_skip,
)

RUNNABLE_TRIGGERS = ("auto", "scheduled")
#: Most runtimes of one stage running at once.
MAX_PARALLEL_RUNTIMES = 8
#: Threads of the process-wide runtime pool, shared by concurrent executions (each still runs at
#: most MAX_PARALLEL_RUNTIMES runtimes of a stage at once).
RUNTIME_POOL_THREADS = 4 * MAX_PARALLEL_RUNTIMES

_runtime_pool: concurrent.futures.ThreadPoolExecutor | None = None
_runtime_pool_lock = threading.Lock()


def _runtime_pool_get() -> concurrent.futures.ThreadPoolExecutor:
    """The process-wide pool parallel runtimes run on, created on first use. One pool per process
    instead of one per stage: starting threads for every stage of every turn was measurable
    (profile, issue 6). Runtimes never submit to this pool themselves, so it cannot deadlock."""
    global _runtime_pool
    with _runtime_pool_lock:
        if _runtime_pool is None:
            _runtime_pool = concurrent.futures.ThreadPoolExecutor(max_workers=RUNTIME_POOL_THREADS,
                                                                  thread_name_prefix="runtime")
        return _runtime_pool

SKIP_SETUP_INCOMPLETE = "setup-incomplete"
SKIP_DEPENDENCY_FAILED = "dependency-failed"
SKIP_MISSING_INPUT = "missing-input"
SKIP_START_TURN = "start-turn"
SKIP_ABORTED = "aborted"
#: Skip reason prefix of a runtime a PreRuntime hook stopped ("hook-aborted: <reason>").
SKIP_HOOK_ABORTED = "hook-aborted"

DETACHABLE_STAGES = ("post-turn", "audit")
#: Runtime error code when a community runtime lacks its session grant at run time.
CODE_APPROVAL_REQUIRED = "approval_required"
#: Trace-only diagnostic: a detached declaration that failed the safety check ran in the foreground.
RUNTIME_DETACH_REJECTED = "runtime.detach.rejected"


@dataclass
class DeferredResult(RuntimeResult):
    """A detached runtime handed to a runtime job instead of running in the turn.

    inputs: its ``io.inputs`` resolved from this execution (frozen into the job's payload);
    job_id: the RuntimeJob id the turn's commit creates. Contributes no proposals.
    """

    inputs: dict[str, Any] = field(default_factory=dict)
    job_id: str = ""
    completion: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        return {**super().summary(), "jobId": self.job_id}


def runtimes_select(env: ExecutionEnv, turn: TurnInfo) -> list[tuple[RuntimeManifest, str | None]]:
    """(runtime, skip reason or None) for the turn, in plugin order. Setup turns take pending
    setup-stage runtimes; main turns the auto runtimes of the other stages."""
    out: list[tuple[RuntimeManifest, str | None]] = []
    setup_states = env.snapshot.setup_runtimes
    incomplete_plugins = {
        r.plugin_id for r in env.runtimes()
        if r.stage == "setup" and r.trigger.type == "auto" and (setup_states.get(r.id) or {}).get("state") != DONE
    }
    named = turn.only_runtime_ids is not None
    ledger = env.snapshot.metadata.get(TRIGGER_LEDGER_KEY) or {}
    for runtime in env.runtimes():
        if named and runtime.id not in turn.only_runtime_ids:
            continue
        if (runtime.trigger.type not in RUNNABLE_TRIGGERS and not named) or runtime.is_subagent_only or runtime.stage is None:
            continue
        if turn.kind == "setup":
            if runtime.stage != "setup":
                continue
            state = setup_state_of(setup_states, runtime.id)
            if state["state"] in (DONE, BLOCKED):
                continue
            out.append((runtime, None))
            continue
        if runtime.stage not in MAIN_STAGES:
            continue
        if runtime.plugin_id in incomplete_plugins:
            out.append((runtime, SKIP_SETUP_INCOMPLETE))
            continue
        if named:  # a retry runs what it names (spec 004 §Actions: 按手动触发的方式只重跑指定的 runtime)
            out.append((runtime, None))
            continue
        if runtime.trigger.start_turn and turn.logical_turn < runtime.trigger.start_turn:
            out.append((runtime, SKIP_START_TURN))
            continue
        reason = trigger_cadence_skip(runtime, turn.logical_turn, ledger.get(runtime.id))
        out.append((runtime, reason))
    return out


def _json_pointer(value: Any, pointer: str | None) -> tuple[bool, Any]:
    if not pointer:
        return True, value
    node = value
    for raw in pointer.lstrip("/").split("/"):
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return False, None
    return True, node


def _dependency_ids(runtime: RuntimeManifest, stage_runtimes: list[RuntimeManifest]) -> tuple[set[str], set[str]]:
    """(needs ids, ordering ids) inside the same stage."""
    by_contract: dict[str, list[str]] = {}
    for other in stage_runtimes:
        if other.output_contract:
            by_contract.setdefault(other.output_contract, []).append(other.id)
    ids = {r.id for r in stage_runtimes}

    def refs(items: list[dict[str, Any]]) -> set[str]:
        found: set[str] = set()
        for item in items:
            if isinstance(item.get("runtime"), str) and item["runtime"] in ids:
                found.add(item["runtime"])
            if isinstance(item.get("contract"), str):
                found.update(by_contract.get(item["contract"], []))
        return found - {runtime.id}

    needs = refs(runtime.needs)
    order = set(needs) | refs(runtime.after)
    for binding in runtime.inputs.values():
        source = binding.get("from") if isinstance(binding, dict) else None
        if isinstance(source, dict):
            order |= refs([source])
    return needs, order


def inputs_resolve(runtime: RuntimeManifest, results: dict[str, RuntimeResult],
                   manifests: dict[str, RuntimeManifest]) -> tuple[dict[str, Any], str | None]:
    """Resolve io.inputs from this execution's successful results. Returns (inputs, missing name)."""
    out: dict[str, Any] = {}
    for name, binding in runtime.inputs.items():
        if not isinstance(binding, dict):
            continue
        source = binding.get("from") or {}
        values: list[Any] = []
        if isinstance(source.get("runtime"), str):
            result = results.get(source["runtime"])
            if result is not None and result.status == STATUS_SUCCESS and result.output is not None:
                values.append(result.output)
        elif isinstance(source.get("contract"), str):
            for rid, result in results.items():
                manifest = manifests.get(rid)
                if manifest and manifest.output_contract == source["contract"] and result.status == STATUS_SUCCESS and result.output is not None:
                    values.append(result.output)
        selected = []
        for value in values:
            found, picked = _json_pointer(value, binding.get("select"))
            if found:
                selected.append(picked)
        if selected:
            out[name] = selected if source.get("cardinality") == "all" else selected[0]
        elif binding.get("required"):
            return out, name
    return out, None


def _run_one_in_thread(*args) -> RuntimeResult:
    """_run_one on a thread of the shared runtime pool; the DB connections that thread opened
    (trace frames, handler reads) are closed when it finishes, so parallel runtimes never leave
    connections behind (the pool's threads are long-lived)."""
    from django.db import connections

    try:
        return _run_one(*args)
    finally:
        connections.close_all()


def _run_one(env: ExecutionEnv, runtime: RuntimeManifest, turn: TurnInfo, upstream, inputs, upstream_texts) -> RuntimeResult:
    run_id = str(uuid.uuid4())
    emit_payload = {"runtimeId": runtime.id, "pluginId": runtime.plugin_id, "stage": runtime.stage, "runId": run_id}
    env.tracer.emit(T.RUNTIME_STARTED, emit_payload, turn_id=turn.turn_id, plugin_id=runtime.plugin_id, runtime_id=runtime.id)
    denial = _code_denial(env, runtime)
    hook_skip = hooks.pre_runtime(env, runtime, turn, inputs) if denial is None else None
    if denial is not None:
        result = RuntimeResult(runtime_id=runtime.id, plugin_id=runtime.plugin_id, stage=runtime.stage, status=STATUS_FAILED,
                               error=denial, run_id=run_id)
    elif hook_skip is not None:  # a PreRuntime guard hook stopped it (turns.engine.hooks)
        result = RuntimeResult(runtime_id=runtime.id, plugin_id=runtime.plugin_id, stage=runtime.stage, status=STATUS_SKIPPED,
                               skip_reason=f"{SKIP_HOOK_ABORTED}: {hook_skip}", run_id=run_id)
    elif runtime.runtime_type == "function" and runtime.function is not None:
        result = function_runtime_run(env, runtime, turn, upstream=upstream, inputs=inputs, run_id=run_id)
    else:
        result = guard_run(env, runtime, turn, upstream=upstream, inputs=inputs, run_id=run_id)
        if result is None:
            result = agent_runtime_run(env, runtime, turn, upstream=upstream, inputs=inputs,
                                       upstream_texts=upstream_texts, run_id=run_id)
    result.is_story = is_story_runtime(runtime)
    result = hooks.post_runtime(env, runtime, turn, result)
    payload = {**emit_payload, "status": result.status, "durationMs": result.duration_ms}
    if result.error:
        payload["error"] = result.error
        env.tracer.emit(T.RUNTIME_FAILED, {**emit_payload, "error": result.error}, turn_id=turn.turn_id,
                        plugin_id=runtime.plugin_id, runtime_id=runtime.id)
    if result.skip_reason:
        payload["reason"] = result.skip_reason
    if result.pre_game_done:
        payload["preGameDone"] = True
    env.tracer.emit(T.RUNTIME_COMPLETED, payload, turn_id=turn.turn_id, plugin_id=runtime.plugin_id, runtime_id=runtime.id)
    return result


def _code_denial(env: ExecutionEnv, runtime: RuntimeManifest) -> dict[str, Any] | None:
    """The check right before a community runtime's code loads (spec 004 §社区插件授权: 执行时真正加载代码
    之前，还会再检查一次授权): the session's grants as they are now, then the plugin's entry import.
    Returns the runtime's error ({code, message}) when it must not run, else None."""
    missing = env.code_denial(runtime.plugin_id, runtime.id)
    if missing is not None:
        return {"code": CODE_APPROVAL_REQUIRED, "message": f"{missing} is not granted for this session"}
    record = env.plugin(runtime.plugin_id)
    if record is not None and record.is_code_pending:
        record = env.plugin_registry.entry_ensure(runtime.plugin_id)
        if record is not None and not record.is_loaded:
            return {"code": "entry_failed", "message": record.error or "the plugin entry failed to load"}
    return None


def _skipped(env: ExecutionEnv, runtime: RuntimeManifest, turn: TurnInfo, reason: str) -> RuntimeResult:
    result = RuntimeResult(runtime_id=runtime.id, plugin_id=runtime.plugin_id, stage=runtime.stage, status=STATUS_SKIPPED,
                           skip_reason=reason, run_id=str(uuid.uuid4()), is_story=is_story_runtime(runtime))
    env.tracer.emit(T.RUNTIME_SKIPPED, {"runtimeId": runtime.id, "pluginId": runtime.plugin_id, "stage": runtime.stage, "reason": reason},
                    turn_id=turn.turn_id, plugin_id=runtime.plugin_id, runtime_id=runtime.id)
    return result


def _referenced_ids(runtime: RuntimeManifest) -> tuple[set[str], set[str]]:
    """(runtime ids, output contracts) that ``runtime`` names in needs / after / io.inputs."""
    ids: set[str] = set()
    contracts: set[str] = set()
    sources = list(runtime.needs) + list(runtime.after)
    sources += [b.get("from") for b in runtime.inputs.values() if isinstance(b, dict) and isinstance(b.get("from"), dict)]
    for item in sources:
        if isinstance(item.get("runtime"), str):
            ids.add(item["runtime"])
        if isinstance(item.get("contract"), str):
            contracts.add(item["contract"])
    return ids, contracts


def detach_unsafe_reason(runtime: RuntimeManifest, selected: list[RuntimeManifest]) -> str | None:
    """Why a detached declaration must run in the foreground, or None when it is safe to defer
    (spec 004 §Turn 执行: only post-turn / audit function leaf runtimes)."""
    if runtime.runtime_type != "function" or runtime.function is None:
        return "not-a-function-runtime"
    if runtime.stage not in DETACHABLE_STAGES:
        return "stage-not-detachable"
    for other in selected:
        if other.id == runtime.id:
            continue
        ids, contracts = _referenced_ids(other)
        if runtime.id in ids or (runtime.output_contract and runtime.output_contract in contracts):
            return "not-a-leaf"
    return None


def _detachable(env: ExecutionEnv, turn: TurnInfo, selected: list[tuple[RuntimeManifest, str | None]]) -> set[str]:
    if turn.kind != "main" or turn.retry_source_turn_id:  # a sourced retry stays in the foreground
        return set()
    runnable = [r for r, reason in selected if reason is None]
    out: set[str] = set()
    for runtime in runnable:
        if not runtime.is_detached:
            continue
        reason = detach_unsafe_reason(runtime, runnable)
        if reason is None:
            out.add(runtime.id)
        else:
            env.tracer.emit(RUNTIME_DETACH_REJECTED, {"runtimeId": runtime.id, "pluginId": runtime.plugin_id, "reason": reason},
                            turn_id=turn.turn_id, plugin_id=runtime.plugin_id, runtime_id=runtime.id, forward=False)
    return out


def _deferred(runtime: RuntimeManifest, inputs: dict[str, Any]) -> DeferredResult:
    return DeferredResult(runtime_id=runtime.id, plugin_id=runtime.plugin_id, stage=runtime.stage, status=STATUS_DEFERRED,
                          run_id=str(uuid.uuid4()), inputs=inputs, job_id=str(uuid.uuid4()),
                          completion=dict(runtime.completion))


def runtime_run(env: ExecutionEnv, runtime: RuntimeManifest, turn: TurnInfo, *, inputs: dict[str, Any],
                upstream_texts: list[str] | None = None) -> RuntimeResult:
    """Run one runtime outside a stage schedule (a runtime job): ``inputs`` are its frozen
    ``io.inputs``; it sees the committed session state only. Emits runtime.started/completed."""
    return _run_one(env, runtime, turn, [], inputs, list(upstream_texts or []))


def turn_runtimes_run(env: ExecutionEnv, turn: TurnInfo, *, context: list[RuntimeResult] | None = None) -> list[RuntimeResult]:
    """Select and run the turn's runtimes; returns results in completion order by stage.
    Safe detached runtimes yield a DeferredResult instead of running (module docstring).
    context: results of an earlier turn a retry reads as if they were this turn's upstream
    (``io.inputs``, ``needs``, the story text; turns.engine.retry); never returned, so never
    committed again."""
    selected = runtimes_select(env, turn)
    if hooks.has_hooks(env, hooks.PRE_SCHEDULE):
        # PreSchedule may narrow or reorder what runs (not what is skipped); dropped runtimes are not scheduled.
        kept = hooks.pre_schedule(env, turn, [r for r, reason in selected if reason is None])
        selected = [(r, None) for r in kept] + [(r, reason) for r, reason in selected if reason is not None]
    manifests = {r.id: r for r, _ in selected}
    detachable = _detachable(env, turn, selected)
    results: dict[str, RuntimeResult] = {}
    ordered: list[RuntimeResult] = []
    context = [c for c in context or () if c.runtime_id not in manifests]
    if context:
        known = {r.id: r for r in env.runtimes()}
        manifests.update({c.runtime_id: known[c.runtime_id] for c in context if c.runtime_id in known})
        results.update({c.runtime_id: c for c in context})
    context_texts = [c.text for c in context if c.status == STATUS_SUCCESS and c.is_story and c.text]
    for runtime, reason in selected:
        if reason is not None:
            results[runtime.id] = _skipped(env, runtime, turn, reason)
            ordered.append(results[runtime.id])
    for stage in STAGES:
        stage_runtimes = [r for r, reason in selected if r.stage == stage and reason is None]
        deps = {r.id: _dependency_ids(r, stage_runtimes) for r in stage_runtimes}
        pending = {r.id: r for r in stage_runtimes}
        while pending:
            if env.cancel.is_cancelled:
                for runtime in pending.values():
                    results[runtime.id] = _skipped(env, runtime, turn, SKIP_ABORTED)
                    ordered.append(results[runtime.id])
                break
            ready = [r for r in pending.values() if not (deps[r.id][1] & set(pending))]
            if not ready:
                for runtime in pending.values():
                    failed = RuntimeResult(runtime_id=runtime.id, plugin_id=runtime.plugin_id, stage=stage, status=STATUS_FAILED,
                                           error={"message": "dependency cycle", "code": "dependency_cycle"}, run_id=str(uuid.uuid4()))
                    env.tracer.emit(T.RUNTIME_FAILED, {"runtimeId": runtime.id, "pluginId": runtime.plugin_id, "error": failed.error},
                                    turn_id=turn.turn_id, plugin_id=runtime.plugin_id, runtime_id=runtime.id)
                    results[runtime.id] = failed
                    ordered.append(failed)
                break
            upstream = [p for res in ordered if res.status == STATUS_SUCCESS for p in res.proposals]
            upstream_texts = context_texts + [res.text for res in ordered if res.status == STATUS_SUCCESS and res.is_story and res.text]
            jobs: list[tuple[RuntimeManifest, dict[str, Any]]] = []
            for runtime in ready:
                del pending[runtime.id]
                needs, _ = deps[runtime.id]
                if any(results[n].status != STATUS_SUCCESS for n in needs if n in results):
                    results[runtime.id] = _skipped(env, runtime, turn, SKIP_DEPENDENCY_FAILED)
                    ordered.append(results[runtime.id])
                    continue
                inputs, missing = inputs_resolve(runtime, results, manifests)
                if missing is not None:
                    results[runtime.id] = _skipped(env, runtime, turn, f"{SKIP_MISSING_INPUT}:{missing}")
                    ordered.append(results[runtime.id])
                    continue
                if runtime.id in detachable:
                    results[runtime.id] = _deferred(runtime, inputs)
                    ordered.append(results[runtime.id])
                    continue
                jobs.append((runtime, inputs))
            if len(jobs) == 1:
                runtime, inputs = jobs[0]
                res = _run_one(env, runtime, turn, upstream, inputs, upstream_texts)
                results[runtime.id] = res
                ordered.append(res)
            elif jobs:
                pool = _runtime_pool_get()
                for start in range(0, len(jobs), MAX_PARALLEL_RUNTIMES):
                    batch = jobs[start:start + MAX_PARALLEL_RUNTIMES]
                    futures = [(r, pool.submit(_run_one_in_thread, env, r, turn, upstream, i, upstream_texts)) for r, i in batch]
                    for runtime, future in futures:
                        res = future.result()
                        results[runtime.id] = res
                        ordered.append(res)
    return ordered
