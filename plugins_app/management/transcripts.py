"""Ten-turn scripted transcripts of the builtin worlds (issue 20, "the offline storyteller").

``transcript_play(client, world_id, locale)`` plays one session of a builtin world through the
public HTTP API (POST /api/sessions, POST /api/actions read to the end of its SSE stream, the
GET read APIs) with the offline ``scripted`` model and returns a ``Played`` record: the opening,
each turn's action (kind, text, the character it addresses), the story prose, the player-visible
state after the turn (dimensions, codex, affinity) and a markdown rendering (``markdown()``).

``client`` is a ``django.test.Client`` (in-process, the server's own worker): the
``manage.py transcripts`` command uses it against the configured database to write
``docs/examples/<world>.<locale>.md`` and tests/turns/test_storyteller.py uses it to measure the
same games. The scripts below are fixed, so a transcript is deterministic for a session id.
"""
from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from plugins_app.management.play_client import PlayError, Transcript, form_answer, form_text

#: world id → locale → {name, turns: [(kind, text, addressed character name or None)]}.
PLAYS: dict[str, dict[str, dict[str, Any]]] = {
    "hollow-reach-light": {
        "en-US": {"name": "Ada Quill", "turns": [
            ("say", "Nell, what happened to the lamp?", "Nell Marrick"),
            ("act", "I climb to the lamp room and check the burner.", None),
            ("say", "Mr. Crane, who pinned up the Notice to Mariners in the harbour office?", "Thaddeus Crane"),
            ("act", "I go down to the boathouse and look for the reserve oil cask.", None),
            ("say", "Jory, did you see a lantern on the Reach last night?", "Jory Penhallow"),
            ("say", "Granny Pascoe, what do the old folk say about the Drowned Light?", "Wenna Pascoe"),
            ("act", "I study the green light past the Widow's Teeth through the glass.", None),
            ("say", "Dr. Lowe, has anyone come to you with a cut hand today?", "Dr. Hester Lowe"),
            ("say", "Constable Budd, what does the wreck law say about salvage?", "Ezra Budd"),
            ("say", "Captain Vane, where was your boat last night?", "Silas Vane"),
        ]},
    },
    "yanhui-ferry": {
        "zh-CN": {"name": "林照", "turns": [
            ("say", "裴巡检，押纲官周允文到底去了哪里？", "裴照"),
            ("act", "我摘下桅杆上的走马灯，细看上面的谜条。", None),
            ("say", "小满，昨夜五更水门开闸的时候，你看见了什么？", "小满"),
            ("act", "我查看船工喝过的茶碗，闻闻里头有没有迷药的气味。", None),
            ("say", "杜大夫，船工们中的到底是什么迷药？", "杜蘅"),
            ("say", "四娘，前天夜里有谁在望江楼后门买过东西？", "韩四娘"),
            ("act", "我雇条小船渡江，去江心洲的回澜寺看看。", None),
            ("say", "了尘师父，昨夜五更的晨钟是谁敲的？", "了尘"),
            ("say", "柳先生，你那部《灯下鬼》为什么忽然停了说书？", "柳七郎"),
            ("say", "钱员外，永丰仓的盐最近清点过吗？", "钱伯庸"),
        ]},
    },
}


@dataclass
class TurnRecord:
    """One played turn: the action, its prose and what the player can see afterwards."""

    number: int
    kind: str
    text: str
    addressed: str | None
    prose: str
    dimensions: dict[str, Any] = field(default_factory=dict)
    clock: str = ""


@dataclass
class Played:
    """A played transcript game (see the module docstring)."""

    world_id: str
    locale: str
    session_id: str
    token: str
    created: dict[str, Any]
    world_name: str = ""
    form: str = ""
    answer: dict[str, Any] = field(default_factory=dict)
    opening: str = ""
    opening_dimensions: dict[str, Any] = field(default_factory=dict)
    turns: list[TurnRecord] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)
    codex: list[dict[str, Any]] = field(default_factory=list)
    affinity: list[dict[str, Any]] = field(default_factory=list)
    characters: list[dict[str, Any]] = field(default_factory=list)
    frames: list[dict[str, Any]] = field(default_factory=list)

    def markdown(self) -> str:
        """The transcript as markdown (docs/examples/<world>.<locale>.md)."""
        md = Transcript()
        md.add(f"# {self.world_name} — a scripted play-through ({self.locale})\n\n"
               f"Regenerate with `make transcripts` (`python manage.py transcripts`): one session per builtin "
               f"world and locale, {len(self.turns)} fixed turns, the offline `scripted` model. Measured by "
               f"tests/turns/test_storyteller.py.\n\n"
               f"- session locale: `{self.created.get('locale')}`\n"
               f"- plugins: {', '.join(f'`{p}`' for p in self.created.get('activePlugins') or [])}")
        if self.form:
            md.add("## Character creation\n\n```text\n" + self.form + "\n```\n\n"
                   "Answer: `" + json.dumps(self.answer, ensure_ascii=False) + "`")
        md.add("## Opening\n\n" + (self.opening or "(no opening prose)"))
        for turn in self.turns:
            who = f" — to {turn.addressed}" if turn.addressed else ""
            md.add(f"## Turn {turn.number}\n\n> **{turn.kind}**{who}: {turn.text}\n\n{turn.prose or '(no prose)'}")
            md.add(f"*clock: {turn.clock or '—'}; {_dims_brief(turn.dimensions)}*")
        lines = ["## Codex", ""]
        lines += [f"- **{row['value'].get('title')}** ({row['value'].get('category')})" for row in self.codex]
        lines += ["", "## Affinity", ""]
        lines += [f"- {row['value'].get('name')}: {row['value'].get('score')} ({row['value'].get('tier')})" for row in self.affinity]
        lines += ["", "## Dimensions after the last turn", ""]
        last = self.turns[-1].dimensions if self.turns else self.opening_dimensions
        for dim_id, dim in last.items():
            lines.append(f"- **{dim.get('name') or dim_id}** (`{dim_id}`, v{dim.get('version')}): "
                         f"`{json.dumps(dim.get('value'), ensure_ascii=False)[:600]}`")
        md.add("\n".join(lines))
        return md.text()


def _dims_brief(dims: dict[str, Any]) -> str:
    """Versions of the dimensions and the statuses of clue ledgers, in one line."""
    bits = []
    for dim_id, dim in dims.items():
        value = dim.get("value")
        statuses = [v.get("status") for v in value.values() if isinstance(v, dict) and "status" in v] if isinstance(value, dict) else []
        if statuses:
            counts: dict[str, int] = {}
            for s in statuses:
                counts[s] = counts.get(s, 0) + 1
            bits.append(f"{dim_id} v{dim.get('version')} ({', '.join(f'{n} {s}' for s, n in counts.items())})")
        else:
            bits.append(f"{dim_id} v{dim.get('version')}")
    return "dimensions: " + ", ".join(bits) if bits else "no dimensions"


def _sse(body: bytes) -> list[dict[str, Any]]:
    """Data-only SSE frames (spec 004 §事件流) → envelopes."""
    frames, data = [], []
    for line in body.decode("utf-8").splitlines():
        if line.startswith("data:"):
            data.append(line[5:].lstrip())
        elif line == "" and data:
            frames.append(json.loads("\n".join(data)))
            data = []
    if data:
        frames.append(json.loads("\n".join(data)))
    return frames


class _Api:
    """JSON and action requests through a django.test.Client with the owner token."""

    def __init__(self, client) -> None:
        self.client = client
        self.token: str | None = None

    def _auth(self) -> dict[str, str]:
        return {"HTTP_AUTHORIZATION": f"Bearer {self.token}"} if self.token else {}

    def json(self, method: str, path: str, body: Any = None, expect: int = 200) -> Any:
        if method == "GET":
            response = self.client.get(path, **self._auth())
        else:
            response = self.client.generic(method, path, data=json.dumps(body or {}), content_type="application/json", **self._auth())
        if response.status_code != expect:
            raise PlayError(f"{method} {path} → {response.status_code}: {response.content[:500]!r}")
        return response.json()

    def action(self, session_id: str, type: str, payload: dict[str, Any]) -> list[dict[str, Any]]:
        body = {"requestId": f"tr-{uuid.uuid4().hex[:16]}", "type": type, "sessionId": session_id, "payload": payload}
        response = self.client.post("/api/actions", data=json.dumps(body), content_type="application/json", **self._auth())
        if response.status_code != 200:
            raise PlayError(f"POST /api/actions ({type}) → {response.status_code}: {response.content[:500]!r}")
        import warnings

        with warnings.catch_warnings():  # the sync client drains the async stream on its own loop
            warnings.filterwarnings("ignore", message="StreamingHttpResponse must consume asynchronous iterators")
            frames = _sse(b"".join(response))
        done = [f for f in frames if f.get("type") == "execution.completed"]
        if not done or done[-1]["payload"].get("committed") is not True:
            raise PlayError(f"{type}: the execution did not commit: {[(f['type'], f.get('payload')) for f in frames][-4:]}")
        return frames


def _narration(frames: list[dict[str, Any]]) -> str:
    texts = [f["payload"].get("text") or "" for f in frames if f.get("type") == "narrative.completed"]
    return texts[-1] if texts else ""


def _clock(frames: list[dict[str, Any]]) -> str:
    for frame in frames:
        if frame.get("type") == "tool.completed" and frame["payload"].get("tool") == "advance-world-time":
            output = frame["payload"].get("output") or {}
            if isinstance(output, dict):
                summary = output.get("summary")
                return str(output.get("display") or (summary.get("display") if isinstance(summary, dict) else summary) or "")
            return str(output)
    return ""


def transcript_play(client, world_id: str, locale: str, *, session_id: str | None = None) -> Played:
    """Play the fixed script of ``world_id`` in ``locale`` (see PLAYS); raises PlayError when a
    request is refused or an execution does not commit. ``session_id`` fixes the session id (and
    with it every scripted choice) — default ``<world>-<locale>-transcript``."""
    script = PLAYS[world_id][locale]
    api = _Api(client)
    sid = session_id or f"{world_id}-{locale.lower()}-transcript"[:64]
    created = api.json("POST", "/api/sessions", {"worldId": world_id, "locale": locale, "id": sid}, expect=201)
    api.token = created.get("ownerToken")
    world = api.json("GET", f"/api/worlds/{world_id}")
    played = Played(world_id=world_id, locale=created["locale"], session_id=created["id"], token=api.token or "",
                    created=created, world_name=str(world.get("name") or world_id))
    zh = str(created.get("locale") or "").lower().startswith("zh")
    frames = api.action(played.session_id, "start_session", {})
    played.frames += frames
    for _ in range(8):
        session = api.json("GET", f"/api/sessions/{played.session_id}")
        if session["phase"] == "playing":
            break
        requested = [f for f in frames if f.get("type") == "interaction.requested"]
        if not requested:
            raise PlayError(f"setup is stuck: {session.get('setupRuntimes')}")
        actions = []
        for frame in requested:
            interaction = frame["payload"]["interaction"]
            values = form_answer(interaction, name=script["name"], zh=zh)
            played.form, played.answer = form_text(interaction), values
            actions.append({"kind": "act", "fields": values, "interaction": {
                "turnId": frame["payload"].get("turnId") or frame["turnId"],
                "interactionId": interaction["interactionId"], "type": "form"}})
        frames = api.action(played.session_id, "submit_actions", {"actions": actions})
        played.frames += frames
    else:
        raise PlayError("setup did not finish")
    played.opening = _narration(frames)
    played.opening_dimensions = api.json("GET", f"/api/sessions/{played.session_id}/view").get("dimensions") or {}
    for number, (kind, text, addressed) in enumerate(script["turns"], start=1):
        frames = api.action(played.session_id, "submit_actions", {"actions": [{"kind": kind, "text": text}]})
        played.frames += frames
        view = api.json("GET", f"/api/sessions/{played.session_id}/view")
        played.turns.append(TurnRecord(number=number, kind=kind, text=text, addressed=addressed, prose=_narration(frames),
                                       dimensions=view.get("dimensions") or {}, clock=_clock(frames)))
    sid = played.session_id
    played.messages = api.json("GET", f"/api/sessions/{sid}/messages")["items"]
    played.codex = api.json("GET", f"/api/sessions/{sid}/plugin-data/codex/entries")["items"]
    played.affinity = api.json("GET", f"/api/sessions/{sid}/plugin-data/affinity/affinity")["items"]
    played.characters = api.json("GET", f"/api/sessions/{sid}/characters")["items"]
    return played
