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

NASTY_TEXT = st.sampled_from(["", "\x00", "a\x00b", "\ud800", "x" * 300, "../..", "%2e%2e", "💥", "tide-test", "user",
                              "2020-01-01T00:00:00Z", "9999-99-99", "selective", "active", "ended", "teller"])
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, -1, 1, 2**31, 2**31 - 1, -(2**63) - 1]), st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20), NASTY_TEXT, NASTY_TEXT,
)
# Write endpoints with the field names they read, so that examples get past the first shape check.
WRITE_ROUTES = {
    "create-session": ("post", "/api/sessions", ["worldId", "locale", "plugins", "id", "loreOverride", "autoAdvanceLimit", "seatRole"]),
    "update-session": ("patch", "/api/sessions/{sid}", ["status", "runtimeModelOverrides", "autoAdvanceLimit"]),
    "sync-messages": ("post", "/api/sessions/{sid}/messages/sync", ["messages", "role", "content", "id", "turnId", "createdAt", "block"]),
    "upsert-character": ("post", "/api/sessions/{sid}/characters", ["id", "name", "aliases", "type", "description", "fields", "version", "createdAt"]),
    "create-lore": ("post", "/api/sessions/{sid}/lorebook", ["id", "content", "keys", "title", "priority", "insertionOrder", "position", "strategy", "enabled", "extra"]),
    "replace-lore": ("put", "/api/sessions/{sid}/lorebook/entry-1", ["content", "keys", "title", "priority", "insertionOrder", "position", "strategy", "enabled", "extra"]),
    "put-plugin-data": ("put", "/api/sessions/{sid}/plugin-data/teller/notes/k", ["value"]),
    "create-world": ("post", "/api/worlds", ["id", "name", "description", "locale", "lore", "metadata", "dimensions"]),
}


@st.composite
def bodies(draw, fields: list[str]) -> dict:
    """A JSON object whose keys are mostly the route's fields; values nest the route's fields too
    (messages[], fields{}, extra{} ...)."""
    keys = st.one_of(st.sampled_from(fields), st.sampled_from(fields), NASTY_TEXT, st.text(max_size=6))
    values = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(keys, inner, max_size=4)),
                          max_leaves=10)
    return draw(st.dictionaries(keys, values, max_size=6))


def _row_counts() -> tuple[int, ...]:
    return tuple(model.objects.count() for model in (Session, ChatMessage, Character, LorebookEntry, PluginData,
                                                     SessionEvent, World))


@pytest.mark.parametrize("route", sorted(WRITE_ROUTES))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_random_json_objects_never_break_the_write_endpoints(client, session, route, data):
    method, template, fields = WRITE_ROUTES[route]
    body = data.draw(bodies(fields), label="body")
    before = _row_counts()
    raw = json.dumps(body)  # ensure_ascii: NUL and lone surrogates travel as \u escapes
    response = getattr(client, method)(template.format(sid=session["id"]), data=raw, content_type="application/json")
    assert response.status_code < 500, response.content
    if response.status_code >= 300:
        assert response["Content-Type"].startswith("application/json")
        assert is_envelope(response.content), response.content
        assert set(response.json()) <= {"error", "code", "details"}
    if 400 <= response.status_code < 500:
        assert _row_counts() == before, (body, response.content)
