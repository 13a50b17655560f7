"""The event types this server emits: the spec's CovelEventType tables plus this server's documented
additions, and the one check every emitter calls (spec 004 §SSE 协议). Imports nothing of the apps."""
from __future__ import annotations

import logging

#: Every CovelEventType the spec names (spec 004 §SSE 协议: the event-type table and the table of
#: forwarded runtime-internal events; the stream-control frames of §GET /api/events/stream;
#: ``interaction.submitted`` of §玩家交互; the ``turn.completed`` debug record of §回合保存之后的收尾;
#: ``character-schema.changed`` of spec 000 §set-character-schema).
SPEC_EVENT_TYPES: frozenset[str] = frozenset({
    "narrative.delta", "narrative.completed", "interaction.requested", "ui.rendered", "ui.part.update",
    "state.snapshot.created", "session.forked", "execution.started", "runtime.started", "runtime.deferred",
    "runtime.completed", "runtime.failed", "execution.completed", "event.emitted", "asset.progress", "asset.generated",
    "world.dimensions.changed", "dimensions.changed", "dimensions.settlement.changed", "plugin-data.changed",
    "turn.suspended", "turn.resumed", "proposal.failed", "job-status.updated", "plugin.fault.counted",
    "plugin.fault.latched", "plugin.fault.cleared", "context.pruned", "context.compaction.failed",
    "commit.fanout.failed", "error.occurred",
    "runtime.skipped", "character.upserted", "domain-event.previewed", "step.started", "step.completed", "tool.calling",
    "tool.completed", "tool.failed", "llm.calling", "llm.responded", "message.completed", "block.emitted", "hook.fired",
    "hook.aborted", "hook.rewrote", "gateway.calling", "gateway.responded", "gateway.failed",
    "function.executing", "function.completed", "recursive.calling", "recursive.completed", "recursive.failed",
    "utils.fetch.calling", "utils.fetch.responded", "utils.fetch.failed",
    "system.connected", "system.heartbeat", "system.reset", "interaction.submitted", "turn.completed",
    "character-schema.changed",
})
#: This server's additions, each documented in README.md §Events beyond the spec's tables: the
#: restore route's notice, steer trace rows, a refused detach, lorebook writes, tool warnings and
#: a delegated sub-agent's end.
SERVER_EVENT_TYPES: frozenset[str] = frozenset({
    "state.snapshot.restored", "steer.applied", "steer.discarded", "runtime.detach.rejected", "lorebook.changed",
    "runtime.warning", "subagent.completed",
})
KNOWN_EVENT_TYPES: frozenset[str] = SPEC_EVENT_TYPES | SERVER_EVENT_TYPES


def event_type_check(type: str) -> None:
    """Refuse an event type outside KNOWN_EVENT_TYPES (ValueError) when the setting
    COVEL_STRICT_EVENT_TYPES is on (tests); otherwise log it once per type. The one place that
    keeps the emitted set equal to the spec's tables plus the documented additions."""
    if type in KNOWN_EVENT_TYPES:
        return
    from django.conf import settings

    if getattr(settings, "COVEL_STRICT_EVENT_TYPES", False):
        raise ValueError(f"event type {type!r} is neither a spec CovelEventType nor a documented server addition")
    if type not in _warned_types:
        _warned_types.add(type)
        logging.getLogger("covel.events").warning("undocumented event type %s", type)


_warned_types: set[str] = set()
