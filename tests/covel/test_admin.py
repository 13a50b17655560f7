"""Operators' views: every admin changelist and change form renders for a superuser."""
import pytest
from django.contrib import admin
from django.urls import reverse


@pytest.mark.django_db
def test_every_admin_changelist_renders(admin_client):
    for model in admin.site._registry:
        url = reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")
        response = admin_client.get(url, {"q": "x"})
        assert response.status_code == 200, url


@pytest.mark.django_db
def test_session_changelist_lists_sessions_without_private_fields(admin_client, client):
    created = client.post("/api/sessions", {"worldId": "hollow-reach-light", "locale": "en-US"}, content_type="application/json")
    assert created.status_code == 201
    session_id = created.json()["id"]
    listing = admin_client.get(reverse("admin:covel_sessions_session_changelist"))
    assert session_id in listing.content.decode()
    change = admin_client.get(reverse("admin:covel_sessions_session_change", args=[session_id]))
    assert change.status_code == 200
    assert "owner_token_hash" not in change.content.decode()
