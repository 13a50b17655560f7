"""The builtin `memory` plugin over HTTP with the offline scripted model (issue 22; spec 004
§插件记忆; spec 000 §插件记忆与向量搜索): extraction as a detached settle job after each story
turn, blocks in `plugin-data/memory/blocks`, the `[MEMORY]` prompt segment of the next turn,
world definitions replacing the defaults, another plugin's `memory.block-definitions@1` service,
facts found by memory-search (archival), the `list-blocks` / `edit-block` actions, and the
settle barrier of the jobs app. Runs on SQLite and on PostgreSQL (both halves of ``make test``)."""
from __future__ import annotations

import json
import threading
import time
import uuid
from typing import Any

import pytest

from tests.e2e.play import PlayedSession, expect_committed, session_setup
from tests.turns.test_real_model_game import ClientApi

pytestmark = pytest.mark.django_db(transaction=True)

WORLD = "hollow-reach-light"


def _session(client, extra: tuple[str, ...], *, locale: str | None = None, world: str = WORLD) -> PlayedSession:
    api = ClientApi(client)
    plan = api.json("GET", f"/api/worlds/{world}/plugin-plan")
    body: dict[str, Any] = {"worldId": world, "plugins": list(plan["defaultPluginIds"]) + list(extra)}
    if locale:
        body["locale"] = locale
    created = api.json("POST", "/api/sessions", body, expect=201)
    played = PlayedSession(id=created["id"], token=created["ownerToken"], api=api.with_token(created["ownerToken"]),
                           created=created)
    session_setup(played)
    _settled(played.id)  # the opening's detached jobs
    return played


def _settled(session_id: str, seconds: float = 30) -> None:
    from jobs import schemas as S
    from jobs.models import RuntimeJob

    deadline = time.monotonic() + seconds
    while RuntimeJob.objects.filter(session_id=session_id, status__in=S.UNFINISHED).exists():
        assert time.monotonic() < deadline, "detached jobs did not finish"
        time.sleep(0.05)


def _say(played: PlayedSession, text: str):
    return expect_committed(played.api.action("submit_actions", played.id, {"actions": [{"kind": "say", "text": text}]}))


def _rows(listing: Any) -> dict[str, Any]:
    items = listing["items"] if isinstance(listing, dict) and "items" in listing else listing
    return {row["key"]: row["value"] for row in items}


def _jobs(session_id: str, runtime_id: str):
    from jobs.models import RuntimeJob

    return list(RuntimeJob.objects.filter(session_id=session_id, runtime_id=runtime_id).order_by("created_at"))


def _wait_jobs_done(session_id: str, runtime_id: str, count: int, seconds: float = 30) -> list:
    from jobs import schemas as S

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        jobs = _jobs(session_id, runtime_id)
        if len(jobs) >= count and all(j.status in S.FINISHED for j in jobs):
            return jobs
        time.sleep(0.05)
    raise AssertionError(f"{runtime_id} jobs not finished: {[(j.status, j.error) for j in _jobs(session_id, runtime_id)]}")


def _narrator_system_prompts(session_id: str, turn_id: str) -> list[str]:
    from turns.models import TraceEvent

    prompts = []
    for row in TraceEvent.objects.filter(session_id=session_id, turn_id=turn_id, type="llm.calling", runtime_id="narrator"):
        messages = (row.payload or {}).get("messages") or []
        prompts += [m["content"] for m in messages if m.get("role") == "system"]
    return prompts


def test_extraction_runs_detached_commits_blocks_and_the_next_story_prompt_carries_them(client):
    # given a builtin game with the memory plugin
    played = _session(client, ("memory",))

    # when the player plays a turn
    first = _say(played, "I walk down to the harbour and greet whoever is there.")

    # then the extraction did not run in the turn: it was deferred to a runtime job
    deferred = [f["payload"] for f in first.of_type("runtime.deferred") if f["payload"]["runtimeId"] == "memory/extract"]
    assert len(deferred) == 1, [f["type"] for f in first.frames]
    # and the next turn waits for it (settle), so its narrator prompt carries the committed blocks
    second = _say(played, "I ask about the old lamp and where it came from.")
    first_turn = first.of_type("execution.completed")[0]["payload"]["turnId"]
    second_turn = second.of_type("execution.completed")[0]["payload"]["turnId"]
    jobs = _wait_jobs_done(played.id, "memory/extract", 3)  # the opening's, turn 1's, turn 2's
    [job] = [j for j in jobs if j.payload["origin"]["sourceTurnId"] == first_turn]
    assert job.status == "succeeded", job.error
    from turns.models import Execution

    assert job.updated_at <= Execution.objects.get(session_id=played.id, turn_id=second_turn).started_at
    prompts = _narrator_system_prompts(played.id, second_turn)
    segment = [p for p in prompts if "[MEMORY]" in p]
    assert segment and "Last action: I walk down to the harbour and greet whoever is there." in segment[0], prompts[:1]
    blocks = _rows(played.api.json("GET", f"/api/sessions/{played.id}/plugin-data/memory/blocks"))
    assert {"plot", "scene", "hero"} <= set(blocks), blocks
    assert blocks["hero"]["content"] == "Last action: I ask about the old lamp and where it came from."
    assert blocks["plot"]["charCount"] == len(blocks["plot"]["content"]) > 0
    # and the facts it noted are archival items memory-search can find
    facts = _rows(played.api.json("GET", f"/api/sessions/{played.id}/plugin-data/memory/facts"))
    assert any(f["text"] == "I walk down to the harbour and greet whoever is there." for f in facts.values()), facts


def test_world_definitions_replace_defaults_and_the_edit_action_writes_one_block(client):
    # given a session whose world package brought its own block definitions (contract:memory.blocks@1)
    played = _session(client, ("memory",))
    definitions = {"id": "world", "blocks": [
        {"label": "clues", "displayName": {"en-US": "Clues", "zh-CN": "线索"}, "extractionHint": "Evidence about the lamp", "maxChars": 40},
        {"label": "promises", "displayName": "Promises", "extractionHint": "Open promises"}]}
    played.api.json("PUT", f"/api/sessions/{played.id}/plugin-data/memory/definitions/world", {"value": definitions})

    # when the panel lists and edits blocks through plugin RPC
    def rpc(action: str, payload: dict, expect: int = 200) -> dict:
        return played.api.json("POST", f"/api/sessions/{played.id}/plugin-rpc",
                               {"kind": "action", "pluginId": "memory", "action": action, "payload": payload}, expect=expect)

    before = _rows(played.api.json("GET", f"/api/sessions/{played.id}/plugin-data/memory/blocks"))  # the opening's
    listed = rpc("list-blocks", {})["result"]
    edited = rpc("edit-block", {"label": "clues", "content": "The lamp oil smells of cedar. A second clue follows here."})["result"]

    # then the world's set replaced the defaults, and the edit was cut to its maxChars at a sentence end
    assert [d["label"] for d in listed["definitions"]] == ["clues", "promises"]
    assert edited["block"]["content"] == "The lamp oil smells of cedar."
    blocks = _rows(played.api.json("GET", f"/api/sessions/{played.id}/plugin-data/memory/blocks"))
    assert blocks["clues"]["content"] == "The lamp oil smells of cedar." and blocks["clues"]["charCount"] == 29
    # and labels no definition has, or bad payloads, are refused with nothing written
    assert rpc("edit-block", {"label": "plot", "content": "x"})["result"] == {
        "updated": False, "error": {"code": "not-found", "message": "label: no memory block 'plot'"}}
    assert rpc("edit-block", {"label": "clues"})["result"]["error"]["code"] == "invalid-input"
    after = _rows(played.api.json("GET", f"/api/sessions/{played.id}/plugin-data/memory/blocks"))
    assert {k: v for k, v in after.items() if k != "clues"} == before and "clues" not in before

    # and the next story turn's segment shows the world's block under its display name
    turn = _say(played, "I look closely at the lamp.")
    prompts = _narrator_system_prompts(played.id, turn.of_type("execution.completed")[0]["payload"]["turnId"])
    [segment] = [p for p in prompts if "[MEMORY]" in p]
    memory = segment.split("[MEMORY]", 1)[1].split("\n\n", 1)[0]
    # (only blocks of the definitions in force: the opening's default blocks are not shown)
    assert memory.splitlines()[1:] == ["Clues: The lamp oil smells of cedar."], memory


def test_settle_barrier_waits_for_settle_jobs_and_gives_up_after_max_settle_wait():
    from jobs import schemas as S
    from jobs.models import RuntimeJob
    from jobs.services import runtime_jobs_settle_wait
    from tests.turns.test_actions_helpers import session_make

    session = session_make()
    settle = RuntimeJob.objects.create(id=str(uuid.uuid4()), session_id=session.pk, plugin_id="memory", runtime_id="memory/extract",
                                       payload={"completion": {"mode": "detached", "settle": True, "maxSettleWaitMs": 5000}})
    other = RuntimeJob.objects.create(id=str(uuid.uuid4()), session_id=session.pk, plugin_id="x", runtime_id="x/y",
                                      payload={"completion": {"mode": "detached"}})

    # when the settle job finishes 0.4 s into the wait
    def finish():
        time.sleep(0.4)
        RuntimeJob.objects.filter(pk=settle.pk).update(status=S.SUCCEEDED)

    worker = threading.Thread(target=finish)
    worker.start()
    started = time.monotonic()
    waited = runtime_jobs_settle_wait(str(session.pk))
    worker.join()
    # then the barrier waited for it (and not for the job without settle)
    assert time.monotonic() - started >= 0.4 and waited["pending"] == [] and waited["waitedMs"] >= 400
    assert RuntimeJob.objects.get(pk=other.pk).status == S.QUEUED

    # and a settle job that never finishes is given up after its maxSettleWaitMs
    stuck = RuntimeJob.objects.create(id=str(uuid.uuid4()), session_id=session.pk, plugin_id="memory", runtime_id="memory/extract",
                                      payload={"completion": {"settle": "before-next-execution", "maxSettleWaitMs": 200}})
    waited = runtime_jobs_settle_wait(str(session.pk))
    assert waited["pending"] == [str(stuck.pk)] and 200 <= waited["waitedMs"] < 2000


def test_memory_block_definitions_service_of_another_plugin_adds_blocks(client, tmp_path, settings):
    # given a community-free builtin folder holding the builtin plugins plus one that contributes a block
    import shutil
    from pathlib import Path

    from plugins_app.registry import registry_reset

    builtin = Path(settings.COVEL_BUILTIN_PLUGINS_DIR) if getattr(settings, "COVEL_BUILTIN_PLUGINS_DIR", None) else None
    source = builtin or Path(__file__).resolve().parents[2] / "plugins_app" / "builtin"
    target = tmp_path / "builtin"
    shutil.copytree(source, target)
    helper = target / "omens"
    (helper / "server").mkdir(parents=True)
    (helper / "PLUGIN.md").write_text(
        "---\nid: omens\nkind: plugin\nversion: 0.1.0\ndisplayName: Omens\ndescription: Adds an omens memory block.\n"
        "entry: ./server/entry.py\ncontributes:\n  services:\n    - memory.block-definitions@1\n---\n\nTest helper.\n", encoding="utf-8")
    (helper / "server" / "entry.py").write_text(
        "def definitions(context, args):\n"
        "    return {'blocks': [{'label': 'omens', 'displayName': 'Omens', 'extractionHint': 'Signs and portents seen', 'maxChars': 200},\n"
        "                       {'label': 'plot', 'displayName': 'Not taken', 'extractionHint': 'a label already defined'}]}\n"
        "def register(api):\n    api.register_service('memory.block-definitions@1', definitions)\n", encoding="utf-8")
    settings.COVEL_BUILTIN_PLUGINS_DIR = str(target)
    registry_reset()
    try:
        # when the opening's extraction runs with the omens service active
        played = _session(client, ("memory", "omens"))
        _wait_jobs_done(played.id, "memory/extract", 1)
        # then the extraction prompt carried the contributed block (the default plot kept its own name)
        from turns.models import TraceEvent

        calls = [r.payload for r in TraceEvent.objects.filter(session_id=played.id, type="llm.calling", runtime_id="memory/extract")]
        user = next(m["content"] for m in calls[0]["messages"] if m["role"] == "user")
        defs = json.loads(user.split("<memory-definitions>", 1)[1].split("</memory-definitions>", 1)[0])
        assert [d["label"] for d in defs] == ["plot", "scene", "relationships", "hero", "omens"]
        assert defs[0]["displayName"] == "Plot so far"
    finally:
        registry_reset()


def test_a_world_package_brings_its_blocks_through_contract_memory_blocks(client):
    # given the upstream world mistport (data/memory-blocks.json → contract:memory.blocks@1) installed
    import shutil
    from pathlib import Path

    from django.conf import settings

    from tests.shared_paths import FIXTURES_DIR

    target = Path(settings.COVEL_HOME) / "worlds" / "mistport"
    shutil.copytree(FIXTURES_DIR / "upstream" / "worlds" / "mistport", target)
    try:
        # when a session with the memory plugin is created in it
        api = ClientApi(client)
        plan = api.json("GET", "/api/worlds/mistport/plugin-plan")
        created = api.json("POST", "/api/sessions", {"worldId": "mistport", "locale": "en-US",
                                                     "plugins": list(plan["defaultPluginIds"]) + ["memory"]}, expect=201)
        owner = api.with_token(created["ownerToken"])

        # then the world's definitions are the memory plugin's definitions/world record
        record = _rows(owner.json("GET", f"/api/sessions/{created['id']}/plugin-data/memory/definitions"))["world"]
        labels = [b["label"] for b in record["blocks"]]
        assert labels[:2] == ["clues", "relics"] and "plot" not in labels
        # and they replace the default set (list-blocks, the service, the extraction prompt)
        listed = owner.json("POST", f"/api/sessions/{created['id']}/plugin-rpc",
                            {"kind": "action", "pluginId": "memory", "action": "list-blocks", "payload": {}})["result"]
        assert [d["label"] for d in listed["definitions"]] == labels and listed["blocks"] == {}
    finally:
        shutil.rmtree(target, ignore_errors=True)
