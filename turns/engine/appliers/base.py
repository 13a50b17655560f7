"""Types every proposal applier shares (see the package docstring)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from plugins_app.toolkit import proposals as P
from turns.events import NewEvent


class ProposalRejected(Exception):
    """A proposal failed its applier's own checks. code: e.g. "proposal-invalid", "conflict"."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass
class CommitContext:
    """What appliers share inside one commit: the locked session row, the turn, collected events
    and the chat messages written (for ui blocks).

    Chat and prompt-history rows are held back (issue 18: a full-game turn inserted them one
    statement each): ``message_add`` queues an unsaved ChatMessage and/or TurnMessage in order, and
    ``messages_flush`` inserts each queue with one statement. The commit chain flushes before
    anything else writes messages (its before-story hooks) and before the commit ends."""

    session: Any
    turn_id: str
    events: list[NewEvent] = field(default_factory=list)
    messages: list[Any] = field(default_factory=list)
    chat_pending: list[Any] = field(default_factory=list)
    history_pending: list[Any] = field(default_factory=list)

    def event(self, type: str, topic: str, payload: dict[str, Any]) -> None:
        self.events.append(NewEvent(type=type, topic=topic, payload=payload, turn_id=self.turn_id))

    def message_add(self, chat: Any = None, history: Any = None) -> None:
        """Queue an unsaved ChatMessage ``chat`` and/or TurnMessage ``history`` (their order in the
        session's history is the order of these calls)."""
        if chat is not None:
            self.chat_pending.append(chat)
        if history is not None:
            self.history_pending.append(history)

    def messages_flush(self) -> None:
        """Insert the queued rows (bulk_create: one statement per table; ``created_at`` is set per
        row in queue order). Raises IntegrityError as the inserts do (a message id already stored)."""
        from sessions.models import ChatMessage, TurnMessage

        chat, self.chat_pending = self.chat_pending, []
        history, self.history_pending = self.history_pending, []
        if chat:
            ChatMessage.objects.bulk_create(chat)
        if history:
            TurnMessage.objects.bulk_create(history)


Applier = Callable[[CommitContext, P.Proposal], None]
