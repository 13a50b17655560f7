"""Small helpers shared by the builtin plugin tests."""

from __future__ import annotations

from typing import Any

from turns.engine.tools.executor import ToolCallOutcome


def payloads(outcome: ToolCallOutcome, kind: str) -> list[dict[str, Any]]:
    """Payloads of the staged proposals of one kind, in order."""
    return [p.payload for p in outcome.proposals if p.kind == kind]


def error_of(outcome: ToolCallOutcome) -> tuple[str, str]:
    """(code, message) of a failed call's model-facing envelope."""
    assert outcome.status == "failed", outcome.envelope
    return outcome.envelope["error"]["code"], outcome.envelope["error"]["message"]
