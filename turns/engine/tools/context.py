"""What a tool sees while it runs: ToolContext, CallContext and InMemoryStateView. The record
types and the StateView protocol are part of the plugin toolkit (plugins_app.toolkit.state).

The turn engine implements StateView over the database plus its staged-writes overlay
(committed rows, successful upstream proposals, then this runtime's own staged proposals,
spec 000 §读到的是哪一份数据). InMemoryStateView is the plain-Python implementation used by the
tool tests and usable by the engine as a pre-loaded snapshot.

Threading: the executor runs every tool call in a worker thread (so timeouts and the parallel
pool work). StateView methods are therefore called from worker threads; a view backed by the
ORM should load what it needs up front or be safe to call from another thread.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable

from covel.jsoncopy import dimension_copy, json_copy
from plugins_app.toolkit.errors import CANCELLED, ToolError
from plugins_app.toolkit.state import (
    CharacterRecord,
    DatasetDeclaration,
    EventTopic,
    JsonObject,
    LorebookEntry,
    MemoryMessage,
    SearchableRecord,
    StateView,
    WorldDimension,
)

class InMemoryStateView:
    """StateView over plain Python data (tests, and engine snapshots). Thread-safe for reads.

    plugin_data: {(plugin_id, namespace): {key: value}}; form_validators: {plugin_id: names};
    datasets: {plugin_id: {name: DatasetDeclaration}}.
    """

    def __init__(
        self,
        *,
        characters: list[CharacterRecord] | None = None,
        character_schema: JsonObject | None = None,
        world_dimensions: list[WorldDimension] | None = None,
        plugin_data: dict[tuple[str, str], dict[str, Any]] | None = None,
        messages: list[MemoryMessage] | None = None,
        summaries: list[MemoryMessage] | None = None,
        lorebook: list[LorebookEntry] | None = None,
        searchable: list[SearchableRecord] | None = None,
        form_validators: dict[str, set[str] | frozenset[str]] | None = None,
        event_topics: list[EventTopic] | None = None,
        datasets: dict[str, dict[str, DatasetDeclaration]] | None = None,
    ) -> None:
        self._characters = list(characters or [])
        self._character_schema = character_schema
        self._dimensions = list(world_dimensions or [])
        self._plugin_data = plugin_data or {}
        self._messages = list(messages or [])
        self._summaries = list(summaries or [])
        self._lorebook = list(lorebook or [])
        self._searchable = list(searchable or [])
        self._form_validators = {k: frozenset(v) for k, v in (form_validators or {}).items()}
        self._event_topics = list(event_topics or [])
        self._datasets = datasets or {}

    def characters(self) -> list[CharacterRecord]:
        return list(self._characters)

    def character_schema(self) -> JsonObject | None:
        return json_copy(self._character_schema)

    def world_dimensions(self) -> list[WorldDimension]:
        return [dimension_copy(d) for d in self._dimensions]

    def plugin_data_get(self, plugin_id: str, namespace: str, key: str) -> tuple[bool, Any]:
        rows = self._plugin_data.get((plugin_id, namespace), {})
        if key in rows:
            return True, json_copy(rows[key])
        return False, None

    def plugin_data_list(self, plugin_id: str, namespace: str) -> dict[str, Any]:
        return json_copy(self._plugin_data.get((plugin_id, namespace), {}))

    def recent_messages(self, limit: int) -> list[MemoryMessage]:
        return list(self._messages[-limit:]) if limit > 0 else []

    def history_summaries(self) -> list[MemoryMessage]:
        return list(self._summaries)

    def lorebook_entries(self) -> list[LorebookEntry]:
        return list(self._lorebook)

    def searchable_plugin_data(self) -> list[SearchableRecord]:
        return [json_copy(r) for r in self._searchable]

    def form_validators(self, plugin_id: str) -> frozenset[str]:
        return self._form_validators.get(plugin_id, frozenset())

    def event_topics(self) -> list[EventTopic]:
        return list(self._event_topics)

    def datasets(self, plugin_id: str) -> dict[str, DatasetDeclaration]:
        return dict(self._datasets.get(plugin_id, {}))


class CancelToken:
    """Thread-safe cancellation flag shared by a runtime and its tool calls."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.reason: str | None = None

    def cancel(self, reason: str = "cancelled") -> None:
        self.reason = reason
        self._event.set()

    @property
    def is_cancelled(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout_seconds: float) -> bool:
        return self._event.wait(timeout_seconds)


@dataclass
class ToolContext:
    """Per-runtime context the engine hands to ToolExecutor.execute_batch.

    locale: the instruction locale ("zh-CN" / "en-US"), already resolved by the engine with
    COVEL_INSTRUCTION_LOCALE; content_locale: the session language for player-facing text.
    logical_turn: fixed for the whole execution (None in light hosts).
    authorized_tool_names: the runtime's exact authorized set (spec 000, 授权).
    emitted_event_topics: topics emitted in this tool loop; the executor adds to it after each
    successful emit so a repeat in the same loop is a no-op (emit-event outcome 1).
    dataset_tool_names: names of dataset tools this runtime selected (for error hints).
    """

    session_id: str
    plugin_id: str
    runtime_id: str
    state: StateView
    authorized_tool_names: frozenset[str]
    locale: str = "en-US"
    content_locale: str | None = None
    logical_turn: int | None = None
    cancel: CancelToken = field(default_factory=CancelToken)
    emitted_event_topics: set[str] = field(default_factory=set)
    dataset_tool_names: frozenset[str] = frozenset()
    #: The runtime's resolved `io.inputs` by name (`{name: {"value": ...}}`), e.g. the bound
    #: narrative source or the settled world clock; plugin tools read them as `ctx.inputs`.
    inputs: dict[str, Any] = field(default_factory=dict)
    #: Called by the executor with each successful ToolCallOutcome as soon as that call (or its
    #: parallel pool) ends, before the next call starts: the agent stages the call's writes there
    #: so the rest of the reply reads them. None: the caller collects outcomes itself.
    on_success: Callable[[Any], None] | None = None
    #: The turn's ModelRouter (the request's keys and X-Slot-Config): memory-search embeds with its
    #: ``memory`` slot (turns.engine.providers.embeddings). None: keyword-only memory.
    model_router: Any = None
    #: ``history_for(character_id, limit=None)``: the session-bound experienced history of a
    #: character (turns.engine.cast; spec 000 §角色委托与策略导入 context.historyFor). None: [] always.
    history_for: Callable[..., list[Any]] | None = None


class CallContext:
    """What one tool call's execute(args, ctx) receives.

    Reads go through `state`; after the call ends, times out or is cancelled, `state` raises
    ToolError("cancelled") so late reads never reach the tool (spec 000, 取消).
    stage(proposal) / emit(topic, data) buffer writes for this call only; they are discarded
    when the call fails, times out or is cancelled.
    """

    def __init__(self, tool_context: ToolContext, tool_name: str, call_id: str) -> None:
        self._ctx = tool_context
        self.tool_name = tool_name
        self.call_id = call_id
        self.session_id = tool_context.session_id
        self.plugin_id = tool_context.plugin_id
        self.runtime_id = tool_context.runtime_id
        self.locale = tool_context.locale
        self.content_locale = tool_context.content_locale or tool_context.locale
        self.logical_turn = tool_context.logical_turn
        self.emitted_event_topics = frozenset(tool_context.emitted_event_topics)
        self.dataset_tool_names = tool_context.dataset_tool_names
        self.inputs = json_copy(tool_context.inputs)
        self.model_router = tool_context.model_router
        self._history_for = tool_context.history_for
        self.cancel = CancelToken()
        self._lock = threading.Lock()
        self._closed = False
        self.staged_proposals: list[Any] = []
        self.emitted_events: list[JsonObject] = []
        self._state = _GuardedState(tool_context.state, self)

    @property
    def state(self) -> StateView:
        return self._state  # type: ignore[return-value]

    @property
    def is_cancelled(self) -> bool:
        return self.cancel.is_cancelled or self._ctx.cancel.is_cancelled

    def history_for(self, character_id: str, limit: Any = None) -> list[Any]:
        """The story turns character ``character_id`` took part in, oldest first: ``[{turnId, role,
        text}]`` (``limit``: an int or ``{"limit": n}``; default 6). Also ``historyFor``."""
        return list(self._history_for(character_id, limit)) if self._history_for is not None else []

    historyFor = history_for  # noqa: N815 - the spec's spelling

    def check_open(self) -> None:
        """Raise ToolError("cancelled") once the call is over or cancelled."""
        if self._closed or self.is_cancelled:
            raise ToolError(CANCELLED, f'Tool "{self.tool_name}" was cancelled.')

    def stage(self, proposal: Any) -> None:
        """Buffer one Proposal for this call (same as returning it in ToolResult.proposals)."""
        with self._lock:
            self.check_open()
            self.staged_proposals.append(proposal)

    def emit(self, topic: str, data: JsonObject | None = None) -> None:
        """Buffer one domain event `{topic, data}` for this call."""
        with self._lock:
            self.check_open()
            self.emitted_events.append({"topic": topic, "data": dict(data or {})})

    def close(self) -> None:
        with self._lock:
            self._closed = True


class _GuardedState:
    """Forwards StateView reads while the call is open (revoked on timeout/cancel/return)."""

    def __init__(self, inner: StateView, call: CallContext) -> None:
        self._inner = inner
        self._call = call

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not callable(attr):
            return attr

        def guarded(*args: Any, **kwargs: Any) -> Any:
            self._call.check_open()
            result = attr(*args, **kwargs)
            self._call.check_open()
            return result

        return guarded
