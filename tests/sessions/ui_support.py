"""The UI discovery test plugins (tests/sessions/ui_plugins/README.md) in a temporary builtin folder.

Import the fixture into a test module (``from tests.sessions.ui_support import ui_plugins  # noqa: F401``).
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.sessions.support import OPERATOR_TOKEN, PLUGINS_DIR, WORLDS_DIR

UI_PLUGINS_DIR = Path(__file__).resolve().parent / "ui_plugins"
UI_PLUGIN_IDS = ("ui-imager", "ui-panel", "ui-policy", "ui-prompter")


@pytest.fixture
def ui_plugins(settings, tmp_path):
    """A builtin folder holding `teller` and the UI test plugins (plus a link inside the view folder,
    which must never be published); the registry and the worlds point at it. Yields the folder."""
    from plugins_app.registry import registry_reset

    builtin = tmp_path / "builtin"
    shutil.copytree(PLUGINS_DIR / "teller", builtin / "teller")
    for plugin_id in UI_PLUGIN_IDS:
        shutil.copytree(UI_PLUGINS_DIR / plugin_id, builtin / plugin_id)
    os.symlink("app.js", builtin / "ui-panel" / "ui" / "app" / "assets" / "link.js")
    (tmp_path / "outside.json").write_text('{"id": "outside", "view": {"component": "Stack"}}')
    settings.COVEL_BUILTIN_PLUGINS_DIR = str(builtin)
    settings.COVEL_BUILTIN_WORLDS_DIR = str(WORLDS_DIR)
    registry_reset()
    yield builtin
    registry_reset()


def ui_session_create(client, plugins: list[str]) -> dict:
    """POST /api/sessions in the tide-test world with ``plugins`` (as the operator); returns the body."""
    response = client.post("/api/sessions", {"worldId": "tide-test", "locale": "en-US", "plugins": plugins},
                           content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {OPERATOR_TOKEN}")
    assert response.status_code == 201, response.content
    return response.json()
