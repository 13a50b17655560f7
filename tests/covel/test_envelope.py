"""The error envelope where the framework answers by itself: 405 with Allow, 503 while the database
is unreachable (spec 004 §响应格式约定)."""
from __future__ import annotations

import socket

import pytest
from django.db import connections


def test_405_keeps_the_allow_header(client):
    response = client.delete("/api/health")
    assert response.status_code == 405
    assert response.json() == {"error": "Method not allowed: DELETE /api/health", "code": "method_not_allowed"}
    assert response["Allow"] == "GET"


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]  # nothing listens once the socket is closed


@pytest.mark.django_db(transaction=True)
def test_routes_answer_503_while_the_database_is_unreachable(client, tmp_path):
    # given a database that cannot be reached: a closed port (PostgreSQL) or a missing directory (SQLite)
    connection = connections["default"]
    saved = dict(connection.settings_dict)
    connection.close()
    if connection.vendor == "postgresql":
        connection.settings_dict.update(HOST="127.0.0.1", PORT=str(_closed_port()))
    else:
        connection.settings_dict["NAME"] = str(tmp_path / "gone" / "covel.db")
    try:
        # when an ordinary route needs it
        response = client.get("/api/sessions")
    finally:
        connection.close()
        connection.settings_dict.clear()
        connection.settings_dict.update(saved)
    # then the client gets a retryable 503 in the envelope, not a 500
    assert response.status_code == 503
    assert response.json() == {"error": "The database is unavailable; retry shortly", "code": "service_unavailable"}
    assert response["Retry-After"] == "5"
    # and the next request, with the database back, succeeds
    assert client.get("/api/sessions").status_code == 200
