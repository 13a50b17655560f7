"""World installs from GitHub, multi-package previews, batches and collections, and the installed
package listings (spec 004 插件与世界安装: /api/install/world/github/*, /api/install/github/preview,
/api/install/github/batch, /api/install/collection, GET /api/install/plugins, GET /api/install/worlds).

Plugins come from ``plugins_app.github_install``; this module adds worlds (which live in this app)
and the flows that mix both kinds.

Batches and collections install as one whole: every token is redeemed and every target checked
free first (409, nothing written); then plugins before worlds, each downloaded again, compared with
its preview digest and published. When one fails, the packages this request already wrote are
moved out again and removed; the error carries ``details.rolledBack`` (removed again) and
``details.retained`` (could not be removed: left in place, listed for the operator).

World updates apply at once (worlds need no restart): the checked new package replaces the old
folder with two renames, the old one restored if the new one does not activate.
"""
from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

import yaml
from django.conf import settings

from covel.errors import ApiError
from covel.yamlio import yaml_load
from plugins_app import github as gh
from plugins_app import github_install as ghi
from plugins_app import install
from plugins_app.discovery import community_plugins_dir
from plugins_app.errors import TargetExists
from plugins_app.trust import (
    INTEGRITY_NO_RECEIPT,
    INTEGRITY_UNREADABLE,
    files_integrity,
    source_is_trusted,
    trusted_sources,
)
from sessions import world_install
from sessions import world_packages as wp

logger = logging.getLogger(__name__)

MAX_BATCH = 20


def _worlds_dir() -> Path:
    return wp.user_worlds_dir(settings.COVEL_HOME)


# ------------------------------------------------------------------------------- world previews


def world_preview_build(package_root: Path, resolved: gh.ResolvedSource, path: str, *, staging: Path,
                        purpose: str = ghi.PURPOSE_INSTALL, bind: dict[str, Any] | None = None,
                        expected_id: str | None = None) -> dict[str, Any]:
    """GithubWorldPreview: {kind: "world", id, version, name, summary, author, source,
    trustedSource, alreadyInstalled, token, expiresAt}. Runs the install checks (400 package_invalid)."""
    staged = ghi.package_stage_copy(package_root, staging, ghi.folder_name(resolved, path))
    manifest = world_install.world_stage_load(staged, expected_id=expected_id).manifest
    world_id = manifest["id"]
    digest = gh.package_digest(staged)
    source = ghi.source_of(resolved, path, digest)
    version = manifest.get("version") if isinstance(manifest.get("version"), str) else None
    payload = {"kind": "world", "id": world_id, "version": version, **source, **(bind or {})}
    token, expires_at = gh.token_issue(payload, purpose=purpose)
    return {"kind": "world", "id": world_id, "version": version, "name": manifest.get("name"),
            "summary": manifest.get("summary"), "author": gh.author_name(manifest.get("author")), "source": source,
            "trustedSource": source_is_trusted(resolved.repository, trusted_sources()),
            "alreadyInstalled": world_install.world_id_taken(world_id), "token": token, "expiresAt": expires_at}


def _single_package(cache: gh.ArchiveCache, resolved: gh.ResolvedSource, kind: str) -> tuple[Path, str]:
    tree = cache.tree(resolved.repository, resolved.commit)
    folder = gh.subtree(tree, resolved.path)
    found = [p for k, p in gh.packages_find(folder) if k == kind]
    if len(found) != 1:
        marker = "PLUGIN.md" if kind == "plugin" else "world.yaml"
        raise ApiError(400, f"not_a_{kind}", f"The link names no single {kind} package ({marker})")
    rel = found[0].relative_to(tree).as_posix()
    return found[0], "" if rel == "." else rel


def world_github_preview(url: Any) -> dict[str, Any]:
    """POST /api/install/world/github/preview {url}: the preview of the one world the link names.
    Nothing is written. Errors as the plugin preview (not_a_world for 400)."""
    resolved = gh.link_resolve(gh.link_parse(url))
    staging = install.package_staging(_worlds_dir())
    try:
        with gh.ArchiveCache(staging) as cache:
            root, path = _single_package(cache, resolved, "world")
            return world_preview_build(root, resolved, path, staging=staging)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def world_install_payload(payload: dict[str, Any], cache: gh.ArchiveCache) -> dict[str, Any]:
    """Install the world a redeemed install token names → {ok, kind: "world", id, restartRequired: false}."""
    staging = install.package_staging(_worlds_dir())
    try:
        staged = ghi.fetch_verified(payload, cache, staging)
        world_id = world_install.world_stage_check(staged, expected_id=payload["id"])
        return world_install.world_install_staged(staged, world_id, origin=install.ORIGIN_GITHUB, receipt=ghi.receipt_of(payload))
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def world_github_install(body: Any) -> dict[str, Any]:
    """POST /api/install/world/github {token, acceptRisk: true} → 201 {ok, kind: "world", id,
    restartRequired: false}; listed by GET /api/worlds at once. Raises 400 risk_not_accepted /
    invalid_preview_token / package_invalid, 409 preview_expired / preview_changed /
    world_already_exists, GithubError."""
    body = gh.accept_risk_check(body)
    payload = gh.token_redeem(body.get("token"), purpose=ghi.PURPOSE_INSTALL, kind="world")
    with install.package_lock(_worlds_dir(), payload["id"]), gh.ArchiveCache(_worlds_dir()) as cache:
        return world_install_payload(payload, cache)


def _world_integrity(root: Path, record: dict[str, Any]) -> str:
    files = record.get("files")
    if not isinstance(files, dict):
        return INTEGRITY_NO_RECEIPT
    try:
        return files_integrity(root, files)
    except OSError:
        return INTEGRITY_UNREADABLE


def world_github_update_preview(body: Any) -> dict[str, Any]:
    """POST /api/install/world/github/update/preview {id, url?}: as the plugin one ({status:
    current | pinned | available, preview?}); 404 world_not_installed, 400 update_unavailable."""
    if not isinstance(body, dict) or not isinstance(body.get("id"), str) or not wp.WORLD_ID_RE.match(body["id"]):
        raise ApiError(400, "invalid_request", "Send {id, url?} with a world id")
    world_id = body["id"]
    root = _worlds_dir() / world_id
    record = ghi.installed_github_record(root, world_id, "world")
    resolved = ghi.update_target(record, body.get("url"))
    if resolved is None:
        return {"status": "pinned"}
    staging = install.package_staging(_worlds_dir())
    try:
        with gh.ArchiveCache(staging) as cache:
            folder = gh.subtree(cache.tree(resolved.repository, resolved.commit), record.get("path", ""))
            if gh.package_digest(folder) == record["digest"]:
                return {"status": "current"}
            preview = world_preview_build(folder, resolved, record.get("path", ""), staging=staging,
                                          purpose=ghi.PURPOSE_UPDATE, bind={"previousDigest": record["digest"]},
                                          expected_id=world_id)
            preview["previous"] = {"version": record.get("version"),
                                   "source": {k: record.get(k) for k in ("repository", "commit", "path", "digest", "tracking")}}
            old_files = {k: v for k, v in (record.get("files") or {}).items()}
            preview["changes"] = gh.file_changes(old_files, gh.package_file_digests(folder))
            return {"status": "available", "preview": preview}
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def world_github_update(body: Any) -> dict[str, Any]:
    """POST /api/install/world/github/update {token, acceptRisk: true} → 201 {ok, kind: "world",
    id, restartRequired: false}: the new package replaces the old folder now (two renames; the old
    one comes back if the new one does not activate). Raises 409 local_changes / preview_changed /
    package_busy, 500 world_activation_failed, plus the install errors."""
    body = gh.accept_risk_check(body)
    payload = gh.token_redeem(body.get("token"), purpose=ghi.PURPOSE_UPDATE, kind="world")
    world_id = payload["id"]
    worlds = _worlds_dir()
    root = worlds / world_id
    with install.package_lock(worlds, world_id):
        record = ghi.installed_github_record(root, world_id, "world")
        if record["digest"] != payload.get("previousDigest"):
            raise ApiError(409, "preview_changed", "The installed world changed since the update preview; preview again")
        if _world_integrity(root, record) != "verified":
            raise ApiError(409, "local_changes", f"{world_id} has local changes: back them up first")
        staging = install.package_staging(worlds)
        try:
            with gh.ArchiveCache(staging) as cache:
                staged = ghi.fetch_verified(payload, cache, staging)
                world_install.world_stage_check(staged, expected_id=world_id)
                world_install.world_replace_staged(staged, world_id, receipt=ghi.receipt_of(payload))
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return {"ok": True, "kind": "world", "id": world_id, "restartRequired": False}


def world_github_update_cancel(world_id: str) -> dict[str, Any]:
    """DELETE /api/install/world/github/update/:id: world updates apply at once, so there is never
    one waiting: 404 no_pending_update (400 for a malformed id)."""
    if not wp.WORLD_ID_RE.match(world_id):
        raise ApiError(400, "invalid_request", "The world id is not valid")
    raise ApiError(404, "no_pending_update", f"No update of {world_id} is waiting (world updates apply at once)")


# ------------------------------------------------------------------------------- several packages


def _member_path(base: str, rel: Any) -> str:
    if not isinstance(rel, str) or not rel.strip("/"):
        raise ApiError(400, "collection_invalid", "every collection member needs a path")
    parts = [p for p in rel.strip("/").split("/") if p not in ("", ".")]
    if any(p == ".." or "\\" in p for p in parts):
        raise ApiError(400, "collection_invalid", f"collection member path {rel!r} leaves the collection")
    return "/".join([p for p in base.split("/") if p] + parts)


def collection_read(folder: Path) -> dict[str, Any] | None:
    """The parsed covel-collection.yaml in ``folder`` (None without one). Raises 400 collection_invalid."""
    path = folder / gh.COLLECTION_FILE
    if not path.is_file():
        return None
    try:
        data = yaml_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, OSError, UnicodeDecodeError):
        raise ApiError(400, "collection_invalid", f"{gh.COLLECTION_FILE} is not valid YAML") from None
    if not isinstance(data, dict):
        raise ApiError(400, "collection_invalid", f"{gh.COLLECTION_FILE} must be a mapping")
    members = [("plugin", m) for m in data.get("plugins") or []] + [("world", m) for m in data.get("worlds") or []]
    if not 1 <= len(members) <= MAX_BATCH or not all(isinstance(m, dict) for _k, m in members):
        raise ApiError(400, "collection_invalid", f"a collection lists 1–{MAX_BATCH} members (mappings with a path)")
    data["_members"] = members
    return data


def _preview_one(kind: str, root: Path, resolved: gh.ResolvedSource, path: str, staging: Path) -> dict[str, Any]:
    if kind == "plugin":
        return ghi.plugin_preview_build(root, resolved, path, staging=staging)
    return world_preview_build(root, resolved, path, staging=staging)


def github_preview(url: Any) -> dict[str, Any]:
    """POST /api/install/github/preview {url}: {collection, items, problems}. ``items`` are the
    single-package previews (plugin or world, each with its install token, usable with the single
    install or a batch); a folder with covel-collection.yaml lists exactly its members (members of
    other repositories need a pinned 40-hex commit) and fails as a whole (400 collection_invalid)
    when one cannot be read; otherwise every package below the link is listed and unreadable ones
    become warnings in ``problems`` ({level, message, packageId?}). Nothing is written."""
    resolved = gh.link_resolve(gh.link_parse(url))
    staging = install.package_staging(_worlds_dir())
    items: list[dict[str, Any]] = []
    problems: list[dict[str, Any]] = []
    try:
        with gh.ArchiveCache(staging) as cache:
            tree = cache.tree(resolved.repository, resolved.commit)
            folder = gh.subtree(tree, resolved.path)
            collection = collection_read(folder)
            if collection is not None:
                seen: set[tuple[str, str]] = set()
                for kind, member in collection["_members"]:
                    if member.get("repository") is not None:
                        repository, commit = member.get("repository"), member.get("commit")
                        if not (isinstance(repository, str) and repository.count("/") == 1 and isinstance(commit, str)
                                and gh.SHA_RE.match(commit)):
                            raise ApiError(400, "collection_invalid", "a member of another repository needs owner/repo "
                                           "and a full 40-hex commit")
                        owner, repo = repository.split("/")
                        path = _member_path("", member.get("path") or "") if member.get("path") else ""
                        source = gh.ResolvedSource(owner, repo, commit, path, {"kind": gh.TRACKING_PINNED, "ref": commit})
                    else:
                        path = _member_path(resolved.path, member.get("path"))
                        source = gh.ResolvedSource(resolved.owner, resolved.repo, resolved.commit, path, resolved.tracking)
                    member_tree = cache.tree(source.repository, source.commit)
                    root = gh.subtree(member_tree, path)
                    if gh.package_kind(root) != kind:
                        raise ApiError(400, "collection_invalid", f"collection member {path or repository} is not a {kind} package")
                    try:
                        preview = _preview_one(kind, root, source, path, staging)
                    except ApiError as exc:
                        raise ApiError(400, "collection_invalid", f"collection member {path} cannot be installed: {exc.message}",
                                       details={"member": path, "code": exc.code}) from None
                    if (kind, preview["id"]) in seen:
                        raise ApiError(400, "collection_invalid", f"{kind} {preview['id']} is listed twice")
                    seen.add((kind, preview["id"]))
                    items.append(preview)
                info = {"id": collection.get("id"), "name": collection.get("name"), "version": collection.get("version")}
            else:
                info = None
                for kind, root in gh.packages_find(folder):
                    rel = root.relative_to(tree).as_posix()
                    rel = "" if rel == "." else rel
                    try:
                        items.append(_preview_one(kind, root, resolved, rel, staging))
                    except ApiError as exc:
                        problems.append({"level": "warning", "message": f"{rel or resolved.repository}: {exc.message}",
                                         "packageId": ghi.folder_name(resolved, rel)})
            problems.extend(_integrity_problems(items))
            return {"collection": info, "items": items, "problems": problems}
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _integrity_problems(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Plugins whose root `requires` contracts have no provider among the installed and the listed
    plugins (an error: such a package is not installable as part of this selection)."""
    from plugins_app.registry import plugin_registry

    provided: set[str] = set()
    for record in plugin_registry().all():
        provided.update(p.get("contract") for p in record.manifest.provides if isinstance(p, dict))
    listed = [i for i in items if i["kind"] == "plugin"]
    for item in listed:
        provided.update(item.get("provides", []))
    out = []
    for item in listed:
        for contract in item.get("requires", []):
            if contract not in provided:
                out.append({"level": "error", "message": f"{item['id']} requires {contract}, which no installed or "
                            "listed plugin provides", "packageId": item["id"]})
    return out


def _rollback(written: list[tuple[str, str]]) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    rolled_back, retained = [], []
    for kind, package_id in reversed(written):
        directory = (community_plugins_dir(settings.COVEL_HOME) if kind == "plugin" else _worlds_dir()) / package_id
        try:
            trash = install.package_move_out(directory)
        except ApiError:
            logger.error("batch rollback could not remove %s %s", kind, package_id)
            retained.append({"kind": kind, "id": package_id})
            continue
        install.trash_remove(trash)
        rolled_back.append({"kind": kind, "id": package_id})
    if any(kind == "plugin" for kind, _ in written):
        install.registry_refresh()
    return rolled_back, retained


def _targets_free(entries: list[tuple[str, str]]) -> None:
    for kind, package_id in sorted(entries, key=lambda e: e[0] != "plugin"):
        if kind == "plugin":
            if package_id in install.builtin_plugin_ids():
                raise ApiError(409, "plugin_reserved_id", f"{package_id} is a builtin plugin id", details={"id": package_id})
            if (community_plugins_dir(settings.COVEL_HOME) / package_id).exists():
                raise TargetExists(package_id, code="plugin_already_exists")
        elif world_install.world_id_taken(package_id):
            raise TargetExists(package_id, code="world_already_exists")


def _install_all(steps: list[tuple[str, str, Any]]) -> dict[str, Any]:
    """Run install steps (kind, id, callable) plugins first; on a failure roll back what was written
    and re-raise with details.rolledBack / details.retained."""
    ordered = [s for s in steps if s[0] == "plugin"] + [s for s in steps if s[0] == "world"]
    written: list[tuple[str, str]] = []
    for kind, package_id, run in ordered:
        try:
            run()
        except ApiError as exc:
            rolled_back, retained = _rollback(written)
            details = dict(exc.details or {})
            details.update({"failed": {"kind": kind, "id": package_id}, "rolledBack": rolled_back, "retained": retained})
            exc.details = details
            raise
        except Exception:
            rolled_back, retained = _rollback(written)
            logger.exception("batch install of %s %s failed", kind, package_id)
            raise ApiError(500, "install_failed", f"Installing {kind} {package_id} failed; this request's packages were removed",
                           details={"failed": {"kind": kind, "id": package_id}, "rolledBack": rolled_back,
                                    "retained": retained}) from None
        written.append((kind, package_id))
    return {"ok": True, "installed": [{"kind": k, "id": i} for k, i in written],
            "restartRequired": any(k == "plugin" for k, _ in written)}


def github_batch(body: Any) -> dict[str, Any]:
    """POST /api/install/github/batch {tokens: [1–20 install tokens], acceptRisk: true} → 201
    {ok, installed: [{kind, id}], restartRequired}. All tokens are redeemed and all targets checked
    first (400/409, nothing written); a failure while writing rolls back this request's packages
    (details.rolledBack, details.retained)."""
    body = gh.accept_risk_check(body)
    tokens = body.get("tokens")
    if not isinstance(tokens, list) or not 1 <= len(tokens) <= MAX_BATCH:
        raise ApiError(400, "invalid_request", f"tokens must list 1–{MAX_BATCH} preview tokens")
    payloads = []
    seen: set[tuple[str, str]] = set()
    for token in tokens:
        payload = gh.token_redeem(token, purpose=ghi.PURPOSE_INSTALL)
        key = (payload.get("kind"), payload.get("id"))
        if key[0] not in ("plugin", "world") or key in seen:
            raise ApiError(400, "invalid_request", f"{key[0]} {key[1]} is listed twice" if key in seen else "unknown package kind")
        seen.add(key)
        payloads.append(payload)
    _targets_free([(p["kind"], p["id"]) for p in payloads])
    with gh.ArchiveCache(_worlds_dir()) as cache:
        steps = [(p["kind"], p["id"], (lambda p=p: ghi.plugin_install_payload(p, cache) if p["kind"] == "plugin"
                                       else world_install_payload(p, cache))) for p in payloads]
        return _install_all(steps)


def collection_install_upload(data: bytes) -> dict[str, Any]:
    """POST /api/install/collection (multipart `file`): a packed collection .zip — the manifest at
    its top (or in its one top folder) and every member inside it — installed as one whole like a
    batch (no preview step; any member error is a 400 and nothing stays written). Members of other
    repositories cannot be packed (400 collection_invalid). Returns 201 as the batch."""
    staging = install.package_staging(_worlds_dir())
    try:
        root = install.package_extract(data, staging, "world", gh.COLLECTION_FILE)
        collection = collection_read(root)
        assert collection is not None  # package_extract found the file
        entries: list[tuple[str, str, Path]] = []
        for kind, member in collection["_members"]:
            if member.get("repository") is not None:
                raise ApiError(400, "collection_invalid", "a packed collection cannot hold members of other repositories")
            path = _member_path("", member.get("path"))
            folder = root.joinpath(*path.split("/"))
            if not folder.is_dir() or gh.package_kind(folder) != kind:
                raise ApiError(400, "collection_invalid", f"collection member {path} is not a {kind} package in the archive")
            if kind == "plugin":
                package_id = install.plugin_check(folder, extracted=None)
            else:
                package_id = world_install.world_stage_check(folder)
            entries.append((kind, package_id, folder))
        ids = [(k, i) for k, i, _f in entries]
        if len(set(ids)) != len(ids):
            raise ApiError(400, "collection_invalid", "a member is listed twice")
        _targets_free(ids)

        def run(kind: str, package_id: str, folder: Path) -> Any:
            if kind == "plugin":
                return install.plugin_install_staged(folder, receipt=None, expected_id=package_id)
            return world_install.world_install_staged(folder, package_id, origin=install.ORIGIN_ZIP)

        return _install_all([(k, i, (lambda k=k, i=i, f=f: run(k, i, f))) for k, i, f in entries])
    finally:
        shutil.rmtree(staging, ignore_errors=True)


# ------------------------------------------------------------------------------- listings


def worlds_installed_list() -> list[dict[str, Any]]:
    """GET /api/install/worlds: every package folder in COVEL_HOME/worlds with its install record:
    {id, version, source, integrity, trustedSource, tracking, commit, status: "ok" | "error",
    diagnostics?: [issue]} (a package that does not load is listed with its errors)."""
    directory = _worlds_dir()
    if not directory.is_dir():
        return []
    sources = trusted_sources()
    items = []
    for child in sorted(directory.iterdir(), key=lambda p: p.name):
        if not child.is_dir() or child.name.startswith((".", "_")):
            continue
        world = wp.world_package_load(child, source=wp.SOURCE_USER, expected_id=child.name)
        record = install.receipt_data(child) or {}
        repository = record.get("repository") if isinstance(record.get("repository"), str) else None
        item = {"id": child.name, "version": world.manifest.get("version") if isinstance(world.manifest.get("version"), str) else None,
                "source": repository, "integrity": _world_integrity(child, record) if repository else INTEGRITY_NO_RECEIPT,
                "trustedSource": source_is_trusted(repository, sources), "tracking": record.get("tracking") if repository else None,
                "commit": record.get("commit") if repository else None, "status": "ok" if world.ok else "error"}
        if not world.ok:
            item["diagnostics"] = [i.as_dict() for i in world.issues if i.is_error]
        items.append(item)
    return items


__all__ = [
    "collection_install_upload", "github_batch", "github_preview", "world_github_install", "world_github_preview",
    "world_github_update", "world_github_update_cancel", "world_github_update_preview", "worlds_installed_list",
]
