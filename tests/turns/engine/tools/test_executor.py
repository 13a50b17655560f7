"""ToolExecutor: authorization, approval, batches, timeouts, cancellation and write checks."""

import asyncio
import json
import threading
import time


from turns.engine.tools import (
    ApprovalRule,
    InMemoryStateView,
    Proposal,
    ToolCall,
    ToolContext,
    ToolExecutor,
    ToolRegistry,
    ToolResult,
    tool,
)
from plugins_app.toolkit.errors import ToolError

RO = {"readOnly": True, "idempotent": True, "concurrencySafe": True}


def _ctx(names, **kwargs):
    return ToolContext(
        session_id="s", plugin_id="demo", runtime_id="demo/main", state=InMemoryStateView(),
        authorized_tool_names=frozenset(names), **kwargs,
    )


def _executor(*tools, plugin="demo", rules=()):
    reg = ToolRegistry()
    reg.register_plugin_tools(plugin, tools)
    return ToolExecutor(reg, approval_rules=rules)


def _echo(name="echo-value", **kwargs):
    return tool(
        name=name,
        description="Echo one short value.",
        parameters={"type": "object", "required": ["value"], "properties": {"value": {"type": "string", "minLength": 1, "maxLength": 80}}},
        execute=lambda args, ctx: {"ok": True, "value": args["value"]},
        **kwargs,
    )


def test_success_returns_the_body_in_data():
    ex = _executor(_echo())
    out = ex.execute_one(ToolCall("c1", "echo-value", '{"value": "hi"}'), _ctx({"echo-value"}))
    assert out.status == "success"
    assert out.envelope == {"data": {"ok": True, "value": "hi"}}
    assert out.content == {"ok": True, "value": "hi"}
    assert out.source == "local"


def test_unauthorized_name_is_unavailable_before_resolution():
    ex = _executor(_echo())
    out = ex.execute_one(ToolCall("c1", "echo-value", '{"value": "hi"}'), _ctx(set()))
    assert out.envelope["error"]["code"] == "unavailable"
    assert out.counts_as_failure is True


def test_authorized_but_unregistered_name_is_not_found():
    ex = _executor(_echo(), plugin="other")
    out = ex.execute_one(ToolCall("c1", "echo-value", '{"value": "hi"}'), _ctx({"echo-value"}))
    assert out.envelope["error"]["code"] == "not-found"


def test_custom_approval_rules_match_first_and_deny_is_refused():
    ex = _executor(_echo(), _echo("other-echo"), rules=[ApprovalRule("echo-value", "deny"), ApprovalRule("local:*", "allow")])
    ctx = _ctx({"echo-value", "other-echo"})
    denied = ex.execute_one(ToolCall("c1", "echo-value", '{"value": "x"}'), ctx)
    allowed = ex.execute_one(ToolCall("c2", "other-echo", '{"value": "x"}'), ctx)
    assert denied.envelope["error"]["code"] == "refused"
    assert denied.counts_as_failure is True
    assert allowed.status == "success"


def test_invalid_input_never_calls_execute():
    calls = []
    t = tool(name="echo-value", description="d", parameters={"type": "object", "required": ["value"], "properties": {"value": {"type": "string", "minLength": 1}}},
             execute=lambda a, c: calls.append(a))
    ex = _executor(t)
    out = ex.execute_one(ToolCall("c1", "echo-value", '{"value": ""}'), _ctx({"echo-value"}))
    assert out.envelope["error"]["code"] == "invalid-input"
    assert out.envelope["error"]["hint"] == "Fix these fields and call the tool again."
    assert calls == []


def test_history_keeps_repaired_arguments_or_the_raw_text_as_a_string():
    ex = _executor(_echo())
    ctx = _ctx({"echo-value"})
    repaired = ex.execute_one(ToolCall("c1", "echo-value", '{"value": "hi"}}'), ctx)
    assert repaired.status == "success"
    assert repaired.history_arguments == '{"value": "hi"}'
    broken = ex.execute_one(ToolCall("c2", "echo-value", '{"value": "hi'), ctx)
    assert broken.envelope["error"]["code"] == "invalid-input"
    assert "line 1 column" in broken.envelope["error"]["message"]
    assert json.loads(broken.history_arguments) == '{"value": "hi'


def test_parallel_pool_runs_at_most_eight_and_keeps_model_order():
    lock = threading.Lock()
    state = {"now": 0, "max": 0}
    full = threading.Event()  # set once 8 calls run at once: a slow thread start on a busy machine still meets them

    def slow(args, ctx):
        with lock:
            state["now"] += 1
            state["max"] = max(state["max"], state["now"])
            if state["now"] >= 8:
                full.set()
        full.wait(5)
        time.sleep(0.1 - args["i"] * 0.008)  # later calls finish first: the results still keep the model's order
        with lock:
            state["now"] -= 1
        return {"i": args["i"]}

    t = tool(name="read", description="d", parameters={"type": "object", "properties": {"i": {"type": "integer"}}}, annotations=RO, execute=slow)
    ex = _executor(t)
    calls = [ToolCall(f"c{i}", "read", json.dumps({"i": i})) for i in range(10)]
    outs = ex.execute_batch(calls, _ctx({"read"}))
    assert state["max"] == 8
    assert [o.content["i"] for o in outs] == list(range(10))
    assert [o.call_id for o in outs] == [f"c{i}" for i in range(10)]


def test_non_parallel_calls_are_barriers():
    log = []

    def record(label):
        def run(args, ctx):
            log.append(f"{label}:start")
            time.sleep(0.05)
            log.append(f"{label}:end")
            return None
        return run

    r1 = tool(name="r1", description="d", annotations=RO, execute=record("r1"))
    w = tool(name="w", description="d", execute=record("w"))
    r2 = tool(name="r2", description="d", annotations=RO, execute=record("r2"))
    ex = _executor(r1, w, r2)
    ex.execute_batch([ToolCall("1", "r1", "{}"), ToolCall("2", "w", "{}"), ToolCall("3", "r2", "{}")], _ctx({"r1", "w", "r2"}))
    assert log == ["r1:start", "r1:end", "w:start", "w:end", "r2:start", "r2:end"]


def test_timeout_discards_late_results_and_writes():
    finished = threading.Event()

    def slow(args, ctx):
        time.sleep(0.3)
        finished.set()
        return ToolResult(content={"late": True}, proposals=[Proposal("plugin.data", {"namespace": "n", "key": "k", "value": 1})])

    t = tool(name="slow", description="d", timeout_ms=50, execute=slow)
    ex = _executor(t, _echo())
    outs = ex.execute_batch([ToolCall("1", "slow", "{}"), ToolCall("2", "echo-value", '{"value":"after"}')], _ctx({"slow", "echo-value"}))
    assert outs[0].envelope["error"]["code"] == "timeout"
    assert outs[0].proposals == [] and outs[0].content is None
    assert outs[1].status == "success"
    ex.close()
    assert finished.is_set()


def test_reads_after_timeout_are_revoked():
    seen = {}

    def slow(args, ctx):
        time.sleep(0.2)
        try:
            ctx.state.characters()
        except ToolError as exc:
            seen["code"] = exc.code

    ex = _executor(tool(name="slow", description="d", timeout_ms=20, execute=slow))
    ex.execute_one(ToolCall("1", "slow", "{}"), _ctx({"slow"}))
    ex.close()
    assert seen == {"code": "cancelled"}


def test_async_tools_run_and_time_out():
    async def fast(args, ctx):
        await asyncio.sleep(0)
        return {"async": True}

    async def hang(args, ctx):
        await asyncio.sleep(5)

    ex = _executor(tool(name="fast", description="d", execute=fast), tool(name="hang", description="d", timeout_ms=30, execute=hang))
    outs = ex.execute_batch([ToolCall("1", "fast", "{}"), ToolCall("2", "hang", "{}")], _ctx({"fast", "hang"}))
    assert outs[0].envelope == {"data": {"async": True}}
    assert outs[1].envelope["error"]["code"] == "timeout"
    start = time.monotonic()
    ex.close(timeout_seconds=2)
    assert time.monotonic() - start < 1  # the async task was cancelled, not waited out


def test_runtime_cancellation_returns_cancelled():
    ctx = _ctx({"wait"})

    def wait(args, call_ctx):
        ctx.cancel.cancel("player stopped")
        time.sleep(0.2)
        return {"too": "late"}

    ex = _executor(tool(name="wait", description="d", execute=wait))
    out = ex.execute_one(ToolCall("1", "wait", "{}"), ctx)
    assert out.envelope["error"]["code"] == "cancelled"
    after = ex.execute_one(ToolCall("2", "wait", "{}"), ctx)
    assert after.status == "skipped" and after.counts_as_failure is False
    ex.close()


def test_read_only_tool_returning_writes_fails_internal():
    t = tool(name="sneaky", description="d", annotations=RO,
             execute=lambda a, c: ToolResult(content={}, events=[{"topic": "x.y", "data": {}}]))
    out = _executor(t).execute_one(ToolCall("1", "sneaky", "{}"), _ctx({"sneaky"}))
    assert out.envelope["error"]["code"] == "internal"
    assert "read-only tool returned writes" in out.envelope["error"]["message"]
    assert out.events == []


def test_unexpected_exception_is_internal_with_first_line_only():
    def boom(args, ctx):
        raise RuntimeError("db row 0b9a3c52-8f6e-4a51-9f7e-0d1c2b3a4f5e missing\nTraceback detail")

    out = _executor(tool(name="boom", description="d", execute=boom)).execute_one(ToolCall("1", "boom", "{}"), _ctx({"boom"}))
    assert out.envelope == {"error": {"code": "internal", "message": 'Tool "boom" failed: db row <id> missing'}}


def test_a_tools_own_refusal_does_not_count_as_failure():
    def refuse(args, ctx):
        raise ToolError("refused", "Not now.", hint="Try later.")

    out = _executor(tool(name="no", description="d", execute=refuse)).execute_one(ToolCall("1", "no", "{}"), _ctx({"no"}))
    assert out.envelope == {"error": {"code": "refused", "message": "Not now.", "hint": "Try later."}}
    assert out.counts_as_failure is False


def test_staged_proposals_get_the_source_and_the_notice():
    def stage(args, ctx):
        ctx.stage(Proposal("plugin.data", {"namespace": "notes", "key": "gate", "value": "open"}))
        return ToolResult(content={"key": "gate"}, summary="Queued a note.", data={"key": "gate"})

    out = _executor(tool(name="note", description="d", execute=stage)).execute_one(ToolCall("1", "note", "{}"), _ctx({"note"}, locale="zh-CN"))
    assert out.envelope == {
        "summary": "Queued a note.",
        "data": {"key": "gate"},
        "staged": {"count": 1, "kinds": ["plugin.data"], "notice": "已暂存，回合结束时生效（可能被拒绝）。"},
    }
    assert (out.proposals[0].plugin_id, out.proposals[0].runtime_id, out.proposals[0].call_id) == ("demo", "demo/main", "1")


def test_invalid_proposal_payload_is_staged_for_the_commit_to_reject():
    # spec 000 §Proposal 类型: an invalid payload fails at commit (proposal-invalid), not the call
    t = tool(name="bad", description="d", execute=lambda a, c: ToolResult(proposals=[Proposal("plugin.data", {"key": "k"})]))
    out = _executor(t).execute_one(ToolCall("1", "bad", "{}"), _ctx({"bad"}))
    assert out.status == "success" and out.envelope["staged"]["kinds"] == ["plugin.data"]
    assert "plugin.data proposal is invalid" in out.proposals[0].meta["invalid"]


def test_plugin_tool_returning_a_suspend_field_is_plain_data():
    t = tool(name="fake", description="d", execute=lambda a, c: {"_covelSuspend": True})
    out = _executor(t).execute_one(ToolCall("1", "fake", "{}"), _ctx({"fake"}))
    assert out.control is None and out.status == "success"


def test_close_rejects_new_calls():
    ex = _executor(_echo())
    ex.close()
    out = ex.execute_one(ToolCall("1", "echo-value", '{"value":"x"}'), _ctx({"echo-value"}))
    assert out.status == "skipped"
    assert out.envelope["error"]["code"] == "cancelled"
