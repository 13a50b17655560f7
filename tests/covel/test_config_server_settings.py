"""GET / PUT /api/config/server-settings (spec 004 "Server settings"): effective values, sources,
all-or-nothing writes and every error code."""
from __future__ import annotations

import json

import pytest

from jobs.models import ServerSetting

pytestmark = pytest.mark.django_db

PATH = "/api/config/server-settings"
OPERATOR = "operator-token-123"


def _put(client, body, **headers):
    return client.put(PATH, data=json.dumps(body), content_type="application/json", **headers)


def test_defaults_when_nothing_is_saved(client):
    response = client.get(PATH)

    assert response.status_code == 200
    assert response.json() == {"settings": {
        "diagnostics.traceRetention": {"value": "30", "source": "default", "settable": True},
        "trust.sources": {"value": [], "source": "default", "settable": True},
    }}


def test_put_saves_normalized_values(client):
    response = _put(client, {"entries": {"diagnostics.traceRetention": "90",
                                         "trust.sources": [" Acme ", "https://github.com/Acme/Tools.git", "acme"]}})

    assert response.status_code == 200
    settings_out = response.json()["settings"]
    assert settings_out["diagnostics.traceRetention"] == {"value": "90", "source": "setting", "settable": True}
    assert settings_out["trust.sources"] == {"value": ["acme", "acme/tools"], "source": "setting", "settable": True}
    assert ServerSetting.objects.get(key="trust.sources").value == ["acme", "acme/tools"]
    assert client.get(PATH).json() == response.json()


def test_put_null_deletes_saved_value(client):
    _put(client, {"entries": {"diagnostics.traceRetention": "keep"}})

    response = _put(client, {"entries": {"diagnostics.traceRetention": None}})

    assert response.json()["settings"]["diagnostics.traceRetention"] == {"value": "30", "source": "default", "settable": True}
    assert not ServerSetting.objects.filter(key="diagnostics.traceRetention").exists()


def test_env_fixes_values(client, settings):
    settings.COVEL_TRACE_RETENTION_DAYS = 14
    settings.COVEL_TRUSTED_SOURCES = "Acme, other/repo"

    body = client.get(PATH).json()["settings"]

    assert body["diagnostics.traceRetention"] == {"value": "14", "source": "env", "settable": False}
    assert body["trust.sources"] == {"value": ["acme", "other/repo"], "source": "env", "settable": False}


def test_env_zero_retention_reads_keep(client, settings):
    settings.COVEL_TRACE_RETENTION_DAYS = 0

    assert client.get(PATH).json()["settings"]["diagnostics.traceRetention"]["value"] == "keep"


def test_put_fixed_key_is_conflict_and_writes_nothing(client, settings):
    settings.COVEL_TRACE_RETENTION_DAYS = 14

    response = _put(client, {"entries": {"trust.sources": ["acme"], "diagnostics.traceRetention": "7"}})

    assert response.status_code == 409
    assert response.json()["code"] == "server_setting_fixed"
    assert response.json()["details"] == {"key": "diagnostics.traceRetention"}
    assert ServerSetting.objects.count() == 0


def test_put_unknown_key_writes_nothing(client):
    response = _put(client, {"entries": {"diagnostics.traceRetention": "7", "ui.theme": "dark"}})

    assert response.status_code == 400
    assert response.json()["code"] == "unknown_server_setting"
    assert response.json()["details"] == {"key": "ui.theme"}
    assert ServerSetting.objects.count() == 0


@pytest.mark.parametrize("key,value", [
    ("diagnostics.traceRetention", "14"),
    ("diagnostics.traceRetention", 30),
    ("trust.sources", "acme"),
    ("trust.sources", ["not a source!"]),
    ("trust.sources", ["a/b/c"]),
])
def test_put_invalid_value(client, key, value):
    response = _put(client, {"entries": {key: value}})

    assert response.status_code == 400
    assert response.json()["code"] == "invalid_server_setting_value"
    assert response.json()["details"] == {"key": key}
    assert ServerSetting.objects.count() == 0


@pytest.mark.parametrize("body", [{}, {"entries": []}, {"entries": "x"}, {"other": {}}])
def test_put_invalid_body(client, body):
    response = _put(client, body)

    assert response.status_code == 400
    assert response.json()["code"] == "invalid_server_settings_body"


def test_put_empty_body_is_invalid(client):
    response = client.put(PATH, data="", content_type="application/json")

    assert response.status_code == 400
    assert response.json()["code"] == "invalid_server_settings_body"


@pytest.mark.parametrize("tier", ["demo", "commercial"])
def test_hosted_tiers_refuse_writes_even_with_operator_token(client, settings, tier):
    settings.DEPLOYMENT_TIER = tier
    settings.COVEL_OPERATOR_TOKEN = OPERATOR

    response = _put(client, {"entries": {"diagnostics.traceRetention": "7"}}, HTTP_AUTHORIZATION=f"Bearer {OPERATOR}")
    view = client.get(PATH).json()["settings"]

    assert response.status_code == 403
    assert response.json()["code"] == "server_settings_operator_only"
    assert view["diagnostics.traceRetention"]["settable"] is False
    assert view["trust.sources"]["settable"] is False
    assert ServerSetting.objects.count() == 0


def test_self_tier_with_desktop_token_requires_it(client, settings):
    settings.COVEL_OPERATOR_TOKEN = OPERATOR

    without = _put(client, {"entries": {"diagnostics.traceRetention": "7"}})
    with_token = _put(client, {"entries": {"diagnostics.traceRetention": "7"}}, HTTP_AUTHORIZATION=f"Bearer {OPERATOR}")

    assert without.status_code == 401
    assert without.json()["code"] == "desktop_rest_token_invalid"
    assert with_token.status_code == 200
    assert ServerSetting.objects.get(key="diagnostics.traceRetention").value == "7"
