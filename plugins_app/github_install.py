"""Plugin installs and updates from GitHub (spec 004 插件与世界安装: POST /api/install/plugin/github
/preview, /plugin/github, /plugin/github/update/preview, /update, DELETE /update/:id), on the link,
archive and token steps of ``plugins_app.github`` and the staging steps of ``plugins_app.install``.

Flow: a preview downloads the resolved commit, checks the package exactly as an install would
(identity, reserved id, manifest) and signs what it saw; nothing is written. The install redeems
the token, downloads the same commit again, compares the content digest (409 preview_changed when
it moved) and publishes through the zip installer's claim + rename, adding the install receipt
(`.covel-install.json`: repository, commit, path, digest, tracking, version, per-file digests).

An update is staged, not swapped under running processes: the checked package goes to
`plugins/.covel-updates/<id>/pkg` (with `update.json`), listed as ``pendingUpdate`` and promoted by
the next server start before discovery (``plugins_app.install.plugin_update_promote``); DELETE
cancels it. Local changes to the installed package (integrity not ``verified``) block an update.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from django.conf import settings

from covel.errors import ApiError
from plugins_app import github as gh
from plugins_app import install
from plugins_app import manifests as mf
from plugins_app.discovery import community_plugins_dir
from plugins_app.trust import (
    INTEGRITY_VERIFIED,
    receipt_read,
    source_is_trusted,
    trusted_sources,
)

PURPOSE_INSTALL = "install"
PURPOSE_UPDATE = "update"


def package_stage_copy(source: Path, staging: Path, name: str) -> Path:
    """Copy a package folder of an extracted tree to ``staging/<name>`` (its folder name is part of
    its identity) and return it. The tree came through the safe extractor: no links in it."""
    target = staging / name
    shutil.copytree(source, target, symlinks=True, ignore=shutil.ignore_patterns("node_modules"))
    return target


def folder_name(resolved: gh.ResolvedSource, path: str) -> str:
    """The folder name a package at ``path`` of the repository is known by (the repository name
    for a package at the repository root)."""
    return path.rsplit("/", 1)[-1] if path else resolved.repo


def source_of(resolved: gh.ResolvedSource, path: str, digest: str) -> dict[str, Any]:
    """The preview's ``source``: {repository, commit, path, digest, tracking}."""
    return {"repository": resolved.repository, "commit": resolved.commit, "path": path, "digest": digest,
            "tracking": resolved.tracking}


def plugin_preview_build(package_root: Path, resolved: gh.ResolvedSource, path: str, *, staging: Path,
                         purpose: str = PURPOSE_INSTALL, bind: dict[str, Any] | None = None,
                         expected_id: str | None = None) -> dict[str, Any]:
    """GithubPluginPreview of the package at ``package_root`` (an extracted tree's folder):
    {kind: "plugin", id, version, description, author, hasServerCode, source, capabilities,
    trustedSource, token, expiresAt}. Raises what plugin_check raises (400/409)."""
    staged = package_stage_copy(package_root, staging, folder_name(resolved, path))
    plugin_id = install.plugin_check(staged, extracted=None, expected_id=expected_id)
    manifest = mf.plugin_manifest_load(staged, expected_id=plugin_id)
    digest = gh.package_digest(staged)
    source = source_of(resolved, path, digest)
    capabilities = gh.plugin_capabilities(manifest)
    payload = {"kind": "plugin", "id": plugin_id, "version": manifest.version, **source, **(bind or {})}
    token, expires_at = gh.token_issue(payload, purpose=purpose)
    return {"kind": "plugin", "id": plugin_id, "version": manifest.version, "description": manifest.description,
            "author": gh.author_name(manifest.author), "hasServerCode": capabilities["code"]["hasServerCode"],
            "source": source, "capabilities": capabilities, "requires": list(manifest.requires),
            "provides": [p.get("contract") for p in manifest.provides if isinstance(p, dict) and p.get("contract")],
            "trustedSource": source_is_trusted(resolved.repository, trusted_sources()),
            "token": token, "expiresAt": expires_at}


def _staging_parent() -> Path:
    return community_plugins_dir(settings.COVEL_HOME)


def plugin_github_preview(url: Any) -> dict[str, Any]:
    """POST /api/install/plugin/github/preview {url}: the preview of the one plugin the link names
    (a package folder, or a folder holding exactly one plugin). Nothing is written or executed.
    Raises 400 invalid_github_url / not_a_plugin / too_many_packages / package_invalid, 404
    github_not_found, 409 plugin_reserved_id, 413, 429 github_rate_limited, 502."""
    link = gh.link_parse(url)
    resolved = gh.link_resolve(link)
    staging = install.package_staging(_staging_parent())
    try:
        with gh.ArchiveCache(staging) as cache:
            folder = gh.subtree(cache.tree(resolved.repository, resolved.commit), resolved.path)
            plugins = [(k, p) for k, p in gh.packages_find(folder) if k == "plugin"]
            if len(plugins) != 1:
                raise ApiError(400, "not_a_plugin", "The link names no single plugin package; use "
                               "POST /api/install/github/preview to list several" if plugins else
                               "No plugin package (PLUGIN.md) below this link")
            package_root = plugins[0][1]
            path = package_root.relative_to(cache.tree(resolved.repository, resolved.commit)).as_posix()
            path = "" if path == "." else path
            return plugin_preview_build(package_root, resolved, path, staging=staging)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def fetch_verified(payload: dict[str, Any], cache: gh.ArchiveCache, staging: Path) -> Path:
    """Download the commit a token names again, copy its package to staging and check the content
    digest. Returns the staged package. Raises 409 preview_changed (content moved) and GithubError."""
    resolved = gh.ResolvedSource(*payload["repository"].split("/", 1), payload["commit"], payload["path"],
                                 payload.get("tracking") or {})
    folder = gh.subtree(cache.tree(resolved.repository, resolved.commit), payload["path"])
    staged = package_stage_copy(folder, staging, folder_name(resolved, payload["path"]))
    if gh.package_digest(staged) != payload["digest"]:
        raise ApiError(409, "preview_changed", f"The content of {payload['id']} changed since the preview; preview again",
                       details={"id": payload["id"]})
    return staged


def receipt_of(payload: dict[str, Any]) -> dict[str, Any]:
    """The install receipt fields of a redeemed preview."""
    return {"kind": payload["kind"], "id": payload["id"], "source": payload["repository"],
            "repository": payload["repository"], "commit": payload["commit"], "path": payload["path"],
            "digest": payload["digest"], "tracking": payload.get("tracking"), "version": payload.get("version"),
            "origin": install.ORIGIN_GITHUB}


def plugin_install_payload(payload: dict[str, Any], cache: gh.ArchiveCache) -> dict[str, Any]:
    """Install the plugin a redeemed install token names (shared by the single and batch installs)."""
    staging = install.package_staging(_staging_parent())
    try:
        staged = fetch_verified(payload, cache, staging)
        result = install.plugin_install_staged(staged, receipt=receipt_of(payload), expected_id=payload["id"])
        result.pop("hasServerCode", None)
        return result
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def plugin_github_install(body: Any) -> dict[str, Any]:
    """POST /api/install/plugin/github {token, acceptRisk: true} → 201 {ok, kind: "plugin", id,
    restartRequired: true}. Raises 400 risk_not_accepted / invalid_preview_token, 409
    preview_expired / preview_changed / plugin_already_exists / package_busy, GithubError."""
    body = gh.accept_risk_check(body)
    payload = gh.token_redeem(body.get("token"), purpose=PURPOSE_INSTALL, kind="plugin")
    with gh.ArchiveCache(_staging_parent()) as cache:
        return plugin_install_payload(payload, cache)


# ------------------------------------------------------------------------------- updates


def installed_github_record(root: Path, package_id: str, kind: str) -> dict[str, Any]:
    """The receipt of a package installed from GitHub; 404 <kind>_not_installed, 400
    update_unavailable (a zip, hand-copied or legacy install has no source to check)."""
    if not root.is_dir():
        raise ApiError(404, f"{kind}_not_installed", f"{package_id} is not installed")
    record = install.receipt_data(root) or {}
    if not (isinstance(record.get("repository"), str) and isinstance(record.get("commit"), str)
            and isinstance(record.get("digest"), str) and isinstance(record.get("tracking"), dict)):
        raise ApiError(400, "update_unavailable", f"{package_id} was not installed from GitHub: there is nothing to check")
    return record


def update_target(record: dict[str, Any], url: Any) -> gh.ResolvedSource | None:
    """Where an update check looks: the link ``url`` (same repository and folder only), else the
    install's tracking; None for a pinned install without a link."""
    if url is not None:
        link = gh.link_parse(url)
        if link.repository.lower() != record["repository"].lower() or link.path != record.get("path", ""):
            raise ApiError(400, "update_source_mismatch", "An update must come from the same repository and folder")
        if link.ref is None:
            link = gh.GithubLink(link.owner, link.repo, None, link.path)
        return gh.link_resolve(link)
    return gh.tracking_resolve(record["repository"], record.get("path", ""), record["tracking"])


def plugin_github_update_preview(body: Any) -> dict[str, Any]:
    """POST /api/install/plugin/github/update/preview {id, url?}: {status: "current"} (the content
    digest did not change), {status: "pinned"} (a tag/commit install, no url) or {status:
    "available", preview} — the install preview plus previous {version, source} and changes
    {added, modified, removed}; its token is an update token bound to the current receipt."""
    if not isinstance(body, dict) or not isinstance(body.get("id"), str):
        raise ApiError(400, "invalid_request", "Send {id, url?}")
    plugin_id = body["id"]
    root = community_plugins_dir(settings.COVEL_HOME) / plugin_id
    if not mf.PLUGIN_ID_RE.match(plugin_id):
        raise ApiError(400, "invalid_plugin_id", "The plugin id is not valid")
    record = installed_github_record(root, plugin_id, "plugin")
    resolved = update_target(record, body.get("url"))
    if resolved is None:
        return {"status": "pinned"}
    staging = install.package_staging(_staging_parent())
    try:
        with gh.ArchiveCache(staging) as cache:
            folder = gh.subtree(cache.tree(resolved.repository, resolved.commit), record.get("path", ""))
            if gh.package_digest(folder) == record["digest"]:
                return {"status": "current"}
            preview = plugin_preview_build(folder, resolved, record.get("path", ""), staging=staging,
                                           purpose=PURPOSE_UPDATE, bind={"previousDigest": record["digest"]},
                                           expected_id=plugin_id)
            preview["previous"] = {"version": record.get("version"),
                                   "source": {k: record.get(k) for k in ("repository", "commit", "path", "digest", "tracking")}}
            preview["changes"] = gh.file_changes(gh.package_file_digests(root), gh.package_file_digests(folder))
            return {"status": "available", "preview": preview}
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def plugin_github_update(body: Any) -> dict[str, Any]:
    """POST /api/install/plugin/github/update {token, acceptRisk: true} → 201 {ok, kind: "plugin",
    id, restartRequired: true}: the checked update is staged in `.covel-updates/<id>/` and applied
    at the next start. Raises 409 update_pending (one is staged already), 409 local_changes (the
    installed files differ from their receipt), 409 preview_changed (the install or the source
    moved since the preview), plus the install errors."""
    body = gh.accept_risk_check(body)
    payload = gh.token_redeem(body.get("token"), purpose=PURPOSE_UPDATE, kind="plugin")
    plugin_id = payload["id"]
    community = community_plugins_dir(settings.COVEL_HOME)
    root = community / plugin_id
    with install.package_lock(community, plugin_id):
        record = installed_github_record(root, plugin_id, "plugin")
        if record["digest"] != payload.get("previousDigest"):
            raise ApiError(409, "preview_changed", "The installed package changed since the update preview; preview again")
        if receipt_read(root)[1] != INTEGRITY_VERIFIED:
            raise ApiError(409, "local_changes", f"{plugin_id} has local changes: back them up, then uninstall and reinstall")
        pending = community / install.UPDATES_DIR / plugin_id
        if pending.exists():
            raise ApiError(409, "update_pending", f"An update of {plugin_id} is already staged; cancel it first")
        staging = install.package_staging(community)
        try:
            with gh.ArchiveCache(staging) as cache:
                staged = fetch_verified(payload, cache, staging)
                install.plugin_check(staged, extracted=None, expected_id=plugin_id)
                install.receipt_record(staged, receipt_of(payload))
                holder = staging / "update"
                holder.mkdir()
                staged.rename(holder / "pkg")
                (holder / "update.json").write_text(json.dumps(
                    {"version": payload.get("version"), "source": payload["repository"], "commit": payload["commit"],
                     "digest": payload["digest"], "error": None}, indent=2), encoding="utf-8")
                pending.parent.mkdir(parents=True, exist_ok=True)
                install.package_claim(pending, plugin_id, code="update_pending")
                install.package_publish(holder, pending)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return {"ok": True, "kind": "plugin", "id": plugin_id, "restartRequired": True}


def plugin_github_update_cancel(plugin_id: str) -> dict[str, Any]:
    """DELETE /api/install/plugin/github/update/:id → {ok: true}; 404 no_pending_update, 409 package_busy."""
    if not mf.PLUGIN_ID_RE.match(plugin_id):
        raise ApiError(400, "invalid_plugin_id", "The plugin id is not valid")
    community = community_plugins_dir(settings.COVEL_HOME)
    with install.package_lock(community, plugin_id):
        pending = community / install.UPDATES_DIR / plugin_id
        if not pending.is_dir():
            raise ApiError(404, "no_pending_update", f"No update of {plugin_id} is waiting")
        install.trash_remove(install.package_move_out(pending))
    return {"ok": True}


__all__ = [
    "PURPOSE_INSTALL", "PURPOSE_UPDATE", "fetch_verified", "folder_name", "installed_github_record", "package_stage_copy",
    "plugin_github_install", "plugin_github_preview", "plugin_github_update", "plugin_github_update_cancel",
    "plugin_github_update_preview", "plugin_install_payload", "plugin_preview_build", "receipt_of", "source_of",
    "update_target",
]
