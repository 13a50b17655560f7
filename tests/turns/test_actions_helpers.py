"""Shared helpers of the action-bridge tests (no tests here): sessions, a plugin declaring an action
kind, POSTing actions and parsing the data-only SSE stream."""
from __future__ import annotations

import json
import textwrap
import uuid
from pathlib import Path

from django.conf import settings

DEFAULT_SEATS = [{"id": "main", "controller": "human", "role": "player", "characters": "auto"}]

WHISPER_MANIFEST = textwrap.dedent(
    """\
    ---
    id: whisper-pack
    kind: plugin
    version: 0.1.0
    description: Adds a whisper action kind (test plugin).
    contributes:
      actionKinds:
        - name: whisper
          text: optional
          actor: true
          display:
            label:
              en: Whisper
          fieldsSchema:
            type: object
            required: [target]
            properties:
              target: {type: string}
            additionalProperties: false
    ---
    A test plugin that only declares an action kind.
    """
)


def whisper_plugin_install() -> None:
    """Write the whisper-pack community plugin into COVEL_HOME/plugins and rebuild the registry."""
    from plugins_app.registry import registry_reset

    root = Path(settings.COVEL_HOME) / "plugins" / "whisper-pack"
    root.mkdir(parents=True, exist_ok=True)
    (root / "PLUGIN.md").write_text(WHISPER_MANIFEST, encoding="utf-8")
    registry_reset()


def session_make(*, seats=None, status="active", plugins=("narrator",), characters=(), session_id=None):
    """A Session row with the given seats and characters ((character_id, name, type) tuples)."""
    from sessions.models import Character, Session

    session = Session.objects.create(
        id=session_id or f"test-{uuid.uuid4().hex[:8]}",
        world_id="test-world",
        incarnation=uuid.uuid4().hex,
        event_epoch=uuid.uuid4().hex[:8],
        seats=seats if seats is not None else [dict(s) for s in DEFAULT_SEATS],
        active_plugins=list(plugins),
        status=status,
        phase="playing",
    )
    for character_id, name, kind in characters:
        Character.objects.create(session=session, character_id=character_id, name=name, type=kind)
    return session


def action_body(session_id: str, *, actions=None, request_id=None, type="submit_actions", payload=None, **extra):
    body = {
        "requestId": request_id or f"req-{uuid.uuid4().hex[:12]}",
        "type": type,
        "sessionId": session_id,
        "payload": payload if payload is not None else {"actions": actions or [{"kind": "say", "text": "Hello"}]},
    }
    body.update(extra)
    return body


def post_action(client, body):
    return client.post("/api/actions", data=json.dumps(body), content_type="application/json")


def sse_frames(raw: bytes | str) -> list[dict]:
    """Parse a data-only SSE body into its envelopes (comments skipped; LF/CRLF/CR endings)."""
    text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    frames = []
    for block in text.split("\n\n"):
        data = [line[len("data:"):].lstrip() for line in block.split("\n") if line.startswith("data:")]
        if data:
            frames.append(json.loads("\n".join(data)))
    return frames


def stream_read(response) -> list[dict]:
    """Consume a streaming response from the sync test client and parse it."""
    return sse_frames(stream_bytes(response))


def stream_bytes(response) -> bytes:
    """The whole body of a streaming response read by the sync test client (it drains the async
    iterator on its own event loop; Django warns about that, which is expected here)."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="StreamingHttpResponse must consume asynchronous iterators")
        return b"".join(response)
