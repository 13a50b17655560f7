"""``python manage.py play``: play a session against a running Covel server over HTTP.

Creates a session in ``--world`` (POST /api/sessions, the world's default plugins), runs setup
(``start_session``), prints and answers the character form, prints the opening, plays ``--turns``
``say`` turns (each the first quick reply the guide suggested, else a fixed line), reading every
POST /api/actions SSE stream, then lists the characters, codex entries, affinity, world time and
dimensions that resulted. ``--transcript PATH`` also writes all of it as markdown.

Example (with ``make run`` serving on 127.0.0.1:3001)::

    .venv/bin/python manage.py play --world yanhui-ferry --turns 5 --name 林照 --transcript /tmp/yanhui-ferry.md
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import httpx
from django.core.management.base import BaseCommand, CommandError

from plugins_app.management.play_client import PlayClient, PlayError, Transcript, form_answer, form_text

def _default_server() -> str:
    """The server `make run` starts: PORT (or SERVER_PORT), default 3001, on loopback."""
    from django.conf import settings

    return f"http://127.0.0.1:{settings.COVEL_PORT}"
MAX_SETUP_ROUNDS = 8
FALLBACK_LINES = {
    "zh": ["我先四下看看，找找线索。", "我向身边的人打听昨夜的事。", "我把看到的都记下来。"],
    "en": ["I look around for clues first.", "I ask the nearest person what happened last night.", "I write down what I have seen."],
}


def _value_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


class Command(BaseCommand):
    help = "Play a session over HTTP against a running server: form, opening, N turns, resulting state."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--server", default=None, help="server base URL (default http://127.0.0.1:$PORT, PORT 3001)")
        parser.add_argument("--world", default="yanhui-ferry", help="world id (default yanhui-ferry)")
        parser.add_argument("--locale", default=None, help="session locale (default: the world's)")
        parser.add_argument("--turns", type=int, default=3, help="say turns after the opening (default 3)")
        parser.add_argument("--name", default=None, help="your character's name (default by locale)")
        parser.add_argument("--transcript", default=None, help="also write a markdown transcript to this path")
        parser.add_argument("--token", default=None, help="operator token for hosted servers (Bearer)")

    def handle(self, *args, **options) -> None:
        if options["turns"] < 0:
            raise CommandError("--turns must be 0 or more")
        logging.getLogger("httpx").setLevel(logging.WARNING)  # one INFO line per request otherwise
        options["server"] = options["server"] or _default_server()
        try:
            self._play(options)
        except PlayError as exc:
            raise CommandError(str(exc)) from None
        except httpx.TransportError as exc:
            raise CommandError(f"no Covel server answers at {options['server']} ({exc.__class__.__name__}); "
                               "start one with `make run` or pass --server") from None

    # ----------------------------------------------------------------------------------- play

    def _out(self, text: str = "") -> None:
        self.stdout.write(text)

    def _play(self, options: dict[str, Any]) -> None:
        client = PlayClient(options["server"])
        client.token = options["token"]
        md = Transcript()
        body: dict[str, Any] = {"worldId": options["world"]}
        if options["locale"]:
            body["locale"] = options["locale"]
        created = client.json("POST", "/api/sessions", body)
        session_id = created["id"]
        client.token = created.get("ownerToken") or client.token
        zh = str(created.get("locale") or "").lower().startswith("zh")
        name = options["name"] or ("林照" if zh else "Ada Quill")
        world = client.json("GET", f"/api/worlds/{options['world']}")
        world_name = world.get("name") or options["world"]
        self._out(f"Session {session_id} — {world_name} ({created.get('locale')})")
        self._out(f"Plugins: {', '.join(created.get('activePlugins') or [])}")
        md.add(f"# {world_name} — a scripted play-through\n\n"
               f"Produced by `python manage.py play --world {options['world']} --turns {options['turns']} --name {name}"
               f"{' --locale ' + options['locale'] if options['locale'] else ''} --transcript …` against `make run` "
               f"(offline `scripted` model).\n\n"
               f"- session locale: `{created.get('locale')}`\n- plugins: {', '.join(f'`{p}`' for p in created.get('activePlugins') or [])}")
        if created.get("unmetRequirements"):
            self._out(f"Unmet requirements: {_value_text(created['unmetRequirements'])}")
            md.add(f"- unmet requirements: `{_value_text(created['unmetRequirements'])}`")

        # Setup: start_session, then answer every form until the phase is playing.
        stream = client.action(session_id, "start_session", {}, on_frame=self._live)
        self._welcome(stream, md)
        for _ in range(MAX_SETUP_ROUNDS):
            session = client.json("GET", f"/api/sessions/{session_id}")
            if session["phase"] == "playing":
                break
            requested = stream.of_type("interaction.requested")
            if not requested:
                raise PlayError(f"setup is stuck: {json.dumps(session.get('setupRuntimes'), ensure_ascii=False)}")
            actions = []
            for frame in requested:
                interaction = frame["payload"]["interaction"]
                if interaction.get("type") != "form":
                    raise PlayError(f"cannot answer a {interaction.get('type')} interaction")
                values = form_answer(interaction, name=name, zh=zh)
                self._out("\n" + form_text(interaction))
                self._out("Answer: " + json.dumps(values, ensure_ascii=False))
                md.add("## Character creation\n\n```text\n" + form_text(interaction) + "\n```\n\n"
                       "Answer: `" + json.dumps(values, ensure_ascii=False) + "`")
                actions.append({"kind": "act", "fields": values, "interaction": {
                    "turnId": frame["payload"].get("turnId") or frame["turnId"],
                    "interactionId": interaction["interactionId"], "type": "form"}})
            stream = client.action(session_id, "submit_actions", {"actions": actions}, on_frame=self._live)
            for submitted in stream.of_type("interaction.submitted"):
                for result in submitted["payload"].get("results") or []:
                    if result.get("filledNarrative"):
                        md.add(f"> {result['filledNarrative']}")
        else:
            raise PlayError("setup did not finish")
        opening = stream.narration()
        md.add("## Opening\n\n" + (opening[-1] if opening else "(no opening prose)"))
        md.add(self._turn_state(stream))

        # Turns.
        lines = FALLBACK_LINES["zh" if zh else "en"]
        for number in range(1, options["turns"] + 1):
            text = self._next_line(stream, number) or lines[(number - 1) % len(lines)]
            self._out(f"\n> {text}\n")
            stream = client.action(session_id, "submit_actions", {"actions": [{"kind": "say", "text": text}]}, on_frame=self._live)
            prose = stream.narration()
            md.add(f"## Turn {number}\n\n> {text}\n\n" + (prose[-1] if prose else "(no prose)"))
            md.add(self._turn_state(stream))

        self._summary(client, session_id, md)
        if options["transcript"]:
            path = Path(options["transcript"])
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(md.text(), encoding="utf-8")
            self._out(f"\nTranscript written to {path}")

    # ------------------------------------------------------------------------------- printing

    def _live(self, frame: dict[str, Any]) -> None:
        """Story prose as it streams (narrative.delta), a line break when the turn's prose ends."""
        payload = frame.get("payload") or {}
        if frame.get("type") == "narrative.delta":
            self.stdout.write(str(payload.get("text") or payload.get("delta") or ""), ending="")
            self.stdout.flush()
        elif frame.get("type") == "narrative.completed":
            self.stdout.write("\n")
        elif frame.get("type") == "runtime.failed" or (frame.get("type") == "runtime.completed" and payload.get("status") == "failed"):
            self.stderr.write(f"[runtime {payload.get('runtimeId')} failed: {_value_text(payload.get('error'))}]")

    def _welcome(self, stream, md: Transcript) -> None:
        for frame in stream.of_type("ui.rendered"):
            for part in (frame["payload"].get("block") or {}).get("parts") or []:
                content = part.get("content") or {}
                if part.get("type") == "alert":
                    self._out(f"{content.get('title')}: {content.get('message')}")
                    md.add(f"## Welcome\n\n**{content.get('title')}** — {content.get('message')}")
                elif part.get("type") == "markdown" and content.get("text"):
                    self._out(content["text"])
                    md.add(content["text"])

    @staticmethod
    def _next_line(stream, number: int) -> str | None:
        """The guide's quick reply for this turn (they rotate: ask, observe, social …)."""
        for frame in reversed(stream.of_type("ui.rendered")):
            for part in (frame["payload"].get("block") or {}).get("parts") or []:
                prompts = (part.get("content") or {}).get("prompts") if part.get("type") == "guide.block" else None
                if prompts:
                    return str(prompts[(number - 1) % len(prompts)].get("text") or "") or None
        return None

    @staticmethod
    def _turn_state(stream) -> str:
        """What the turn committed, from its stream: new characters, codex entries, dimensions, clock."""
        characters = [f["payload"]["character"]["name"] for f in stream.of_type("character.upserted")
                      if (f["payload"].get("character") or {}).get("version") == 1]
        codex: list[str] = []
        dims: list[str] = []
        for frame in stream.of_type("ui.rendered"):
            for part in (frame["payload"].get("block") or {}).get("parts") or []:
                if part.get("type") == "codex.entries":
                    codex += [e.get("title") for e in (part.get("content") or {}).get("created") or []]
        for frame in stream.of_type("dimensions.changed"):
            dims += list((frame["payload"].get("snapshot") or {}).keys())
        clock = ""
        for frame in stream.of_type("tool.completed"):
            if frame["payload"].get("tool") == "advance-world-time":
                clock = str((frame["payload"].get("output") or {}).get("summary") or "")
        bits = []
        if characters:
            bits.append("new characters: " + ", ".join(characters))
        if codex:
            bits.append("new codex entries: " + ", ".join(codex))
        if dims:
            bits.append("dimensions changed: " + ", ".join(dims))
        if clock:
            bits.append("clock: " + clock)
        return "*" + ("; ".join(bits) if bits else "no state changes") + "*"

    def _summary(self, client: PlayClient, session_id: str, md: Transcript) -> None:
        characters = client.json("GET", f"/api/sessions/{session_id}/characters")["items"]
        codex = client.json("GET", f"/api/sessions/{session_id}/plugin-data/codex/entries")["items"]
        affinity = client.json("GET", f"/api/sessions/{session_id}/plugin-data/affinity/affinity")["items"]
        view = client.json("GET", f"/api/sessions/{session_id}/view")
        clock = client.json("GET", f"/api/sessions/{session_id}/plugin-data/world-time")["items"]
        lines = ["## Characters", ""]
        lines += [f"- **{c['name']}** [{c['type']}] — {(c.get('description') or '').strip()[:160]}" for c in characters]
        lines += ["", "## Codex", ""]
        lines += [f"- **{row['value'].get('title')}** ({row['value'].get('category')}) — {str(row['value'].get('content') or '')[:160]}"
                  for row in codex]
        lines += ["", "## Affinity", ""]
        lines += [f"- {row['value'].get('name')}: {row['value'].get('score')} ({row['value'].get('tier')})" for row in affinity]
        lines += ["", "## World time", ""]
        lines += [f"- {row['namespace']}/{row['key']}: `{_value_text(row['value'])[:200]}`" for row in clock
                  if row["namespace"] != "definitions"]
        lines += ["", "## Dimensions", ""]
        for dim_id, dim in (view.get("dimensions") or {}).items():
            lines.append(f"- **{dim.get('name') or dim_id}** (`{dim_id}`, v{dim.get('version')}): `{_value_text(dim.get('value'))[:400]}`")
        text = "\n".join(lines)
        self._out("\n" + text)
        md.add(text)
