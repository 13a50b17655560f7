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
    and the message ids written (for ui blocks)."""

    session: Any
    turn_id: str
    events: list[NewEvent] = field(default_factory=list)
    messages: list[Any] = field(default_factory=list)

    def event(self, type: str, topic: str, payload: dict[str, Any]) -> None:
        self.events.append(NewEvent(type=type, topic=topic, payload=payload, turn_id=self.turn_id))


Applier = Callable[[CommitContext, P.Proposal], None]
