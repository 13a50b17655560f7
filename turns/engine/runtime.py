"""Shared shapes of one runtime run: the turn it belongs to and its result."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from plugins_app.toolkit.proposals import Proposal

STATUS_SUCCESS = "success"
STATUS_FAILED = "failed"
STATUS_SKIPPED = "skipped"
STATUS_SUSPENDED = "suspended"

ORIGIN_PLAYER = "player"
ORIGIN_CONTINUATION = "continuation"
ORIGIN_SETUP = "setup"
ORIGIN_MANUAL = "manual"


@dataclass
class TurnInfo:
    """One turn of an execution.

    kind: "setup" (setup-stage runtimes) or "main" (pre-turn … audit). origin: player |
    continuation | manual. player_message: the rendered text runtimes read (None without input).
    submissions: interaction answers saved with this turn
    ([{turnId, interactionId, type, pluginId, runtimeId, values, filledNarrative}]).
    logical_turn: the turn number fixed for the whole execution (completedPlayerTurns + 1).
    manual_payload: the plugin-rpc payload of a manual run; trigger_event: an event job's
    ``{eventId, topic, pluginId, payload}`` (both None otherwise). only_runtime_ids: the runtimes a
    retry names (they run whatever their trigger, start turn or interval).
    """

    turn_id: str
    kind: str
    origin: str
    player_message: str | None = None
    action_kind: str | None = None
    submissions: list[dict[str, Any]] = field(default_factory=list)
    logical_turn: int = 1
    only_runtime_ids: frozenset[str] | None = None
    manual_payload: Any = None
    trigger_event: dict[str, Any] | None = None
    #: A resumed function runtime: the player's answer and the suspension it answers.
    resume_data: Any = None
    resumed_from_suspension_id: str | None = None
    #: A retry of the failed runtimes of this committed turn (turns.engine.retry): the targets run in
    #: the foreground only (no detached jobs, no event followers).
    retry_source_turn_id: str | None = None


@dataclass
class RuntimeResult:
    """What one runtime produced. Only success/skipped results contribute proposals at commit.

    output: the runtime's typed output (downstream `io.inputs` read it); text: story prose;
    pending_inputs: interactions for the player; pre_game_done: the setup completion signal;
    tool_calls: [{tool, input, output, status, durationMs}] (RuntimeOutput.metaData.toolCallList);
    prompt: the full message list of the last model call; error: {message, code} on failure.
    """

    runtime_id: str
    plugin_id: str
    stage: str | None
    status: str
    output: Any = None
    text: str = ""
    is_story: bool = False
    proposals: list[Proposal] = field(default_factory=list)
    pending_inputs: list[dict[str, Any]] = field(default_factory=list)
    pre_game_done: bool = False
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    prompt: list[dict[str, Any]] = field(default_factory=list)
    error: dict[str, Any] | None = None
    skip_reason: str | None = None
    usage: dict[str, int] = field(default_factory=lambda: {"input": 0, "output": 0})
    model_slot: str | None = None
    duration_ms: int = 0
    is_optional: bool = True
    run_id: str = ""
    #: A suspended run (the ``suspend`` tool): ``{reason, resumeSchema, continuation}`` where
    #: continuation is what resuming needs (turns.engine.suspend); its staged writes stay in
    #: ``proposals`` and are committed only by the last successful resume.
    suspension: dict[str, Any] | None = None

    @property
    def contributes(self) -> bool:
        return self.status in (STATUS_SUCCESS, STATUS_SKIPPED)

    def summary(self) -> dict[str, Any]:
        """turn_results.runtimeResults[] item."""
        out: dict[str, Any] = {"runId": self.run_id, "runtimeId": self.runtime_id, "pluginId": self.plugin_id,
                               "stage": self.stage, "status": self.status, "durationMs": self.duration_ms}
        if self.error:
            out["error"] = self.error
        if self.skip_reason:
            out["reason"] = self.skip_reason
        if self.pre_game_done:
            out["preGameDone"] = True
        return out


class RuntimeFailure(Exception):
    """Raised inside a runtime run to fail it with a stable code (reported in runtime.failed)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
