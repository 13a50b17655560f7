"""ToolExecutor: authorization, approval, argument repair/validation, execution with timeouts
and cancellation, batch semantics and the model-facing envelope (spec 000, ToolExecutor,
同一批调用的执行, 统一返回格式与错误码).

It never raises for a tool failure: every call yields a ToolCallOutcome whose `envelope` is
the JSON object the model reads.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from turns.engine.tools.context import CallContext, ToolContext
from plugins_app.toolkit.definition import _UNSET as UNSET_VIEW
from plugins_app.toolkit.definition import ParsedArguments, Tool, ToolResult
from turns.engine.tools.envelope import error_envelope, internal_message, success_envelope
from plugins_app.toolkit.errors import (
    CANCELLED,
    INTERNAL,
    INVALID_INPUT,
    NOT_FOUND,
    REFUSED,
    TIMEOUT,
    UNAVAILABLE,
    ToolError,
)
from plugins_app.toolkit.proposals import UI_RENDER, Proposal, ProposalInvalid, proposal_validate
from turns.engine.tools.registry import SOURCE_BUILTIN, SOURCE_LOCAL, ResolvedTool, ToolRegistry
from plugins_app.toolkit.repair import ArgumentJsonError, parse_arguments_json

logger = logging.getLogger(__name__)

#: Largest number of concurrently running calls in one parallel pool.
MAX_PARALLEL_CALLS = 8
#: How often a waiting call re-checks cancellation (seconds).
_POLL_SECONDS = 0.02

STATUS_SUCCESS = "success"
STATUS_FAILED = "failed"
STATUS_SKIPPED = "skipped"

CONTROL_SUSPEND = "suspend"
CONTROL_DONE = "done"
SUSPEND_SENTINEL_KEY = "_covelSuspend"
DONE_SENTINEL_KEY = "_covelDone"
READ_ONLY_WRITES_TEXT = "read-only tool returned writes"
#: Proposal.meta key of a staged write that failed its payload check (the commit rejects it).
PROPOSAL_INVALID_META = "invalid"
#: Builtin tools that only compute over the in-memory snapshot (no I/O, no waiting): run in the
#: calling thread when they have no timeout. A thread per call was most of their cost (issue 18:
#: "each tool call starts a thread"); with no deadline the caller waits for them either way, and
#: they are too short for cancellation to matter. memory-search (embeddings), suspend and dataset
#: tools are not listed: they keep their own thread.
INLINE_BUILTIN_TOOLS = frozenset({
    "runtime-done", "sync-characters", "list-characters", "get-character", "world-dimension-get",
    "world-dimension-list", "create-choices", "create-form", "create-notification", "render-ui", "emit-event",
})


@dataclass(frozen=True)
class ToolCall:
    """One model tool call. arguments: the raw JSON text, or a dict (ctx.tools.call)."""

    call_id: str
    name: str
    arguments: str | dict[str, Any] | None


@dataclass(frozen=True)
class ApprovalRule:
    """pattern: "builtin:*", "local:*" or an exact tool name (any source); decision allow|deny."""

    pattern: str
    decision: str

    def matches(self, name: str, source: str) -> bool:
        if self.pattern.endswith(":*"):
            return self.pattern[:-2] == source
        return self.pattern == name


#: Default approval rules (createDefaultToolApprovalPipeline).
DEFAULT_APPROVAL_RULES: tuple[ApprovalRule, ...] = (
    ApprovalRule("builtin:*", "allow"),
    ApprovalRule("local:*", "allow"),
)


@dataclass
class ToolCallOutcome:
    """The result of one call, in the model's order.

    envelope: what the model reads (see envelope_json). status: success | failed | skipped.
    content: the full body (parsedResult) on success, else None. error: the ToolError on failure.
    history_arguments: JSON text for the model history: the repaired arguments, or the raw text
    as a JSON string when it could not be parsed. counts_as_failure: False for skipped calls and
    for a tool's own ToolError("refused"). control: "suspend" / "done" for the builtin sentinels.
    proposals/events: staged writes, only on success.
    """

    call_id: str
    name: str
    status: str
    envelope: dict[str, Any]
    history_arguments: str
    content: Any = None
    error: ToolError | None = None
    proposals: list[Proposal] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    source: str | None = None
    approval: str | None = None
    control: str | None = None
    counts_as_failure: bool = False
    duration_ms: int = 0
    internal_detail: str | None = None


@dataclass
class _Prepared:
    call: ToolCall
    resolved: ResolvedTool | None = None
    failure: ToolCallOutcome | None = None

    @property
    def is_parallel_safe(self) -> bool:
        if self.resolved is None or self.failure is not None:
            return False
        ann = self.resolved.tool.annotations
        return ann.read_only and ann.concurrency_safe


class ExecutorClosed(RuntimeError):
    pass


class ToolExecutor:
    """Runs tool calls for runtimes. One instance per process; close() on shutdown.

    registry: builtin and plugin tools. approval_rules: custom rules tried first, in order;
    then builtin:* / local:* allow; no match allows.
    """

    def __init__(self, registry: ToolRegistry, *, approval_rules: Sequence[ApprovalRule] = ()) -> None:
        self.registry = registry
        self.approval_rules = tuple(approval_rules) + DEFAULT_APPROVAL_RULES
        self._lock = threading.Lock()
        self._closed = False
        self._live_calls: set[CallContext] = set()
        self._threads: set[threading.Thread] = set()

    # ------------------------------------------------------------------ public API

    def execute_batch(
        self,
        calls: Sequence[ToolCall],
        context: ToolContext,
        *,
        runtime_tools: dict[str, Tool] | None = None,
    ) -> list[ToolCallOutcome]:
        """Execute one model reply's calls; returns one outcome per call, in the given order.

        Consecutive authorized readOnly+concurrencySafe calls run together (at most 8 at once);
        every other call is a barrier that runs alone. A successful `suspend` ends the batch:
        later calls get `cancelled` outcomes with status "skipped".
        runtime_tools: tools generated for this runtime only (dataset tools, service imports),
        resolved after builtins with source "local".
        """
        prepared = [self._prepare(call, context, runtime_tools or {}) for call in calls]
        outcomes: list[ToolCallOutcome | None] = [None] * len(prepared)
        i = 0
        stop_reason: str | None = None
        while i < len(prepared):
            if stop_reason is not None:
                outcomes[i] = self._skipped(prepared[i].call, stop_reason)
                i += 1
                continue
            if prepared[i].is_parallel_safe:
                j = i
                while j < len(prepared) and prepared[j].is_parallel_safe:
                    j += 1
                group = list(range(i, j))
                with concurrent.futures.ThreadPoolExecutor(
                    max_workers=min(MAX_PARALLEL_CALLS, len(group)), thread_name_prefix="tool-pool"
                ) as pool:
                    futures = {k: pool.submit(self._run_prepared, prepared[k], context) for k in group}
                    for k in group:
                        outcomes[k] = futures[k].result()
                for k in group:
                    self._after_call(outcomes[k], context)  # type: ignore[arg-type]
                i = j
                continue
            outcome = self._run_prepared(prepared[i], context)
            outcomes[i] = outcome
            self._after_call(outcome, context)
            if outcome.control == CONTROL_SUSPEND:
                stop_reason = "the runtime suspended before this call ran"
            i += 1
        return [o for o in outcomes if o is not None]

    def execute_one(
        self, call: ToolCall, context: ToolContext, *, runtime_tools: dict[str, Tool] | None = None
    ) -> ToolCallOutcome:
        """Execute a single call (function runtimes' ctx.tools.call path)."""
        return self.execute_batch([call], context, runtime_tools=runtime_tools)[0]

    def refused_outcome(self, call: ToolCall, reason: str) -> ToolCallOutcome:
        """A call a PreToolUse hook refused: not run, tool result ``refused`` with ``reason``,
        status skipped, not a failed call (spec 000: 被 PreToolUse 跳过的调用只记历史和 trace，不计失败)."""
        outcome = self._failed(call, ToolError(REFUSED, reason), history=_history_for(call.arguments), own_refusal=True)
        outcome.status = STATUS_SKIPPED
        return outcome

    def cancelled_outcome(self, call: ToolCall, reason: str) -> ToolCallOutcome:
        """A queued call that will not run (a PostToolUse hook stopped the batch): ``cancelled``, skipped."""
        return self._skipped(call, reason)

    def close(self, timeout_seconds: float | None = 30.0) -> None:
        """Stop accepting calls, cancel running ones and wait for their threads. Idempotent."""
        with self._lock:
            self._closed = True
            live = list(self._live_calls)
            threads = list(self._threads)
        for call_ctx in live:
            call_ctx.cancel.cancel("executor closed")
        deadline = None if timeout_seconds is None else time.monotonic() + timeout_seconds
        for thread in threads:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            thread.join(remaining)

    # ------------------------------------------------------------------ stages

    def _prepare(self, call: ToolCall, context: ToolContext, runtime_tools: dict[str, Tool]) -> _Prepared:
        if call.name not in context.authorized_tool_names:
            return _Prepared(
                call,
                failure=self._failed(
                    call,
                    ToolError(UNAVAILABLE, f'The tool "{call.name}" is not available to this runtime.'),
                    history=_history_for(call.arguments),
                ),
            )
        resolved = self.registry.resolve(call.name, None)
        if resolved is None and call.name in runtime_tools:
            resolved = ResolvedTool(runtime_tools[call.name], SOURCE_LOCAL, context.plugin_id)
        if resolved is None:
            resolved = self.registry.resolve(call.name, context.plugin_id)
        if resolved is None:
            return _Prepared(
                call,
                failure=self._failed(
                    call,
                    ToolError(NOT_FOUND, f'Tool "{call.name}" is not registered for this plugin.'),
                    history=_history_for(call.arguments),
                ),
            )
        return _Prepared(call, resolved=resolved)

    def _approve(self, name: str, source: str) -> str:
        for rule in self.approval_rules:
            if rule.matches(name, source):
                return rule.decision
        return "allow"

    def _run_prepared(self, prepared: _Prepared, context: ToolContext) -> ToolCallOutcome:
        if prepared.failure is not None:
            return prepared.failure
        call = prepared.call
        resolved = prepared.resolved
        assert resolved is not None
        started = time.monotonic()
        if self._closed or context.cancel.is_cancelled:
            return self._skipped(call, "the runtime was cancelled before this call ran")
        if self._approve(call.name, resolved.source) == "deny":
            outcome = self._failed(
                call,
                ToolError(REFUSED, f'Tool "{call.name}" was refused by the approval policy.'),
                history=_history_for(call.arguments),
                source=resolved.source,
            )
            outcome.approval = "denied"
            return outcome
        try:
            history, parsed = self._parse(resolved.tool, call.arguments)
        except ToolError as exc:
            outcome = self._failed(call, exc, history=getattr(exc, "history", _history_for(call.arguments)))
            outcome.source = resolved.source
            outcome.approval = "allowed"
            return outcome
        outcome = self._execute(resolved, call, parsed, history, context)
        outcome.source = resolved.source
        outcome.approval = "allowed"
        outcome.duration_ms = int((time.monotonic() - started) * 1000)
        return outcome

    def _parse(self, tool: Tool, raw: str | dict[str, Any] | None) -> tuple[str, ParsedArguments]:
        value: Any = raw
        if isinstance(raw, str) and raw.strip():
            try:
                value = parse_arguments_json(raw).value
            except ArgumentJsonError as exc:
                error = ToolError(
                    INVALID_INPUT,
                    f"The arguments are not valid JSON: {exc}.",
                    hint="Send the arguments again as one complete JSON object.",
                    details={"reason": exc.reason, "position": exc.position},
                )
                error.history = json.dumps(raw, ensure_ascii=False)  # type: ignore[attr-defined]
                raise error from None
        if value is not None and not isinstance(value, (dict, str)):
            error = ToolError(INVALID_INPUT, "The arguments must be a JSON object.", hint="Pass an object.")
            error.history = json.dumps(value, ensure_ascii=False)  # type: ignore[attr-defined]
            raise error
        try:
            parsed = tool.parse_arguments(value)
        except ToolError as exc:
            exc.history = _history_for(value)  # type: ignore[attr-defined]
            raise
        return json.dumps(parsed.arguments, ensure_ascii=False), parsed

    def _execute(
        self,
        resolved: ResolvedTool,
        call: ToolCall,
        parsed: ParsedArguments,
        history: str,
        context: ToolContext,
    ) -> ToolCallOutcome:
        tool = resolved.tool
        call_ctx = CallContext(context, tool.name, call.call_id)
        if (resolved.source == SOURCE_BUILTIN and tool.name in INLINE_BUILTIN_TOOLS and not tool.is_async
                and tool.timeout_ms is None):
            return self._execute_inline(resolved, call, parsed, history, context, call_ctx)
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        loop_box: dict[str, Any] = {}

        def work() -> None:
            try:
                if tool.is_async:
                    loop = asyncio.new_event_loop()
                    try:
                        task = loop.create_task(tool.execute(parsed.value, call_ctx))
                        loop_box["loop"], loop_box["task"] = loop, task
                        result = loop.run_until_complete(task)
                    finally:
                        loop.close()
                else:
                    result = tool.execute(parsed.value, call_ctx)
                future.set_result(result)
            except BaseException as exc:  # report everything, including cancellation
                future.set_exception(exc)

        with self._lock:
            if self._closed:
                return self._skipped(call, "the executor is shutting down")
            thread = threading.Thread(target=work, name=f"tool-{tool.name}", daemon=True)
            self._live_calls.add(call_ctx)
            self._threads.add(thread)
        thread.start()
        deadline = None if tool.timeout_ms is None else time.monotonic() + tool.timeout_ms / 1000
        try:
            while True:
                wait = _POLL_SECONDS
                if deadline is not None:
                    wait = max(0.0, min(wait, deadline - time.monotonic()))
                try:
                    raw_result = future.result(timeout=wait)
                    break
                except concurrent.futures.TimeoutError:
                    pass
                except ToolError as exc:
                    # refused: the tool's own ToolError("refused"), or a provider failure an imported
                    # service marked refused (spec 000 §服务失败怎样回答): not the caller's failed call.
                    return self._failed(call, exc, history=history,
                                        own_refusal=exc.code == REFUSED or getattr(exc, "refused", False) is True)
                except (Exception, asyncio.CancelledError) as exc:
                    if call_ctx.is_cancelled:
                        return self._cancelled(call, history)
                    logger.exception("tool %s raised", tool.name)
                    return self._internal(call, exc, history)
                if call_ctx.is_cancelled:
                    _cancel_async(loop_box)
                    return self._cancelled(call, history)
                if deadline is not None and time.monotonic() >= deadline:
                    _cancel_async(loop_box)
                    return self._failed(
                        call,
                        ToolError(TIMEOUT, f'Tool "{tool.name}" did not finish within {tool.timeout_ms} ms.'),
                        history=history,
                    )
        finally:
            call_ctx.cancel.cancel("call finished")
            call_ctx.close()
            with self._lock:
                self._live_calls.discard(call_ctx)
            thread.join(0)
            if not thread.is_alive():
                with self._lock:
                    self._threads.discard(thread)
        return self._finish(resolved, call, raw_result, call_ctx, history, context)

    def _execute_inline(
        self,
        resolved: ResolvedTool,
        call: ToolCall,
        parsed: ParsedArguments,
        history: str,
        context: ToolContext,
        call_ctx: CallContext,
    ) -> ToolCallOutcome:
        """``_execute`` for INLINE_BUILTIN_TOOLS: the same outcomes, run in the calling thread."""
        tool = resolved.tool
        with self._lock:
            if self._closed:
                return self._skipped(call, "the executor is shutting down")
            self._live_calls.add(call_ctx)
        try:
            try:
                raw_result = tool.execute(parsed.value, call_ctx)
            except ToolError as exc:
                return self._failed(call, exc, history=history,
                                    own_refusal=exc.code == REFUSED or getattr(exc, "refused", False) is True)
            except (Exception, asyncio.CancelledError) as exc:
                if call_ctx.is_cancelled:
                    return self._cancelled(call, history)
                logger.exception("tool %s raised", tool.name)
                return self._internal(call, exc, history)
            if call_ctx.is_cancelled:
                # The runtime was cancelled while the call ran: its result is discarded, as a
                # threaded call's would be once the wait notices the cancellation.
                return self._cancelled(call, history)
        finally:
            call_ctx.cancel.cancel("call finished")
            call_ctx.close()
            with self._lock:
                self._live_calls.discard(call_ctx)
        return self._finish(resolved, call, raw_result, call_ctx, history, context)

    def _finish(
        self,
        resolved: ResolvedTool,
        call: ToolCall,
        raw_result: Any,
        call_ctx: CallContext,
        history: str,
        context: ToolContext,
    ) -> ToolCallOutcome:
        tool = resolved.tool
        result = raw_result if isinstance(raw_result, ToolResult) else ToolResult(content=raw_result)
        proposals = list(call_ctx.staged_proposals) + list(result.proposals)
        events = list(call_ctx.emitted_events) + [dict(e) for e in result.events]
        content = result.content
        if isinstance(content, dict) and isinstance(content.get("ui"), list):
            for block in content["ui"]:
                if not isinstance(block, dict) or "parts" not in block:
                    return self._internal(call, "a UI block has no parts", history)
                proposals.append(Proposal(UI_RENDER, dict(block)))
        if tool.annotations.read_only and (proposals or events):
            return self._internal(call, READ_ONLY_WRITES_TEXT, history)
        for proposal in proposals:
            if not isinstance(proposal, Proposal):
                return self._internal(call, f"returned a non-Proposal write: {type(proposal).__name__}", history)
            proposal.plugin_id = proposal.plugin_id or context.plugin_id
            proposal.runtime_id = proposal.runtime_id or context.runtime_id
            proposal.call_id = call.call_id
            try:
                proposal.payload = proposal_validate(proposal)
            except ProposalInvalid as exc:
                # Not the call's failure: the write fails at commit as proposal-invalid, through the
                # commit-failure path (spec 000 §Proposal 类型: 提交前的检查). The call stays staged.
                proposal.meta[PROPOSAL_INVALID_META] = str(exc)
                proposal.payload = _json_safe(proposal.payload)
        for event in events:
            if not isinstance(event.get("topic"), str) or not event["topic"]:
                return self._internal(call, "returned an event without a topic", history)
            event.setdefault("data", {})
        control = None
        if resolved.source == SOURCE_BUILTIN and isinstance(content, dict):
            if tool.name == "suspend" and content.get(SUSPEND_SENTINEL_KEY) is True:
                control = CONTROL_SUSPEND
            elif tool.name == "runtime-done" and content.get(DONE_SENTINEL_KEY) is True:
                control = CONTROL_DONE
        envelope = success_envelope(
            content=content,
            locale=context.locale,
            proposal_kinds=[p.kind for p in proposals],
            event_count=len(events),
            summary=result.summary,
            data=None if result.data is UNSET_VIEW else result.data,
            has_model_view=result.has_model_view,
        )
        return ToolCallOutcome(
            call_id=call.call_id,
            name=call.name,
            status=STATUS_SUCCESS,
            envelope=envelope,
            history_arguments=history,
            content=content,
            proposals=proposals,
            events=events,
            control=control,
        )

    def _after_call(self, outcome: ToolCallOutcome, context: ToolContext) -> None:
        if outcome.status == STATUS_SUCCESS:
            for event in outcome.events:
                context.emitted_event_topics.add(event["topic"])
            if context.on_success is not None:
                context.on_success(outcome)

    # ------------------------------------------------------------------ outcome builders

    def _failed(
        self,
        call: ToolCall,
        error: ToolError,
        *,
        history: str,
        source: str | None = None,
        own_refusal: bool = False,
    ) -> ToolCallOutcome:
        return ToolCallOutcome(
            call_id=call.call_id,
            name=call.name,
            status=STATUS_FAILED,
            envelope=error_envelope(error.code, error.message, error.hint),
            history_arguments=history,
            error=error,
            source=source,
            counts_as_failure=not own_refusal,
        )

    def _internal(self, call: ToolCall, error: BaseException | str, history: str) -> ToolCallOutcome:
        message = internal_message(call.name, error)
        outcome = self._failed(call, ToolError(INTERNAL, message), history=history)
        outcome.internal_detail = str(error)
        return outcome

    def _cancelled(self, call: ToolCall, history: str) -> ToolCallOutcome:
        return self._failed(call, ToolError(CANCELLED, f'Tool "{call.name}" was cancelled.'), history=history)

    def _skipped(self, call: ToolCall, reason: str) -> ToolCallOutcome:
        outcome = self._failed(
            call,
            ToolError(CANCELLED, f'Tool "{call.name}" was not run: {reason}.'),
            history=_history_for(call.arguments),
        )
        outcome.status = STATUS_SKIPPED
        outcome.counts_as_failure = False
        return outcome


def _json_safe(value: Any) -> Any:
    """A JSON copy of an invalid proposal's payload for traces and the staged view (values JSON
    cannot hold become their text; a payload that cannot be copied at all becomes {})."""
    try:
        return json.loads(json.dumps(value, default=str))
    except (TypeError, ValueError, RecursionError):
        return {}


def _cancel_async(loop_box: dict[str, Any]) -> None:
    loop, task = loop_box.get("loop"), loop_box.get("task")
    if loop is not None and task is not None and not loop.is_closed():
        try:
            loop.call_soon_threadsafe(task.cancel)
        except RuntimeError:  # the loop closed between the check and the call
            pass


def _history_for(raw: Any) -> str:
    """History text for arguments: parsed JSON when possible, else the raw text as a string."""
    if isinstance(raw, str):
        if not raw.strip():
            return "{}"
        try:
            return json.dumps(parse_arguments_json(raw).value, ensure_ascii=False)
        except ArgumentJsonError:
            return json.dumps(raw, ensure_ascii=False)
    if raw is None:
        return "{}"
    try:
        return json.dumps(raw, ensure_ascii=False)
    except (TypeError, ValueError):
        return json.dumps(str(raw), ensure_ascii=False)


def authorized_names(*groups: Iterable[str]) -> frozenset[str]:
    """Union of name lists (tools.builtin, tools.plugin, dataset tools...) as an authorized set."""
    out: set[str] = set()
    for group in groups:
        out.update(group)
    return frozenset(out)
