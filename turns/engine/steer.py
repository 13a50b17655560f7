"""Player steering of a running turn: ``TurnControl`` (spec 004 §回合中控制（W4） steer).

A ``TurnControl`` is the ``CancelToken`` the bridge hands to ``execution_run(cancel=...)`` plus a
thread-safe steer inbox. The control channel's listener (``turns.control.ExecutionControl``,
another thread) calls ``steer_offer(message)``; the story runtime's agent loop drains the inbox
before each model call and merges every message into that call as a user message
``"[steer] <message>"`` (``"[插话] <message>"`` for a zh session) — spec: 消息并入 story runtime
的下一次 LLM 调用; only ``outputKind: story`` runtimes take them.

The inbox is open while a story runtime of the execution can still make a model call:
- the runner opens it when a turn starts that will run an agent story runtime and closes it
  when that turn's runtimes finished (``steer_open`` / ``steer_close``);
- the story loop closes it atomically once it has its final prose and nothing is waiting
  (``steer_take_or_close``). A message that arrives while the final response streams is taken
  there instead and the loop spends one more model call on it (spec: 在收尾前追加一步 LLM 调用来
  消化它, bounded by ``loop.maxSteps``).
``steer_offer`` on a closed inbox returns False: the endpoint answers 409 ``steer_closed``.
Messages the model saw are recorded by the runner (``steer_applied_take``) and saved with the
turn's commit (chat record + prompt history); an uncommitted turn saves nothing.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from turns.engine.tools.context import CancelToken

#: Trace event (turns.TraceEvent row, not forwarded to the action stream) per merged message:
#: ``{runtimeId, pluginId, step, message}``.
STEER_APPLIED = "steer.applied"
#: Trace event for an accepted message no model call took (the story runtime used up maxSteps,
#: failed, or was skipped): ``{message, reason}``.
STEER_DISCARDED = "steer.discarded"
#: ChatMessage.kind of a saved steer message.
STEER_MESSAGE_KIND = "steer"


def steer_text(message: str, *, locale: str | None) -> str:
    """The model-facing user message for one steer ``message`` (also its prompt-history text)."""
    prefix = "[插话]" if (locale or "").lower().startswith("zh") else "[steer]"
    return f"{prefix} {message}"


@dataclass(frozen=True)
class AppliedSteer:
    """A steer message a story runtime's model call included. step: 1-based model call."""

    message: str
    text: str
    runtime_id: str
    plugin_id: str
    step: int


class TurnControl(CancelToken):
    """CancelToken plus the steer inbox (module docstring). All methods are thread-safe."""

    def __init__(self) -> None:
        super().__init__()
        self._steer_lock = threading.Lock()
        self._steer_pending: list[str] = []
        self._steer_applied: list[AppliedSteer] = []
        self._steer_is_open = True

    def steer_offer(self, message: str) -> bool:
        """Queue ``message`` for the next story model call. False when the inbox is closed (no
        story model call of this execution can take it any more) or the execution was stopped."""
        with self._steer_lock:
            if not self._steer_is_open or self.is_cancelled:
                return False
            self._steer_pending.append(message)
            return True

    def steer_take(self) -> list[str]:
        """Remove and return the queued messages (oldest first)."""
        with self._steer_lock:
            out, self._steer_pending = self._steer_pending, []
            return out

    def steer_take_or_close(self) -> list[str]:
        """The queued messages; when there are none, close the inbox in the same step (so no
        message is accepted after the story's last model call)."""
        with self._steer_lock:
            if self._steer_pending:
                out, self._steer_pending = self._steer_pending, []
                return out
            self._steer_is_open = False
            return []

    def steer_open(self) -> None:
        with self._steer_lock:
            self._steer_is_open = True

    def steer_close(self) -> list[str]:
        """Close the inbox; returns the messages accepted but never taken (to be discarded)."""
        with self._steer_lock:
            self._steer_is_open = False
            out, self._steer_pending = self._steer_pending, []
            return out

    @property
    def steer_is_open(self) -> bool:
        with self._steer_lock:
            return self._steer_is_open

    def steer_applied_add(self, applied: AppliedSteer) -> None:
        with self._steer_lock:
            self._steer_applied.append(applied)

    def steer_applied_take(self) -> list[AppliedSteer]:
        """Remove and return the messages model calls included since the last take."""
        with self._steer_lock:
            out, self._steer_applied = self._steer_applied, []
            return out


def turn_control_of(token: CancelToken | None) -> TurnControl | None:
    """``token`` when it carries a steer inbox, else None (a plain CancelToken: no steering)."""
    return token if isinstance(token, TurnControl) else None
