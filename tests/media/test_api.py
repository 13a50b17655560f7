"""Media endpoints over HTTP (spec 004 §媒体管理, §GET /api/media/library, §POST /api/media/cleanup)."""
from __future__ import annotations

import hashlib
from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

from media.models import MediaAsset
from media.services import CLEANUP_LOCK_KEY
from tests.sessions.support import OPERATOR_TOKEN, session_create
from sessions.locks import session_lock

pytestmark = pytest.mark.django_db

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 40
JPEG = b"\xff\xd8\xff\xe0" + b"\x01" * 40
GIF = b"GIF89a" + b"\x02" * 40
WEBP = b"RIFF\x24\x00\x00\x00WEBPVP8 " + b"\x03" * 40
AVIF = b"\x00\x00\x00\x1cftypavif\x00\x00\x00\x00avifmif1" + b"\x04" * 40
BMP = b"BM" + b"\x05" * 40
JSON = "application/json"
OPERATOR = {"HTTP_AUTHORIZATION": f"Bearer {OPERATOR_TOKEN}"}


def _upload(client, session_id, data=PNG, content_type="image/png", **headers):
    return client.post(f"/api/media?sessionId={session_id}", data=data, content_type=content_type, **headers)


def _stored(media_root, media_id):
    return media_root / media_id[:2] / media_id


def _download(client, session_id, media_id, **headers):
    token = client.get(f"/api/sessions/{session_id}/media-token?id={media_id}", **headers).json()["token"]
    return client.get(f"/api/media/{media_id}?token={token}")


# --- upload --------------------------------------------------------------------------------------


def test_upload_stores_content_addressed_bytes_once(client, session, media_root):
    sid = session["id"]

    first = _upload(client, sid)
    again = _upload(client, sid)

    digest = hashlib.sha256(PNG).hexdigest()
    assert first.status_code == 201 and first.json() == {"id": digest, "mime": "image/png", "size": len(PNG)}
    assert again.status_code == 201 and again.json()["id"] == digest
    assert _stored(media_root, digest).read_bytes() == PNG
    row = MediaAsset.objects.get()
    assert (row.session_id, row.sha256, row.content_type, row.kind, row.storage_path) == (
        sid, digest, "image/png", "image", f"{digest[:2]}/{digest}")


@pytest.mark.parametrize("data, mime", [(PNG, "image/png"), (JPEG, "image/jpeg"), (GIF, "image/gif"),
                                        (WEBP, "image/webp"), (AVIF, "image/avif"), (BMP, "image/bmp")])
def test_upload_takes_the_mime_from_the_bytes(client, session, data, mime):
    response = _upload(client, session["id"], data=data, content_type="image/x-anything")

    assert response.status_code == 201 and response.json()["mime"] == mime


@pytest.mark.parametrize("data, content_type, code", [
    (b"<svg xmlns='http://www.w3.org/2000/svg'/>", "image/svg+xml", "unsupported_media_type"),
    (PNG, "text/plain", "unsupported_media_type"),
    (b"", "image/png", "empty_body"),
    (b"<html>not an image</html>", "image/png", "invalid_image"),
    (b"<svg xmlns='http://www.w3.org/2000/svg'/>", "image/png", "invalid_image"),
])
def test_upload_rejects_what_is_not_an_accepted_image(client, session, media_root, data, content_type, code):
    response = _upload(client, session["id"], data=data, content_type=content_type)

    assert response.status_code == 400 and response.json()["code"] == code
    assert not MediaAsset.objects.exists()
    assert not media_root.exists() or not any(media_root.rglob("*"))


def test_upload_session_checks_and_size_limit(client, session):
    no_session = client.post("/api/media", data=PNG, content_type="image/png")
    assert no_session.status_code == 400 and no_session.json()["code"] == "invalid_request"
    assert _upload(client, "nope").json()["code"] == "session_not_found"
    too_large = _upload(client, session["id"], data=PNG + b"\x00" * (20 * 1024 * 1024))
    assert too_large.status_code == 413
    assert not MediaAsset.objects.exists()


def test_upload_in_demo_tier_needs_the_owner_token(client, catalog):
    with override_settings(DEPLOYMENT_TIER="demo", COVEL_OPERATOR_TOKEN=OPERATOR_TOKEN):
        created = session_create(client, worldId="tide-test", locale="en-US", plugins=["teller"])
        sid = created["id"]

        anonymous = _upload(client, sid)
        owned = _upload(client, sid, HTTP_X_SESSION_TOKEN=created["ownerToken"])
        missing = _upload(client, "nope")

    assert anonymous.status_code == 401 and anonymous.json()["code"] == "session_owner_required"
    assert owned.status_code == 201
    assert missing.status_code == 404 and missing.json()["code"] == "session_not_found"


# --- token and download ------------------------------------------------------------------------


def test_download_with_a_session_token(client, session):
    sid = session["id"]
    media_id = _upload(client, sid).json()["id"]

    issued = client.get(f"/api/sessions/{sid}/media-token?id={media_id}")
    response = client.get(issued.json()["url"])

    assert issued.status_code == 200 and set(issued.json()) == {"token", "url", "expiresAt"}
    assert response.status_code == 200 and b"".join(response.streaming_content) == PNG
    assert response["Content-Type"] == "image/png" and response["X-Content-Type-Options"] == "nosniff"
    assert response["ETag"] == f'"{media_id}"'
    cached = client.get(issued.json()["url"], HTTP_IF_NONE_MATCH=f'"{media_id}"')
    assert cached.status_code == 304 and cached.content == b""


def test_token_and_download_refusals(client, session, catalog, monkeypatch):
    sid = session["id"]
    other = session_create(client, worldId="tide-test", locale="en-US", plugins=["teller"])
    media_id = _upload(client, sid).json()["id"]
    foreign_id = _upload(client, other["id"], data=JPEG).json()["id"]

    not_held = client.get(f"/api/sessions/{sid}/media-token?id={foreign_id}")
    assert not_held.status_code == 404 and not_held.json()["code"] == "not_found"
    bad_id = client.get(f"/api/sessions/{sid}/media-token?id=xyz")
    assert bad_id.status_code == 400 and bad_id.json()["code"] == "invalid_request"
    assert client.get(f"/api/sessions/nope/media-token?id={media_id}").json()["code"] == "session_not_found"

    no_token = client.get(f"/api/media/{media_id}")
    assert no_token.status_code == 401 and no_token.json()["code"] == "media_token_invalid"
    forged = client.get(f"/api/media/{media_id}?token=abc:def")
    assert forged.json()["code"] == "media_token_invalid"
    token = client.get(f"/api/sessions/{sid}/media-token?id={media_id}").json()["token"]
    assert client.get(f"/api/media/{foreign_id}?token={token}").json()["code"] == "media_token_invalid"

    # a token signed more than an hour ago has expired (the clock is faked only while signing)
    import django.core.signing as signing

    real_time = signing.time.time
    monkeypatch.setattr(signing.time, "time", lambda: real_time() - 3601)
    old = client.get(f"/api/sessions/{sid}/media-token?id={media_id}").json()["token"]
    monkeypatch.setattr(signing.time, "time", real_time)
    assert client.get(f"/api/media/{media_id}?token={old}").json()["code"] == "media_token_invalid"

    # the session's reference is checked at download time
    client.delete(f"/api/sessions/{sid}")
    gone = client.get(f"/api/media/{media_id}?token={token}")
    assert gone.status_code == 404 and gone.json()["code"] == "not_found"


# --- library -------------------------------------------------------------------------------------


def _orphan(client, catalog_client_session) -> str:
    """Upload into a throw-away session, then delete that session: the file stays, unused."""
    sid = catalog_client_session["id"]
    media_id = _upload(client, sid, data=GIF).json()["id"]
    assert client.delete(f"/api/sessions/{sid}").status_code == 200
    return media_id


def test_library_lists_usage_and_signed_urls(client, session, catalog):
    sid = session["id"]
    used = _upload(client, sid).json()["id"]
    unused = _orphan(client, session_create(client, worldId="tide-test", locale="en-US", plugins=["teller"]))

    body = client.get("/api/media/library?refresh=1").json()

    by_id = {item["id"]: item for item in body["items"]}
    assert by_id[used]["usage"] == "used" and by_id[used]["usedBy"] == [sid]
    assert by_id[unused]["usage"] == "unused" and by_id[unused]["usedBy"] == []
    assert (by_id[unused]["mime"], by_id[unused]["kind"], by_id[unused]["size"]) == ("image/gif", "image", len(GIF))
    assert body["total"] == 2 and [s["id"] for s in body["sessions"]] == [sid]
    assert body["totals"]["count"] == 2 and body["totals"]["unusedCount"] == 1
    assert body["totals"]["unusedBytes"] == len(GIF) and body["scan"]["complete"] is True
    assert client.get(by_id[unused]["url"]).status_code == 200
    only_unused = client.get("/api/media/library?usage=unused&refresh=1").json()["items"]
    assert [i["id"] for i in only_unused] == [unused]
    assert client.get("/api/media/library?usage=in-use&kind=audio").json()["items"] == []
    bad = client.get("/api/media/library?limit=0")
    assert bad.status_code == 400 and bad.json()["code"] == "invalid_request"


@pytest.mark.parametrize("query", ["limit=%C2%B2", "offset=%C2%B9", "scanLimit=%E2%91%A0", "limit=%D9%A1"])
def test_library_number_params_accept_ascii_digits_only(client, query):
    response = client.get(f"/api/media/library?{query}")

    assert response.status_code == 400 and response.json()["code"] == "invalid_request"


def test_library_marks_pinned_files_held_and_big_sessions_unknown(client, session, catalog):
    sid = session["id"]
    orphan = _orphan(client, session_create(client, worldId="tide-test", locale="en-US", plugins=["teller"]))
    pinned = MediaAsset.objects.create(session=None, content_type="image/gif", size_bytes=len(GIF), sha256=orphan,
                                       storage_path=f"{orphan[:2]}/{orphan}")
    held = client.get("/api/media/library?refresh=1").json()["items"]
    assert [(i["id"], i["usage"]) for i in held] == [(orphan, "held")]

    pinned.delete()
    client.post(f"/api/sessions/{sid}/messages/sync", {"messages": [{"role": "user", "content": "a"},
                                                                     {"role": "user", "content": "b"}]},
                content_type=JSON)
    partial = client.get("/api/media/library?refresh=1&scanLimit=1").json()
    assert partial["scan"] == {"complete": False, "scannedAt": partial["scan"]["scannedAt"], "incompleteSessionId": sid}
    assert [(i["id"], i["usage"]) for i in partial["items"]] == [(orphan, "unknown")]


def test_library_is_unavailable_in_hosted_tiers(client, db):
    with override_settings(DEPLOYMENT_TIER="demo", COVEL_OPERATOR_TOKEN=OPERATOR_TOKEN):
        listing = client.get("/api/media/library", **OPERATOR)
        deleting = client.post("/api/media/library/delete", {"unused": True}, content_type=JSON, **OPERATOR)

    assert listing.status_code == 503 and listing.json()["code"] == "unavailable"
    assert deleting.status_code == 503 and deleting.json()["code"] == "unavailable"


def test_library_delete_removes_only_unused_media(client, session, catalog, media_root):
    sid = session["id"]
    used = _upload(client, sid).json()["id"]
    unused = _orphan(client, session_create(client, worldId="tide-test", locale="en-US", plugins=["teller"]))
    absent = "0" * 64

    response = client.post("/api/media/library/delete", {"ids": [used, unused, absent]}, content_type=JSON)

    assert response.status_code == 200
    assert response.json() == {"deletedIds": [unused], "bytesDeleted": len(GIF),
                               "skipped": [{"id": used, "reason": "in_use"}, {"id": absent, "reason": "not_found"}]}
    assert not _stored(media_root, unused).exists() and _stored(media_root, used).exists()


def test_library_delete_unused_and_force(client, session, catalog, media_root):
    sid = session["id"]
    used = _upload(client, sid).json()["id"]
    unused = _orphan(client, session_create(client, worldId="tide-test", locale="en-US", plugins=["teller"]))

    swept = client.post("/api/media/library/delete", {"unused": True}, content_type=JSON).json()
    forced = client.post("/api/media/library/delete", {"ids": [used], "force": True}, content_type=JSON).json()

    assert swept["deletedIds"] == [unused]
    assert forced == {"deletedIds": [used], "bytesDeleted": len(PNG), "skipped": []}
    assert not MediaAsset.objects.exists() and not _stored(media_root, used).exists()
    assert client.get(f"/api/sessions/{sid}/media-token?id={used}").status_code == 404


def test_library_delete_validation_and_incomplete_scan(client, session):
    sid = session["id"]
    for body in ({}, {"ids": []}, {"unused": False}, {"ids": ["a", "b"], "force": True}, {"ids": ["a"], "unused": True},
                 {"ids": ["a"] * 1001}, {"unused": True, "scanLimit": 0}):
        response = client.post("/api/media/library/delete", body, content_type=JSON)
        assert response.status_code == 400 and response.json()["code"] == "invalid_request", body
    client.post(f"/api/sessions/{sid}/messages/sync", {"messages": [{"role": "user", "content": "a"},
                                                                     {"role": "user", "content": "b"}]},
                content_type=JSON)
    incomplete = client.post("/api/media/library/delete", {"unused": True, "scanLimit": 1}, content_type=JSON)
    assert incomplete.status_code == 409 and incomplete.json()["code"] == "scan_incomplete"


# --- cleanup -------------------------------------------------------------------------------------


def _cleanup(client, body=None, **headers):
    return client.post("/api/media/cleanup", body or {}, content_type=JSON, **headers)


def test_cleanup_gates(client, db):
    disabled = _cleanup(client)
    assert disabled.status_code == 403 and disabled.json() == {"error": "cleanup endpoint disabled", "code": "forbidden"}
    with override_settings(COVEL_MEDIA_CLEANUP_ENABLED=True):
        with override_settings(DEPLOYMENT_TIER="commercial", COVEL_OPERATOR_TOKEN=OPERATOR_TOKEN):
            commercial = _cleanup(client, **OPERATOR)
        with override_settings(DEPLOYMENT_TIER="demo", COVEL_OPERATOR_TOKEN=OPERATOR_TOKEN):
            anonymous = _cleanup(client)
            operator = _cleanup(client, **OPERATOR)
        unconfirmed = _cleanup(client, {"dryRun": False})
        malformed = _cleanup(client, {"dryRun": "no"})
        negative = _cleanup(client, {"maxBytes": -1})
        with session_lock(CLEANUP_LOCK_KEY):
            concurrent = _cleanup(client)
    assert commercial.status_code == 503 and commercial.json() == {
        "error": "cleanup endpoint not available in this deployment tier", "code": "unavailable"}
    assert anonymous.status_code == 401 and anonymous.json()["code"] == "operator_token_required"
    assert operator.status_code == 200 and operator.json()["ok"] is True
    for response in (unconfirmed, malformed, negative):
        assert response.status_code == 400 and response.json()["code"] == "invalid_request"
    assert concurrent.status_code == 429 and concurrent.json() == {"error": "Operation already in progress",
                                                                   "code": "operation_in_progress"}


@override_settings(COVEL_MEDIA_CLEANUP_ENABLED=True)
def test_cleanup_dry_run_then_confirmed_run(client, session, catalog, media_root):
    # given: a used file, a file only mentioned in a message, an orphan, an orphan with a fresh pin,
    # and an expired pin on another orphan
    sid = session["id"]
    used = _upload(client, sid).json()["id"]
    mentioned = _orphan(client, session_create(client, worldId="tide-test", locale="en-US", plugins=["teller"]))
    client.post(f"/api/sessions/{sid}/messages/sync", {"messages": [{"role": "user", "content": f"see {mentioned}"}]},
                content_type=JSON)
    scratch = session_create(client, worldId="tide-test", locale="en-US", plugins=["teller"])
    orphan = _upload(client, scratch["id"], data=JPEG).json()["id"]
    fresh_pinned = _upload(client, scratch["id"], data=BMP).json()["id"]
    stale_pinned = _upload(client, scratch["id"], data=WEBP).json()["id"]
    client.delete(f"/api/sessions/{scratch['id']}")
    MediaAsset.objects.create(session=None, content_type="image/bmp", size_bytes=len(BMP), sha256=fresh_pinned,
                              storage_path="x")
    stale = MediaAsset.objects.create(session=None, content_type="image/webp", size_bytes=len(WEBP),
                                      sha256=stale_pinned, storage_path="x")
    MediaAsset.objects.filter(pk=stale.pk).update(created_at=timezone.now() - timedelta(hours=25))

    # when: a dry run
    dry = _cleanup(client)

    # then: it reports, deletes nothing
    assert dry.status_code == 200
    result = dry.json()["result"]
    assert dry.json()["policy"]["dryRun"] is True
    assert dry.json()["policy"]["expireRefs"] == {"sessionIdPrefix": "media-pin:", "maxAgeMs": 86400000}
    assert sorted(result["deletedIds"]) == sorted([orphan, stale_pinned])
    assert sorted(result["protectedIds"]) == sorted([used, mentioned, fresh_pinned])
    assert (result["scanned"], result["protected"], result["deleted"], result["retained"]) == (5, 3, 2, 3)
    assert result["bytesDeleted"] == len(JPEG) + len(WEBP)  # what the real run would free
    assert [(r["mediaId"], r["sessionId"]) for r in result["expiredRefs"]] == [(stale_pinned, f"media-pin:{stale.pk}")]
    assert _stored(media_root, orphan).exists() and MediaAsset.objects.filter(pk=stale.pk).exists()

    # when: the confirmed run
    real = _cleanup(client, {"dryRun": False}, HTTP_X_CONFIRM_CLEANUP="yes")

    # then
    assert real.status_code == 200 and sorted(real.json()["result"]["deletedIds"]) == sorted([orphan, stale_pinned])
    assert real.json()["result"]["bytesDeleted"] == len(JPEG) + len(WEBP)
    for media_id in (orphan, stale_pinned):
        assert not _stored(media_root, media_id).exists()
    for media_id in (used, mentioned, fresh_pinned):
        assert _stored(media_root, media_id).exists()
    assert not MediaAsset.objects.filter(pk=stale.pk).exists()
    assert _download(client, sid, used).status_code == 200


@override_settings(COVEL_MEDIA_CLEANUP_ENABLED=True)
def test_cleanup_policy_bounds_and_scan_limit(client, session, catalog, media_root):
    sid = session["id"]
    scratch = session_create(client, worldId="tide-test", locale="en-US", plugins=["teller"])
    first = _upload(client, scratch["id"], data=JPEG).json()["id"]
    second = _upload(client, scratch["id"], data=GIF).json()["id"]
    client.delete(f"/api/sessions/{scratch['id']}")
    import os
    import time

    os.utime(_stored(media_root, first), (time.time() - 100, time.time() - 100))

    keep_newest = _cleanup(client, {"keepRecentBytes": len(GIF)}).json()["result"]["deletedIds"]
    young_spared = _cleanup(client, {"maxAgeMs": 50_000}).json()["result"]["deletedIds"]
    under_cap = _cleanup(client, {"maxBytes": 10_000}).json()["result"]["deletedIds"]
    assert (keep_newest, young_spared, under_cap) == ([first], [first], [])

    client.post(f"/api/sessions/{sid}/messages/sync", {"messages": [{"role": "user", "content": "a"},
                                                                     {"role": "user", "content": "b"}]},
                content_type=JSON)
    limited = _cleanup(client, {"scanLimit": 1})
    assert limited.status_code == 400 and limited.json()["code"] == "limit_exceeded"
    assert limited.json()["error"].startswith("scan limit exceeded for session")
    assert _stored(media_root, first).exists() and _stored(media_root, second).exists()
