"""Player-side writes that go through the commit chain outside a turn (spec 004 §角色数据): the same
proposal kinds, schemas and appliers a runtime's proposals use, committed in one transaction with
their session events.
"""
from __future__ import annotations

from typing import Any

from django.db import transaction

from sessions.errors import CharacterRejected
from sessions.models import Character
from sessions.services import character_aliases_check, character_payload_validate, session_check_active, session_locked
from turns.engine.appliers import appliers
from turns.engine.appliers.base import CommitContext, ProposalRejected
from plugins_app.toolkit.proposals import CHARACTER_UPSERT, Proposal, ProposalInvalid, proposal_validate
from turns.events import session_events_append


def character_upsert_commit(session_id: str, payload: Any) -> Character:
    """POST /api/sessions/:id/characters: commit one ``character.upsert`` proposal through the turn
    engine's applier (turns.engine.appliers), in one transaction under the session lock, with its
    ``character.upserted`` event. 409 session_not_active unless active; 400 CharacterRejected when
    the request is invalid or the proposal is refused (schema or applier). Nothing is written on error.
    """
    data = character_payload_validate(payload)
    proposal_payload = {k: v for k, v in data.items() if k != "createdAt"}
    with transaction.atomic():
        session = session_locked(session_id)
        session_check_active(session)
        character_aliases_check(session, data)
        proposal = Proposal(kind=CHARACTER_UPSERT, payload=proposal_payload, meta={"source": "api"})
        try:
            proposal.payload = proposal_validate(proposal)
            context = CommitContext(session=session, turn_id="")
            appliers()[CHARACTER_UPSERT](context, proposal)
        except ProposalInvalid as exc:
            raise CharacterRejected(message=str(exc)) from None
        except ProposalRejected as exc:
            raise CharacterRejected(message=exc.message, details={"code": exc.code}) from None
        character = Character.objects.get(session=session, character_id=data["id"])
        if "createdAt" in data and character.version == 1:
            character.created_at = data["createdAt"]
            character.save(update_fields=["created_at"])
        session_events_append(session.id, context.events)
    return character
