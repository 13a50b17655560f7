"""interaction.request: a form / choice / confirmation for the player (InteractionRecord +
``interaction.requested``). Tool results' ``interaction`` fields are committed the same way."""

from __future__ import annotations

from typing import Any

from turns.engine.appliers.base import CommitContext
from plugins_app.toolkit.proposals import Proposal
from turns.models import InteractionRecord

INTERACTION_REQUESTED = "interaction.requested"
TOPIC_INTERACTION = "interaction"


def interaction_record(ctx: CommitContext, spec: dict[str, Any], *, plugin_id: str | None, runtime_id: str | None) -> None:
    """Create (or replace, for the same turn and id) the pending interaction and its event."""
    interaction_id = str(spec.get("interactionId"))
    InteractionRecord.objects.update_or_create(
        session=ctx.session, turn_id=ctx.turn_id, interaction_id=interaction_id,
        defaults={"type": str(spec.get("type") or "form"), "plugin_id": plugin_id or "", "runtime_id": runtime_id or "",
                  "spec": spec, "status": "pending", "answer": None},
    )
    ctx.event(INTERACTION_REQUESTED, TOPIC_INTERACTION, {"turnId": ctx.turn_id, "interaction": spec,
                                                         "pluginId": plugin_id, "runtimeId": runtime_id})


def apply_interaction_request(ctx: CommitContext, proposal: Proposal) -> None:
    interaction_record(ctx, dict(proposal.payload), plugin_id=proposal.plugin_id, runtime_id=proposal.runtime_id)


SOURCE_PLAYER = "player"
CHANNEL_WEB = "web"
#: Record type of an answer, by interaction type; other player actions are "message", a slash
#: command "skill-invoke".
ANSWER_RECORD_TYPES = {"form": "form-submit", "choice": "click", "confirmation": "click"}
COMMAND_KIND = "command"


def interaction_inputs_record(session: Any, turn_id: str, player_input: Any, answers: list[dict[str, Any]]) -> None:
    """Write the external-input records of a committed turn's player input (inside its commit
    transaction, spec 004 §统一翻译层): one per action — an answer as ``form-submit`` (form) or
    ``click`` (choice, confirmation) targeting the interaction's plugin, a slash command as
    ``skill-invoke``, any other action as ``message`` — each with a new id, source ``player`` and
    channel ``web``. Best effort (spec: 写入失败只记一条警告日志): a failed write raises
    InteractionInputsFailed, and the commit (turns.engine.commit.turn_commit) rolls its attempt back,
    logs the warning and commits the turn again without the records — no savepoint per turn for a
    failure that almost never happens."""
    import uuid

    from django.db import DatabaseError

    rows: list[InteractionRecord] = []
    for answer in answers:
        payload = {"interactionTurnId": answer["turnId"], "interactionId": answer["interactionId"],
                   "interactionType": answer["type"], "values": answer["values"],
                   "filledNarrative": answer.get("filledNarrative", "")}
        rows.append(InteractionRecord(session=session, interaction_id=str(uuid.uuid4()), turn_id=turn_id,
                                      type=ANSWER_RECORD_TYPES.get(answer["type"], "form-submit"),
                                      plugin_id=answer.get("pluginId") or "", runtime_id=answer.get("runtimeId") or "",
                                      status=InteractionRecord.STATUS_INPUT, spec={"source": SOURCE_PLAYER, "channel": CHANNEL_WEB, "payload": payload}))
    for action in (player_input.actions if player_input is not None else []):
        if action.get("interaction"):
            continue  # recorded above, once per answer
        payload = {k: v for k, v in action.items() if k in ("kind", "text", "fields", "seatId", "actorId")}
        rows.append(InteractionRecord(session=session, interaction_id=str(uuid.uuid4()), turn_id=turn_id,
                                      type="skill-invoke" if action.get("kind") == COMMAND_KIND else "message",
                                      status=InteractionRecord.STATUS_INPUT, spec={"source": SOURCE_PLAYER, "channel": CHANNEL_WEB, "payload": payload}))
    if not rows:
        return
    try:
        InteractionRecord.objects.bulk_create(rows)
    except DatabaseError as exc:
        raise InteractionInputsFailed(turn_id) from exc


class InteractionInputsFailed(Exception):
    """The external-input records of a turn could not be written (interaction_inputs_record)."""
