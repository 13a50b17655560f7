"""Property: random JSON objects posted to write endpoints never cause a 500; every non-2xx carries
the error envelope; a 4xx writes nothing (spec 004 §响应格式约定)."""
from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from covel.errors import is_envelope
from plugins_app.models import PluginData
from sessions.models import Character, ChatMessage, LorebookEntry, Session, World
from tests.sessions.support import catalog, session  # noqa: F401
from turns.models import SessionEvent

pytestmark = pytest.mark.django_db

# Field names the endpoints below read, so that examples reach past the first shape check.
FIELDS = ["worldId", "locale", "plugins", "id", "loreOverride", "autoAdvanceLimit", "seatRole", "status",
          "runtimeModelOverrides", "messages", "role", "content", "turnId", "createdAt", "name", "aliases", "type",
          "description", "fields", "version", "keys", "strategy", "title", "priority", "insertionOrder", "enabled",
          "extra", "value", "block", "runtimeId"]
NASTY_TEXT = st.sampled_from(["", "\x00", "a\x00b", "\ud800", "x" * 300, "../..", "%2e%2e", "💥", "tide-test", "user",
                              "2020-01-01T00:00:00Z", "9999-99-99", "selective", "active", "ended"])
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, -1, 2**31, 2**31 - 1, -(2**63) - 1]), st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20), NASTY_TEXT,
)
JSON_VALUES = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.one_of(st.sampled_from(FIELDS), NASTY_TEXT), inner, max_size=4)),
    max_leaves=12)
BODIES = st.dictionaries(st.one_of(st.sampled_from(FIELDS), st.text(max_size=8)), JSON_VALUES, max_size=6)
WRITE_ROUTES = [
    ("post", "/api/sessions"),
    ("patch", "/api/sessions/{sid}"),
    ("post", "/api/sessions/{sid}/messages/sync"),
    ("post", "/api/sessions/{sid}/characters"),
    ("post", "/api/sessions/{sid}/lorebook"),
    ("put", "/api/sessions/{sid}/lorebook/entry-1"),
    ("put", "/api/sessions/{sid}/plugin-data/teller/notes/k"),
    ("post", "/api/worlds"),
]


def _row_counts() -> tuple[int, ...]:
    return tuple(model.objects.count() for model in (Session, ChatMessage, Character, LorebookEntry, PluginData,
                                                     SessionEvent, World))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(route=st.sampled_from(WRITE_ROUTES), body=BODIES)
def test_random_json_objects_never_break_the_write_endpoints(client, session, route, body):
    method, template = route
    before = _row_counts()
    raw = json.dumps(body)  # ensure_ascii: NUL and lone surrogates travel as \u escapes
    response = getattr(client, method)(template.format(sid=session["id"]), data=raw, content_type="application/json")
    assert response.status_code < 500, response.content
    if response.status_code >= 300:
        assert response["Content-Type"].startswith("application/json")
        assert is_envelope(response.content), response.content
        assert set(response.json()) <= {"error", "code", "details"}
    if 400 <= response.status_code < 500:
        assert _row_counts() == before, (route, body, response.content)
