"""What a plugin tool's ``execute(args, ctx)`` may rely on (spec 000 §创建新工具, ToolCallContext).

The turn engine passes its own implementation (``turns.engine.tools.context.CallContext``); plugin
code types against this protocol so it never imports the engine.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from plugins_app.toolkit.state import JsonObject, StateView


@runtime_checkable
class CallContext(Protocol):
    """One tool call's context.

    locale: the instruction locale ("zh-CN" / "en-US"); content_locale: the session language for
    player-facing text. logical_turn: the turn number this execution counts as (None outside a
    turn). inputs: the runtime's resolved ``io.inputs`` (``{name: {"value": ...}}``), private
    copies. state: session reads with this execution's staged writes applied; they raise
    ToolError("cancelled") once the call is over. stage / emit buffer a Proposal / a domain event
    for this call only (dropped if the call fails, times out or is cancelled).
    """

    tool_name: str
    call_id: str
    session_id: str
    plugin_id: str
    runtime_id: str
    locale: str
    content_locale: str
    logical_turn: int | None
    inputs: dict[str, Any]

    @property
    def state(self) -> StateView: ...

    @property
    def is_cancelled(self) -> bool: ...

    def stage(self, proposal: Any) -> None: ...

    def emit(self, topic: str, data: JsonObject | None = None) -> None: ...
