"""Background followers: event jobs for what a committed execution emitted (spec 004 §插件 RPC 通道
runtime 级: 入口 runtime 发出的后台 follower 在同一个提交事务里排成事件任务（origin.activation: "event"），
记录在父任务的 result.deferredJobs 里).

Every ``event.emit`` proposal of a successful runtime in the execution wakes the active runtimes
that subscribe to its topic (``trigger: {type: event, topic}``) and run in the background
(``schedule.background``); each becomes one runtime job, ordered by runtime id, with the trigger in
``ctx.trigger_event`` (``{eventId, topic, pluginId, payload}``). ``followers_plan`` builds the job
specs before the commit; ``turns.engine.commit.turn_commit`` writes the ones whose source runtime's
writes committed (a runtime whose proposals were dropped wakes nobody) in the turn's transaction,
through the ``runtime_jobs_stage`` port, and lists them in ``CommitPlan.followers_staged``. A
rolled-back commit queues none. Subscribers that are not background runtimes are not woken here.
"""
from __future__ import annotations

import uuid
from typing import Any

from plugins_app.toolkit import proposals as P
from turns.engine.runtime import STATUS_SUCCESS

ACTIVATION_EVENT = "event"


def followers_plan(env, turn, results: list) -> list[dict[str, Any]]:
    """Job specs ``{jobId, pluginId, runtimeId, sourceRuntimeId, payload}`` for the background
    subscribers of the topics ``results`` emitted (see the module docstring); [] when none."""
    subscribers = sorted((r for r in env.runtimes() if r.trigger.type == "event" and r.trigger.topic and r.is_background
                          and not r.is_subagent_only), key=lambda r: r.id)
    if not subscribers:
        return []
    specs: list[dict[str, Any]] = []
    for result in results:
        if result.status != STATUS_SUCCESS:
            continue
        for proposal in result.proposals:
            if proposal.kind != P.EVENT_EMIT:
                continue
            topic = (proposal.payload or {}).get("topic")
            woken = [r for r in subscribers if r.trigger.topic == topic]
            if not woken:
                continue
            trigger = {"eventId": str(uuid.uuid4()), "topic": topic, "pluginId": result.plugin_id,
                       "runtimeId": result.runtime_id, "payload": (proposal.payload or {}).get("data") or {}}
            for runtime in woken:
                specs.append({
                    "jobId": str(uuid.uuid4()), "pluginId": runtime.plugin_id, "runtimeId": runtime.id,
                    "sourceRuntimeId": result.runtime_id,
                    "payload": {
                        "origin": {"activation": ACTIVATION_EVENT, "sourceTurnId": turn.turn_id,
                                   "sourceRuntimeId": result.runtime_id},
                        "stage": runtime.stage, "inputs": {}, "logicalTurn": turn.logical_turn,
                        "playerMessage": turn.player_message, "locale": env.snapshot.locale, "model": env.request_model,
                        "userSettings": env.user_settings.get(runtime.plugin_id, {}), "completion": dict(runtime.completion),
                        "triggerEvent": trigger,
                    },
                })
    return specs
