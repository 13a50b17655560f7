"""Large JSON reads are gzip-compressed for clients that ask; streams, errors and writes never are
(covel.middleware.JsonGzipMiddleware)."""
from __future__ import annotations

import gzip
import json

import pytest
from django.test import Client

from tests.turns.test_actions_helpers import action_body, session_make, stream_read

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_session_view_is_compressed_and_the_action_stream_is_not():
    client = Client(HTTP_ACCEPT_ENCODING="gzip, deflate")
    session = session_make(characters=[("hero", "Hero", "player")])
    # an action stream asked for with gzip stays a plain event stream
    response = client.post("/api/actions", data=json.dumps(action_body(session.id)), content_type="application/json")
    assert response.status_code == 200 and response.get("Content-Encoding") is None
    frames = stream_read(response)
    assert frames[-1]["type"] == "execution.completed"
    # the view (several KB of JSON) comes compressed, and decompresses to the same document
    compressed = client.get(f"/api/sessions/{session.id}/view")
    plain = Client().get(f"/api/sessions/{session.id}/view")
    assert compressed.status_code == plain.status_code == 200
    assert compressed["Content-Encoding"] == "gzip" and "Accept-Encoding" in compressed["Vary"]
    assert plain.get("Content-Encoding") is None
    document = json.loads(gzip.decompress(compressed.content))
    assert document["session"]["id"] == session.id and len(compressed.content) < len(plain.content)
    # errors stay plain JSON in the spec's envelope
    missing = client.get("/api/sessions/no-such-session/view")
    assert missing.status_code == 404 and missing.get("Content-Encoding") is None and "error" in missing.json()
