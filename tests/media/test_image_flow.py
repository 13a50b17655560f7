"""GET /api/sessions/:id/media/image-flow (spec 004 §Session UI projections): the first
``media.image-flow@1`` provider to answer in 500 ms with runtimes of its own plugin."""
from __future__ import annotations

import time

import pytest

from tests.sessions.support import OPERATOR_TOKEN
from tests.sessions.ui_support import ui_plugins, ui_session_create  # noqa: F401

pytestmark = pytest.mark.django_db


def test_no_provider_is_a_null_flow(client, ui_plugins):
    created = ui_session_create(client, ["teller"])

    response = client.get(f"/api/sessions/{created['id']}/media/image-flow")

    assert response.status_code == 200
    assert response.json() == {"flow": None}


def test_late_and_foreign_providers_are_skipped_and_the_host_binds_the_plugin(client, ui_plugins):
    # ui-imager's providers, in order: one sleeps 1.5 s, one names teller's runtime, one answers well
    # (and claims another pluginId, which the host ignores).
    created = ui_session_create(client, ["teller", "ui-imager"])

    started = time.monotonic()
    response = client.get(f"/api/sessions/{created['id']}/media/image-flow")
    elapsed = time.monotonic() - started

    assert response.status_code == 200
    assert response.json() == {"flow": {"pluginId": "ui-imager", "entryRuntimeId": "ui-imager/prompt",
                                        "assetRuntimeIds": ["ui-imager/render"]}}
    assert 0.5 <= elapsed < 1.4  # the slow provider was given its 500 ms, not waited for


def test_an_inactive_plugin_provides_nothing(client, ui_plugins):
    created = ui_session_create(client, ["teller", "ui-imager"])
    client.delete(f"/api/sessions/{created['id']}/plugins/ui-imager")

    assert client.get(f"/api/sessions/{created['id']}/media/image-flow").json() == {"flow": None}


def test_session_scope_failures(client, ui_plugins, settings):
    created = ui_session_create(client, ["teller"])
    assert client.get("/api/sessions/nope/media/image-flow").json()["code"] == "session_not_found"
    settings.DEPLOYMENT_TIER = "demo"
    settings.COVEL_OPERATOR_TOKEN = OPERATOR_TOKEN

    response = client.get(f"/api/sessions/{created['id']}/media/image-flow")

    assert response.status_code == 401 and response.json()["code"] == "session_owner_required"
