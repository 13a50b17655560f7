"""A model peer for the tests: a real HTTP server speaking the OpenAI-compatible chat API the way real
hosts do (OpenAI, DeepSeek, ollama, llama.cpp server, gateways), with a small "player" brain that
plays the builtin game from nothing but what a model receives — the messages and the tool schemas.
Helpers only, no tests here.

Wire behaviour (``Quirks``):
- ``POST /v1/chat/completions`` streams ``data:`` frames: content in small pieces; tool calls whose
  first delta carries ``index``, ``id`` and the name and whose arguments follow in split pieces with
  no ``index`` (llama.cpp, some gateways) — or, with ``indexless``, no ``index`` at all; a usage
  chunk with empty ``choices`` (``stream_options.include_usage``) and ``[DONE]``.
- ``ignore_tool_choice``: the first reply of every conversation ignores a forced ``tool_choice``
  and answers in prose (llama.cpp and ollama do not honour a named or ``required`` choice).
- ``no_tools``: a server that cannot do tools — it drops ``tools`` and answers in prose.
- ``faults``: a queue of ``{"status": 429|500, "message"?}`` or ``{"stall_seconds": s}`` answers
  given before the next normal reply; ``"when_tool": name`` keeps one for the next request that
  offers that tool (one runtime's call).
- ``prose_pause``: ``(n, seconds)``, a reply's prose stops for ``seconds`` after its n-th content
  chunk, then goes on (a host that stalls mid-sentence).
- ``GET /v1/models`` lists ``models``.
- ``POST /v1/embeddings`` (``{"model", "input"}``) answers ``{"data": [{"index", "embedding"}]}``:
  deterministic vectors of ``embedding_dim`` floats hashed from the input's words (texts sharing
  words point the same way); ``embedding_faults`` is a queue of ``{"status": n}`` answers given
  before the next normal one. These requests are kept in ``requests`` too.

The brain (``GameBrain``) recognises a runtime by the tools it is offered and answers as a
careful model following that runtime's prompt would: the story runtime writes prose naming the people
and places the player meets; codex/affinity/character trackers record them on busy turns and call
``runtime-done`` (or an empty batch) on quiet ones; guide, world-time and the dimension tracker make
their one call; the catalogue's world-ir submits the people the story names as facts, npc-graph records
the new ones (else ``runtime-done``) and story-events' planner submits an empty plan. Arguments are
built from the offered JSON Schemas, so a tool whose schema the
framework does not send (an enum left out, ids missing from the prompt) shows up as a failed call.

Every request is kept in ``requests`` (headers and decoded body) for the tests to inspect.
"""
from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

CHUNK_CHARS = 7


@dataclass
class Quirks:
    """How the server departs from the reference API; see the module docstring."""

    indexless: bool = False
    ignore_tool_choice: bool = False
    no_tools: bool = False
    usage_chunk: bool = True
    chunk_chars: int = CHUNK_CHARS
    #: ``(chunks, seconds)``: a reply's prose pauses ``seconds`` after its first ``chunks`` content
    #: chunks (a host that stalls mid-sentence, then goes on)
    prose_pause: tuple[int, float] | None = None


@dataclass
class Reply:
    """One assistant answer: prose and/or tool calls (``[(name, arguments)]``; arguments a dict, or
    the raw text a model wrote, which may be broken JSON)."""

    text: str = ""
    calls: list[tuple[str, dict[str, Any] | str]] = field(default_factory=list)


@dataclass
class Seen:
    """One request as received."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    #: time.perf_counter() when the request was read, and when its answer's last byte was written.
    received_at: float = 0.0
    finished_at: float = 0.0

    @property
    def tool_names(self) -> list[str]:
        return [t["function"]["name"] for t in self.body.get("tools") or []]

    @property
    def system(self) -> str:
        messages = self.body.get("messages") or []
        return messages[0].get("content") or "" if messages and messages[0].get("role") == "system" else ""


class ModelPeer:
    """The server. ``brain(request_body) -> Reply`` decides each answer (default: GameBrain)."""

    def __init__(self, *, quirks: Quirks | None = None, brain: Callable[[dict[str, Any]], Reply] | None = None) -> None:
        self.quirks = quirks or Quirks()
        self.brain = brain or GameBrain()
        self.models = ["peer-large", "peer-small"]
        self.faults: list[dict[str, Any]] = []
        self.embedding_dim = 16
        self.embedding_faults: list[dict[str, Any]] = []
        self.requests: list[Seen] = []
        self.errors: list[str] = []
        self._lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # keep test output quiet
                pass

            def do_GET(self):
                body = json.dumps({"object": "list", "data": [{"id": m, "object": "model"} for m in owner.models]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except ValueError:
                    body = {}
                seen = Seen(self.path, dict(self.headers), body, received_at=time.perf_counter())
                if self.path.rstrip("/").endswith("/embeddings"):
                    owner._embeddings(self, seen, body)
                    return
                with owner._lock:
                    owner.requests.append(seen)
                    offered = [t.get("function", {}).get("name") for t in body.get("tools") or [] if isinstance(t, dict)]
                    fault = next((f for f in owner.faults if f.get("when_tool") in (None, *offered)), None)
                    if fault is not None:
                        owner.faults.remove(fault)
                if fault and "status" in fault:
                    payload = json.dumps({"error": {"message": fault.get("message", "overloaded"), "type": "server_error"}}).encode()
                    self.send_response(fault["status"])
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    if fault["status"] == 429:
                        self.send_header("Retry-After", "1")
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                if fault and "stall_seconds" in fault:
                    self.wfile.flush()
                    time.sleep(fault["stall_seconds"])
                    return
                try:
                    reply = owner._reply(body)
                except Exception as exc:  # a brain bug must show in the test, not hang the client
                    owner.errors.append(f"{type(exc).__name__}: {exc}")
                    reply = Reply(text="(the peer could not answer)")
                pause = owner.quirks.prose_pause
                content_chunks = 0
                for frame in owner._frames(body, reply):
                    self.wfile.write(f"data: {json.dumps(frame, ensure_ascii=False)}\n\n".encode())
                    self.wfile.flush()
                    delta = (frame.get("choices") or [{}])[0].get("delta") or {}
                    if delta.get("content"):
                        content_chunks += 1
                        if pause is not None and content_chunks == pause[0]:
                            time.sleep(pause[1])
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
                seen.finished_at = time.perf_counter()
                self.close_connection = True

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="model-peer", daemon=True)

    # ------------------------------------------------------------------ embeddings

    def _embeddings(self, handler: BaseHTTPRequestHandler, seen: Seen, body: dict[str, Any]) -> None:
        with self._lock:
            self.requests.append(seen)
            fault = self.embedding_faults.pop(0) if self.embedding_faults else None
        if fault is not None:
            status, payload = fault.get("status", 500), {"error": {"message": fault.get("message", "embedding failed")}}
        else:
            inputs = body.get("input")
            texts = [inputs] if isinstance(inputs, str) else list(inputs or [])
            status = 200
            payload = {"object": "list", "model": body.get("model"), "data": [
                {"object": "embedding", "index": i, "embedding": peer_embedding(str(t), self.embedding_dim)}
                for i, t in enumerate(texts)]}
        raw = json.dumps(payload).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(raw)))
        handler.end_headers()
        handler.wfile.write(raw)

    # ------------------------------------------------------------------ lifecycle

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> "ModelPeer":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()

    # ------------------------------------------------------------------ answers

    def _reply(self, body: dict[str, Any]) -> Reply:
        tools = body.get("tools") or []
        if self.quirks.no_tools:
            body = {k: v for k, v in body.items() if k not in ("tools", "tool_choice")}
            reply = self.brain(body)
            return Reply(text=reply.text or "I cannot use tools here.")
        forced = body.get("tool_choice") not in (None, "auto", "none")
        first_reply = not any(m.get("role") in ("assistant", "tool") for m in body.get("messages") or [])
        if tools and forced and self.quirks.ignore_tool_choice and first_reply:
            return Reply(text="Understood. I have read the story and will record what it shows.")
        return self.brain(body)

    def _frames(self, body: dict[str, Any], reply: Reply) -> list[dict[str, Any]]:
        model = body.get("model") or "peer"
        n = max(1, self.quirks.chunk_chars)

        def frame(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {"id": "chatcmpl-peer", "object": "chat.completion.chunk", "model": model,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

        frames = [frame({"role": "assistant", "content": ""})]
        for start in range(0, len(reply.text), n):
            frames.append(frame({"content": reply.text[start:start + n]}))
        for position, (name, arguments) in enumerate(reply.calls):
            call_id = f"call_{position}_{len(self.requests)}"
            head: dict[str, Any] = {"id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}
            if not self.quirks.indexless:
                head["index"] = position
            frames.append(frame({"tool_calls": [head]}))
            text = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
            for start in range(0, len(text), n):
                frames.append(frame({"tool_calls": [{"function": {"arguments": text[start:start + n]}}]}))
        frames.append(frame({}, "tool_calls" if reply.calls else "stop"))
        if self.quirks.usage_chunk:
            prompt = sum(len(str(m.get("content") or "")) for m in body.get("messages") or []) // 4
            frames.append({"id": "chatcmpl-peer", "object": "chat.completion.chunk", "model": model, "choices": [],
                           "usage": {"prompt_tokens": prompt, "completion_tokens": len(reply.text) // 4 + 8 * len(reply.calls),
                                     "total_tokens": prompt + len(reply.text) // 4}})
        return frames


# ---------------------------------------------------------------------- the brain

#: Names the story introduces, one per turn in order (person, place); deterministic so a test can
#: say which turn is "busy".
CAST = (
    ("Mara Quill", "the Salt Archive"), ("Tobin Reed", "the Lantern Quay"), ("Ilse Varn", "the Tide Chapel"),
    ("Oren Hale", "the Copper Stair"), ("Sefa Lorn", "the Glass Orchard"), ("Bram Oakes", "the North Weir"),
    ("Nell Dorsey", "the Ash Market"), ("Pike Alder", "the Drowned Mill"), ("Yara Finch", "the Bell Yard"),
    ("Cato Renn", "the Fog Gate"), ("Lio Marsh", "the Reed Pier"), ("Tess Morrow", "the Hollow Road"),
)
#: Player lines that make a quiet turn: the story then names nobody new and nobody is dealt with.
QUIET_MARKERS = ("wait", "rest", "listen", "look around", "等", "休息", "环顾")
STORY_MARK = "\u2063"  # invisible separator the story puts before its cast line, so trackers find it


class GameBrain:
    """Plays the builtin game from the request alone (see the module docstring)."""

    def __init__(self) -> None:
        self.story_turns = 0
        #: The people the story introduced, in order (one per busy turn).
        self.introduced: list[str] = []

    def __call__(self, body: dict[str, Any]) -> Reply:
        messages = body.get("messages") or []
        tools = {t["function"]["name"]: t["function"] for t in body.get("tools") or []}
        system = messages[0].get("content", "") if messages and messages[0].get("role") == "system" else ""
        user = next((m.get("content") or "" for m in messages if m.get("role") == "user"), "")
        last = messages[-1] if messages else {}
        if last.get("role") == "tool":
            return self._after_tool(messages, tools)
        for name, handler in (
            ("sync-codex-entries", self._codex), ("update-affinity", self._affinity), ("sync-characters", self._characters),
            ("generate-guide", self._guide), ("advance-world-time", self._world_time),
            ("update-dimensions", self._dimensions), ("create-character-form", self._player_form),
            ("initialize-world", self._initialize_world), ("submit-world-facts", self._world_facts),
            ("upsert-npc-graph", self._npc_graph), ("plan-story-events", self._plan_events),
            ("generate-scene-prompts", self._scene_prompts),
        ):
            if name in tools:
                return handler(tools, system, user)
        return self._story(system, user, messages)

    # -- after a tool answered: fix an invalid-input once, else stop the way the prompt says
    def _after_tool(self, messages: list[dict[str, Any]], tools: dict[str, Any]) -> Reply:
        last = messages[-1]
        try:
            result = json.loads(last.get("content") or "{}")
        except ValueError:
            result = {}
        if isinstance(result, dict) and isinstance(result.get("error"), dict):
            # a careful model reads the error; this one gives up politely with runtime-done when offered
            if "runtime-done" in tools:
                return Reply(calls=[("runtime-done", {"reason": "the tool refused the record"})])
            return Reply(text="The tool refused the call: " + str(result["error"].get("message"))[:200])
        if "runtime-done" in tools:
            return Reply(calls=[("runtime-done", {})])
        return Reply(text="Done.")

    # -- the story runtime
    def _story(self, system: str, user: str, messages: list[dict[str, Any]]) -> Reply:
        player = _player_line(messages)
        quiet = any(marker in player.lower() for marker in QUIET_MARKERS)
        self.story_turns += 1
        zh = _is_zh(system)
        if quiet:
            text = ("你停下脚步，静静听着风声。四下无人，只有潮水一遍遍拍打石岸。" if zh else
                    "You stop and listen. Nobody comes; only the tide works at the stones, patient as ever.")
            return Reply(text=text)
        person, place = CAST[len(self.introduced) % len(CAST)]
        previous = self.introduced[-1] if self.introduced else None
        if person not in self.introduced:
            self.introduced.append(person)
        if zh:
            text = (f"你来到{place}。一个名叫{person}的人迎上前来，向你问好，并把一盏旧灯递到你手里。"
                    f"“拿着它，”{person}说，“夜里用得上。”你向{person}道谢。")
            if previous:
                text += f"远处，{previous}朝你挥了挥手，正往{place}走来。"
        else:
            text = (f"You reach {place}. A woman named {person} steps out to greet you and presses an old lamp into "
                    f"your hands. \"Keep it,\" {person} says. \"The nights are long here.\" You thank {person} for the gift.")
            if previous:
                text += f" Across the way, {previous} waves to you on the way to {place}."
        return Reply(text=text)

    # -- post-turn trackers read the story from the user message
    def _codex(self, tools, system, user) -> Reply:
        found = _cast_in(user)
        existing = _block(system, "existing-entries")
        new = [(p, pl) for p, pl in found if p.lower() not in existing.lower()]
        if not new:
            return Reply(calls=[("runtime-done", {"reason": "nothing new"})])
        person, place = new[0]
        entries = [
            {"category": "character", "title": person, "content": f"{person} greets travellers and gave the hero an old lamp.",
             "tags": ["person"], "rarity": "common"},
            {"category": "location", "title": _title(place), "content": f"{_title(place)} is where the hero met {person}.",
             "tags": ["place"]},
        ]
        calls = []
        if "create-notification" in tools:
            calls.append(("create-notification", {"level": "info", "title": "Codex", "message": f"{person}, {_title(place)}"}))
        calls.append(("sync-codex-entries", {"entries": entries}))
        return Reply(calls=calls)

    # -- catalogue plugins (issue 20): the facts, the relationship graph and the hidden-event planner
    def _world_facts(self, tools, system, user) -> Reply:
        people = _cast_in(system + user)
        summary = (f"The hero met {people[0][0]}." if people else "The hero waits.")
        entities = [{"id": re.sub(r"[^a-z0-9]+", "-", p.lower()).strip("-"), "type": "character", "name": p} for p, _ in people]
        return Reply(calls=[("submit-world-facts", {"schemaVersion": 1, "summary": summary, "entities": entities,
                                                    "relations": [], "events": [], "statements": []})])

    def _npc_graph(self, tools, system, user) -> Reply:
        existing = _block(system, "existing-npcs")
        new = [p for p, _ in _cast_in(system + user) if p not in existing]
        if not new:
            return Reply(calls=[("runtime-done", {"reason": "no new people"})])
        return Reply(calls=[("upsert-npc-graph", {"nodes": [{"name": p, "type": "individual", "summary": f"{p} greets travellers."}
                                                            for p in new[:8]]})])

    def _plan_events(self, tools, system, user) -> Reply:
        return Reply(calls=[("plan-story-events", {"events": [], "reason": "no open thread"})])

    def _affinity(self, tools, system, user) -> Reply:
        found = _cast_in(user)
        if not found:
            return Reply(calls=[("runtime-done", {})])
        # only the one the hero explicitly dealt with (thanked), not someone who waved from afar
        thanked = [p for p, _ in found if f"thank {p}" in user or f"向{p}道谢" in user]
        if not thanked:
            return Reply(calls=[("runtime-done", {})])
        person = thanked[0]
        return Reply(calls=[("update-affinity", {"changes": [{"name": person, "delta": 4, "reason": f"You thanked {person} for the lamp."}]})])

    def _characters(self, tools, system, user) -> Reply:
        schema = tools["sync-characters"].get("parameters") or {}
        found = _cast_in(user)
        roster = _block(system, "existing-characters")
        new = [p for p, _ in found if p.lower() not in roster.lower()]
        args: dict[str, Any] = {"creates": [], "updates": []}
        # someone already on the roster moved: update them by the id that starts their roster line,
        # setting the first free-text attribute the offered schema lists
        field_props = ((_items_schema(schema, "updates").get("properties") or {}).get("fields") or {}).get("properties") or {}
        text_field = next((k for k, v in field_props.items() if v.get("type") == "string"), None)
        for line in roster.strip().splitlines():
            parts = [p.strip() for p in line.split("|")]
            if len(parts) >= 3 and parts[1] in [p for p, _ in found] and parts[1] not in new and text_field:
                place = next(pl for p, pl in CAST if p == parts[1])
                story_place = next((pl for p, pl in found if p not in (parts[1],)), place)
                args["updates"].append({"id": parts[0], "fields": {text_field: f"on the way to {_title(story_place)}"}})
        if new:
            create_schema = _items_schema(schema, "creates")
            type_enum = _enum_at(create_schema, "type")
            kind = "npc" if not type_enum or "npc" in type_enum else type_enum[-1]
            args["creates"] = [{"name": new[0], "type": kind, "description": "Keeper of an old lamp."}]
        return Reply(calls=[("sync-characters", args)])

    def _guide(self, tools, system, user) -> Reply:
        found = _cast_in(user)
        zh = _is_zh(system)
        who = found[0][0] if found else ("守夜人" if zh else "the keeper")
        where = _title(found[0][1]) if found else ("灯塔" if zh else "the tower")
        if zh:
            prompts = [{"text": f"我仔细查看{where}四周", "kind": "observe"}, {"text": f"我问{who}这里发生了什么", "kind": "ask"},
                       {"text": f"我举起旧灯走向{where}深处", "kind": "act"}, {"text": f"我向{who}保证会帮忙", "kind": "social"}]
            args = {"scene": f"{where}前", "recap": f"你在{where}遇见了{who}。", "decision": "接下来要去哪里？", "prompts": prompts}
        else:
            prompts = [{"text": f"I look carefully around {where}", "kind": "observe"},
                       {"text": f"Ask {who} what happened here", "kind": "ask"},
                       {"text": f"I raise the old lamp and go deeper into {where}", "kind": "act"},
                       {"text": f"Promise {who} that I will help", "kind": "social"}]
            args = {"scene": f"At {where}", "recap": f"You met {who} at {where}.", "decision": "Where do you go next?", "prompts": prompts}
        return Reply(calls=[("generate-guide", args)])

    def _scene_prompts(self, tools, system, user) -> Reply:
        """scene-prompts takes the guide's arguments (scene, recap, decision, 3-6 lines of two kinds or more)."""
        return Reply(calls=[("generate-scene-prompts", self._guide(tools, system, user).calls[0][1])])

    def _world_time(self, tools, system, user) -> Reply:
        params = tools["advance-world-time"].get("parameters") or {}
        return Reply(calls=[("advance-world-time", _example(params, hint=user))])

    def _dimensions(self, tools, system, user) -> Reply:
        return Reply(calls=[("update-dimensions", {"updates": []})])

    def _player_form(self, tools, system, user) -> Reply:
        # What the prompt asks: characterName first, then up to 3 string/enum attributes, bio first.
        schema = _json_block(system, "world-schema") or {}
        attributes = [a for a in schema.get("attributes") or [] if a.get("type") in ("string", "enum")]
        order = {"bio": 0, "abilities": 1}
        attributes.sort(key=lambda a: order.get(a.get("category"), 2))
        zh = _is_zh(system)
        fields: list[dict[str, Any]] = [{"type": "text", "name": "characterName", "label": "名字" if zh else "Your name", "required": True}]
        for attribute in attributes[:3]:
            field_ = {"name": attribute["id"], "label": attribute.get("name") or attribute["id"]}
            if attribute["type"] == "enum":
                options = [str(o) for o in attribute.get("options") or []]
                field_.update(type="select", options=[{"value": o, "label": o} for o in options], defaultValue=options[0])
            else:
                field_.update(type="text", placeholder="一句话" if zh else "a short phrase", defaultValue="守灯人" if zh else "lamp trimmer")
            fields.append(field_)
        template = ("你是{{characterName}}，刚刚来到这里。" if zh else "You are {{characterName}}, newly arrived on this coast.")
        return Reply(calls=[("create-character-form", {
            "formId": "char-creation", "title": "你的角色" if zh else "Your hero", "fields": fields,
            "submitLabel": "开始" if zh else "Begin", "narrativeTemplate": template,
            "submitBehavior": {"echoFilledNarrative": True}})])

    def _initialize_world(self, tools, system, user) -> Reply:
        params = tools["initialize-world"].get("parameters") or {}
        return Reply(calls=[("initialize-world", _example(params, hint=user))])


def _is_zh(text: str) -> bool:
    return bool(re.search(r"[\u4e00-\u9fff]", text[:2000]))


def _player_line(messages: list[dict[str, Any]]) -> str:
    users = [m.get("content") or "" for m in messages if m.get("role") == "user"]
    return users[-1] if users else ""


def _cast_in(text: str) -> list[tuple[str, str]]:
    return [(p, pl) for p, pl in CAST if p in text]


def _title(place: str) -> str:
    return place[4:].strip() if place.lower().startswith("the ") else place


def _block(system: str, tag: str) -> str:
    match = re.search(rf"<{tag}>(.*?)</{tag}>", system, re.S)
    return match.group(1) if match else ""


def _json_block(system: str, tag: str) -> Any:
    try:
        return json.loads(_block(system, tag))
    except ValueError:
        return None


def _items_schema(schema: dict[str, Any], prop: str) -> dict[str, Any]:
    node = (schema.get("properties") or {}).get(prop) or {}
    return node.get("items") or {}


def _enum_at(schema: dict[str, Any], prop: str) -> list[Any]:
    node = (schema.get("properties") or {}).get(prop) or {}
    return list(node.get("enum") or [])


def _example(schema: dict[str, Any], *, hint: str = "", depth: int = 0) -> Any:
    """A value that satisfies ``schema`` (the subset tool schemas use), with readable strings."""
    if depth > 6:
        return None
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    for key in ("anyOf", "oneOf"):
        if schema.get(key):
            return _example(schema[key][0], hint=hint, depth=depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if kind == "object" or "properties" in schema:
        out = {}
        required = set(schema.get("required") or [])
        for name, sub in (schema.get("properties") or {}).items():
            if name in required:
                out[name] = _example(sub, hint=name, depth=depth + 1)
        return out
    if kind == "array":
        count = max(int(schema.get("minItems") or 1), 1)
        if schema.get("maxItems") is not None:
            count = min(count, int(schema["maxItems"]))
        return [_example(schema.get("items") or {"type": "string"}, hint=hint, depth=depth + 1) for _ in range(count)]
    if kind == "integer":
        low = schema.get("minimum", schema.get("exclusiveMinimum", 0) + (1 if "exclusiveMinimum" in schema else 0))
        return int(max(low, 1) if schema.get("maximum", 10) >= 1 else low)
    if kind == "number":
        return float(schema.get("minimum", 1))
    if kind == "boolean":
        return False
    text = f"{hint or 'value'}".replace("_", " ")
    low = int(schema.get("minLength") or 1)
    high = schema.get("maxLength")
    text = (text + " " + "detail " * 10)[:max(low, len(text))] if len(text) < low else text
    return text[:high] if isinstance(high, int) else text


def peer_embedding(text: str, dim: int) -> list[float]:
    """The peer's embedding of ``text``: a sum of per-word pseudo-random ±1 vectors (word hashing)."""
    import hashlib

    vector = [0.0] * dim
    for word in re.findall(r"[a-z0-9]+", text.lower()) or ["<empty>"]:
        digest = hashlib.sha256(word.encode()).digest()
        for i in range(dim):
            vector[i] += 1.0 if digest[i % len(digest)] >> (i // len(digest)) & 1 else -1.0
    return vector
