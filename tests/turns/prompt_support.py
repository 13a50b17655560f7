"""The prompts runtimes sent, read where the server keeps them: the ``llm.calling`` trace rows
(spec 004 §trace: ``payload.messages`` is the prompt's text; the runtime-output full-prompt route
only rebuilds the history from turn_messages)."""
from __future__ import annotations

from turns.models import TraceEvent


def runtime_prompts(session_id: str, runtime_id: str) -> list[list[dict]]:
    """Per turn, oldest first: the messages of the runtime's last model call in that turn."""
    last: dict[str, list[dict]] = {}
    for row in TraceEvent.objects.filter(session_id=session_id, type="llm.calling", runtime_id=runtime_id).order_by("id"):
        last.pop(row.turn_id, None)  # re-insert: dict order follows each turn's latest call
        last[row.turn_id] = row.payload.get("messages") or []
    return list(last.values())


def runtime_prompt(session_id: str, runtime_id: str) -> list[dict]:
    """The messages of the runtime's latest model call (AssertionError when it made none)."""
    prompts = runtime_prompts(session_id, runtime_id)
    assert prompts, f"{runtime_id} made no model call in session {session_id}"
    return prompts[-1]


def model_calls_of(session_id: str, *, turn_ids: set[str] | None = None) -> list[dict]:
    """The llm.calling trace payloads (prompt included, ``messages``) of the session, oldest first;
    with ``turn_ids``, of those turns only. The action stream's llm.calling frames name the prompt
    by ``messageCount`` / ``promptDigest`` and do not carry it."""
    rows = TraceEvent.objects.filter(session_id=session_id, type="llm.calling")
    if turn_ids is not None:
        rows = rows.filter(turn_id__in=turn_ids)
    return [row.payload for row in rows.order_by("id")]
