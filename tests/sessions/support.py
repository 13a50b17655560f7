"""Shared test setup for session-scoped endpoints: test plugins and worlds, session creation.

Import the fixtures into a test module (``from tests.sessions.support import catalog  # noqa: F401``)
to use them outside tests/sessions.
"""
from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
PLUGINS_DIR = HERE / "plugins"
WORLDS_DIR = HERE / "worlds"
OPERATOR_TOKEN = "operator-test-token"


@pytest.fixture
def catalog(settings):
    """Point the plugin registry and builtin worlds at this folder's test plugins and worlds."""
    from plugins_app.registry import registry_reset

    settings.COVEL_BUILTIN_PLUGINS_DIR = str(PLUGINS_DIR)
    settings.COVEL_BUILTIN_WORLDS_DIR = str(WORLDS_DIR)
    registry_reset()
    yield settings
    registry_reset()


@pytest.fixture
def demo_tier(settings, catalog):
    """DEPLOYMENT_TIER=demo with an operator token configured."""
    settings.DEPLOYMENT_TIER = "demo"
    settings.COVEL_OPERATOR_TOKEN = OPERATOR_TOKEN
    return settings


def session_create(client, **body) -> dict:
    """POST /api/sessions (as the operator, which also works in the self tier) and return the body."""
    response = client.post("/api/sessions", body, content_type="application/json",
                           HTTP_AUTHORIZATION=f"Bearer {OPERATOR_TOKEN}")
    assert response.status_code == 201, response.content
    return response.json()


@pytest.fixture
def session(client, catalog, db) -> dict:
    """A session in the tide-test world with the teller, dims and whisper-pack plugins."""
    return session_create(client, worldId="tide-test", locale="en-US", plugins=["teller", "dims", "whisper-pack"])
