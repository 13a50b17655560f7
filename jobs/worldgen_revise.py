"""POST /api/ai/revise-world (spec 004 AI 生成: 哪些世界可以修改, 结果写到哪里, 并发修改).

Only generated worlds are revised (metadata.generated; a package needs ``.covel-generated.json``
with its file list, else 409 world_not_revisable; a file added or changed by hand is 409
world_package_modified with ``details {added, changed}``, checked before the model call and again
before the package is replaced). The model gets the world's current content and the instruction and
answers three sections, each ``UNCHANGED`` or what changed::

    === WORLD_YAML ===        name / summary / tags; dimensions merge by id (null removes one)
    === WORLD_MD ===          the whole WORLD.md
    === WORLD_PACKAGE_YAML === characters / lorebook / rules merge by id ({id, remove: true}
                              removes); contractData by {contract, key} ({..., remove: true})

The merged world goes through the generator's checks (up to 3 requests); the world id never
changes. Results go back where the world is: a package is replaced whole (the old one stays until
the new one is in place and is restored on failure; other locales are dropped), a server-store
world's row is updated, a world sent in the request (browser) is only returned. The world lock is
not held while the model runs; at publish time the record / package identity must be the one the
request started from, else the revision fails and nothing is written. It runs as the worldgen task
(a ``WorldGeneration`` row with ``operation: "revise"``) like a generation.
"""
from __future__ import annotations

import copy
import hashlib
import json
import logging
import re
import shutil
import uuid
from pathlib import Path
from typing import Any

import yaml
from django.conf import settings
from django.db import transaction

from covel.errors import ApiError
from jobs.models import WorldGeneration
from sessions import world_packages as wp

logger = logging.getLogger("covel.worldgen")

OPERATION = "revise"
INSTRUCTION_MAX_CHARS = 2000
GENERATED_MARKER = ".covel-generated.json"
IGNORED_FILES = {".DS_Store", "Thumbs.db", "desktop.ini"}
SECTIONS = ("WORLD_YAML", "WORLD_MD", "WORLD_PACKAGE_YAML")
_SECTION_RE = re.compile(r"^===\s*(WORLD_YAML|WORLD_MD|WORLD_PACKAGE_YAML)\s*===\s*$", re.MULTILINE)
UNCHANGED = "UNCHANGED"


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def package_changes(root: Path) -> dict[str, list[str]] | None:
    """``{added, changed}`` against the generated marker's file list; None when the marker has no
    list (not a revisable package). Deleted listed files are not a change; OS clutter is ignored."""
    try:
        marker = json.loads((root / GENERATED_MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    listed = marker.get("files") if isinstance(marker, dict) else None
    if not isinstance(listed, dict):
        return None
    added, changed = [], []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root).as_posix()
        if rel == GENERATED_MARKER or path.name in IGNORED_FILES:
            continue
        if rel not in listed:
            added.append(rel)
        elif _sha(path.read_bytes()) != listed[rel]:
            changed.append(rel)
    return {"added": added, "changed": changed}


def _identity(root: Path) -> dict[str, Any]:
    stat = (root / wp.WORLD_FILE).stat()
    return {"root": str(root), "inode": stat.st_ino, "ctime": stat.st_ctime_ns,
            "marker": _sha((root / GENERATED_MARKER).read_bytes())}


def revise_request_parse(body: Any) -> dict[str, Any]:
    """Validate before the stream; returns the generation request. 400 (worldId / instruction /
    idleTimeoutMs / world), 404 world_not_found, 409 world_not_revisable / world_package_modified /
    world_deleting."""
    from jobs.worldgen import IDLE_TIMEOUT_DEFAULT_MS, IDLE_TIMEOUT_MAX_MS, IDLE_TIMEOUT_MIN_MS
    from sessions import world_selectors
    from sessions.errors import WorldDeleting, WorldNotFound

    if not isinstance(body, dict):
        raise ApiError(400, None, "body must be an object")
    world_id, instruction = body.get("worldId"), body.get("instruction")
    if not isinstance(world_id, str) or not world_id:
        raise ApiError(400, None, "worldId (string) is required")
    if not isinstance(instruction, str) or not instruction.strip():
        raise ApiError(400, None, "instruction (string) is required")
    if len(instruction) > INSTRUCTION_MAX_CHARS:
        raise ApiError(400, None, f"instruction must be at most {INSTRUCTION_MAX_CHARS} characters")
    idle = body.get("idleTimeoutMs", IDLE_TIMEOUT_DEFAULT_MS)
    if isinstance(idle, bool) or not isinstance(idle, int) or not IDLE_TIMEOUT_MIN_MS <= idle <= IDLE_TIMEOUT_MAX_MS:
        raise ApiError(400, None, "idleTimeoutMs must be an integer from 1000 to 1800000")
    job: dict[str, Any] = {"operation": OPERATION, "worldId": world_id, "instruction": instruction.strip(),
                           "idleTimeoutMs": idle, "model": body.get("model") if isinstance(body.get("model"), str) else "story",
                           "concept": instruction.strip(), "brief": {"content": [], "contracts": []}}
    world = body.get("world")
    if world is not None:  # a browser world: the result is only returned
        if not isinstance(world, dict) or world.get("id") != world_id or not isinstance(world.get("metadata"), dict):
            raise ApiError(400, None, "world must be the WorldRecord of worldId")
        if world["metadata"].get("generated") is not True:
            raise ApiError(409, "world_not_revisable", "Only generated worlds can be revised")
        job.update({"target": "browser", "world": world, "locale": world.get("locale") or "zh-CN"})
        return job
    view = world_selectors.world_get(world_id)
    if view is None:
        raise WorldNotFound(world_id)
    if view.is_deleting:
        raise WorldDeleting(world_id)
    meta = view.record["metadata"]
    job["locale"] = view.record.get("locale") or meta.get("defaultLocale") or "zh-CN"
    if view.package is not None:
        changes = package_changes(view.package.root)
        if changes is None:
            raise ApiError(409, "world_not_revisable", "Only generated worlds can be revised")
        if changes["added"] or changes["changed"]:
            raise ApiError(409, "world_package_modified", "The generated package has files added or changed by hand", changes)
        job.update({"target": "package", "identity": _identity(view.package.root)})
        return job
    if view.row is None or meta.get("generated") is not True:
        raise ApiError(409, "world_not_revisable", "Only generated worlds can be revised")
    job.update({"target": "store", "updatedAt": view.record.get("updatedAt")})
    return job


# ------------------------------------------------------------------------------ content


def _current(job: dict[str, Any]) -> dict[str, Any]:
    """The world's structured content {manifest, lore, characters, lorebook, rules, contracts}."""
    from sessions import world_selectors

    if job["target"] == "package":
        root = Path(job["identity"]["root"])
        package = wp.world_package_load(root, source=wp.SOURCE_USER, expected_id=job["worldId"])
        manifest_file = yaml.safe_load((root / wp.WORLD_FILE).read_text(encoding="utf-8")) or {}
        default = package.content()
        entries = list(default.lorebook)
        contracts: dict[str, dict[str, Any]] = {}
        for source in package.data_sources:
            if source.target.startswith("contract:"):
                contracts[source.target[len("contract:"):]] = {"data": copy.deepcopy(package.data_files.get(source.path)),
                                                               "source": {"id": source.id, "entry": {"kind": source.kind, "path": source.path}}}
        return {"manifest": {"id": job["worldId"], "name": manifest_file.get("name") or package.name,
                             "summary": manifest_file.get("summary") or package.summary,
                             "tags": list(manifest_file.get("tags") or []), "dimensions": copy.deepcopy(package.dimensions),
                             "pluginPolicy": manifest_file.get("pluginPolicy"), "defaultViewMode": manifest_file.get("defaultViewMode")},
                "lore": package.lore, "characters": copy.deepcopy(default.characters),
                "lorebook": [_entry(e) for e in entries if "rule" not in (e.get("tags") or [])],
                "rules": [_entry(e) for e in entries if "rule" in (e.get("tags") or [])], "contracts": contracts}
    record = job["world"] if job["target"] == "browser" else world_selectors.world_get(job["worldId"]).record
    meta = record["metadata"]
    entries = [e for e in meta.get("embeddedLorebook") or [] if isinstance(e, dict)]
    return {"manifest": {"id": job["worldId"], "name": record.get("name"), "summary": record.get("description") or "",
                         "tags": list(meta.get("tags") or []), "dimensions": copy.deepcopy(meta.get("dimensions") or {})},
            "lore": record.get("lore") or "", "characters": copy.deepcopy(meta.get("embeddedCharacters") or []),
            "lorebook": [_entry(e) for e in entries if "rule" not in (e.get("tags") or [])],
            "rules": [_entry(e) for e in entries if "rule" in (e.get("tags") or [])], "contracts": {}}


def _entry(entry: dict[str, Any]) -> dict[str, Any]:
    return {k: copy.deepcopy(v) for k, v in entry.items() if k in ("id", "keys", "content", "title")}


def _sections(text: str) -> dict[str, str]:
    from jobs.worldgen import _Invalid

    marks = list(_SECTION_RE.finditer(text))
    if [m.group(1) for m in marks] != list(SECTIONS):
        raise _Invalid("revision: the answer needs the sections WORLD_YAML, WORLD_MD and WORLD_PACKAGE_YAML in order")
    out = {}
    for index, mark in enumerate(marks):
        end = marks[index + 1].start() if index + 1 < len(marks) else len(text)
        out[mark.group(1)] = text[mark.end():end].strip()
    return out


def _merge_list(current: list[dict[str, Any]], changes: Any, kind: str) -> list[dict[str, Any]]:
    from jobs.worldgen import _Invalid

    if changes is None:
        return current
    if not isinstance(changes, list):
        raise _Invalid(f"revision: {kind} must be a list")
    out = [copy.deepcopy(c) for c in current]
    for item in changes:
        if not isinstance(item, dict) or not isinstance(item.get("id"), str):
            raise _Invalid(f"revision: every {kind} item needs an id")
        index = next((i for i, c in enumerate(out) if c.get("id") == item["id"]), None)
        if item.get("remove") is True:
            if index is not None:
                out.pop(index)
            continue
        if index is None:
            out.append(item)
        else:
            out[index] = {**out[index], **item}
    return out


def revision_merge(current: dict[str, Any], text: str, warnings: list[str]) -> dict[str, Any]:
    """The merged content after one answer (module docstring), checked like a new world.
    Raises jobs.worldgen._Invalid with the reason."""
    from jobs.worldgen import _Invalid, characters_check, entries_check, lore_check, manifest_check

    sections = _sections(text)
    merged = copy.deepcopy(current)
    if sections["WORLD_YAML"] != UNCHANGED:
        change = yaml.safe_load(sections["WORLD_YAML"]) or {}
        if not isinstance(change, dict):
            raise _Invalid("revision: WORLD_YAML must be a mapping")
        manifest = merged["manifest"]
        for key in ("name", "summary", "tags"):
            if key in change:
                manifest[key] = change[key]
        for dim_id, definition in (change.get("dimensions") or {}).items():
            if definition is None:
                manifest["dimensions"].pop(dim_id, None)
            else:
                manifest["dimensions"][dim_id] = definition
    checked = manifest_check(yaml.safe_dump({k: merged["manifest"][k] for k in ("id", "name", "summary", "tags", "dimensions")},
                                            allow_unicode=True), warnings)
    if checked["id"] != current["manifest"]["id"]:
        raise _Invalid("revision: the world id cannot change")
    merged["manifest"].update(checked)
    if sections["WORLD_MD"] != UNCHANGED:
        merged["lore"] = lore_check(sections["WORLD_MD"])
    if sections["WORLD_PACKAGE_YAML"] != UNCHANGED:
        change = yaml.safe_load(sections["WORLD_PACKAGE_YAML"]) or {}
        if not isinstance(change, dict):
            raise _Invalid("revision: WORLD_PACKAGE_YAML must be a mapping")
        merged["characters"] = _merge_list(merged["characters"], change.get("characters"), "characters")
        merged["lorebook"] = _merge_list(merged["lorebook"], change.get("lorebook"), "lorebook")
        merged["rules"] = _merge_list(merged["rules"], change.get("rules"), "rules")
        for item in change.get("contractData") or []:
            if isinstance(item, dict) and isinstance(item.get("contract"), str) and item["contract"] in merged["contracts"]:
                if item.get("remove") is True:
                    merged["contracts"].pop(item["contract"])
                elif "value" in item:
                    merged["contracts"][item["contract"]]["data"] = item["value"]
    # The whole merged set is checked, unchanged records included (never fixed by dropping any).
    if merged["characters"]:
        merged["characters"] = characters_check(json.dumps(merged["characters"], ensure_ascii=False))
    lore_entries = entries_check(json.dumps(merged["lorebook"], ensure_ascii=False), "lorebook", set()) if merged["lorebook"] else []
    rules = entries_check(json.dumps([{k: v for k, v in r.items() if k in ("id", "title", "content")} for r in merged["rules"]],
                                     ensure_ascii=False), "rules", {e["id"] for e in lore_entries}) if merged["rules"] else []
    merged["lorebook"], merged["rules"] = lore_entries, rules
    return merged


# ------------------------------------------------------------------------------ run


def revise_run(run) -> None:
    """The task body of a revision (``run``: jobs.worldgen._Run over the generation row)."""
    from jobs.worldgen import (FRAME_DONE, FRAME_PROGRESS, MAX_ATTEMPTS, SCRIPTED_ID, SCRIPTED_ROOT, _fail, _IdleTimeout,
                               _Invalid, _publish_lock)
    from turns.engine.providers.base import ModelError, ModelRequest, ModelResponse, TextDelta

    job = run.job
    try:
        current = _current(job)
    except Exception:
        logger.exception("revise %s: reading the world failed", job["worldId"])
        _fail(run, "The world changed or was deleted; reload it and try again")
        return
    run.parts = [{"id": "revision", "state": "pending"}]
    run.emit({"type": FRAME_PROGRESS, "phase": "generating"})
    reason = None
    merged = None
    warnings: list[str] = []
    for attempt in range(1, MAX_ATTEMPTS + 1):
        run.parts[0].update({"state": "active", "attempt": attempt, "chars": 0})
        run.progress()
        system = ("You revise a world package for an interactive fiction engine. Answer with three sections, each "
                  "starting with a line '=== WORLD_YAML ===', '=== WORLD_MD ===', '=== WORLD_PACKAGE_YAML ===', and "
                  "holding UNCHANGED or only what changes (lists merge by id; {id, remove: true} removes an item).")
        user = [f"Instruction: {job['instruction']}", "Current world:\n" + yaml.safe_dump(current, allow_unicode=True, sort_keys=False)]
        if reason:
            user.append(f"The previous answer was rejected: {reason}. Answer again.")
        context = {"plugin_id": SCRIPTED_ID, "plugin_root": str(SCRIPTED_ROOT), "is_story": False, "runtime_id": "worldgen",
                   "locale": job["locale"], "worldgen": {"part": "revision", "instruction": job["instruction"],
                                                         "locale": job["locale"], "current": copy.deepcopy(current)}}
        request = ModelRequest(messages=[{"role": "system", "content": system}, {"role": "user", "content": "\n\n".join(user)}],
                               context=context)
        chunks: list[str] = []
        response = None
        try:
            for item in run.router.stream(run.slot, run.model, request):
                if isinstance(item, TextDelta):
                    chunks.append(item.text)
                    run.parts[0]["chars"] += len(item.text)
                elif isinstance(item, ModelResponse):
                    response = item
        except ModelError as exc:
            run.parts[0]["state"] = "failed"
            if exc.code == "idle_timeout":
                _fail(run, f"The model sent nothing for {job['idleTimeoutMs']} ms", "model_idle_timeout")
            else:
                _fail(run, "The model request failed; check the model configuration or the server log")
            return
        if response is not None:
            run.has_usage = True
            run.usage["inputTokens"] += response.usage.input_tokens
            run.usage["outputTokens"] += response.usage.output_tokens
            run.usage["requests"] += 1
        text = response.text if response is not None and response.text else "".join(chunks)
        try:
            warnings = []
            merged = revision_merge(current, text, warnings)
            break
        except _Invalid as exc:
            reason = str(exc)
            logger.info("revise %s: attempt %s rejected: %s", run.id, attempt, reason)
    if merged is None:
        run.parts[0]["state"] = "failed"
        run.progress()
        _fail(run, f"The revision failed validation: {reason}")
        return
    run.parts[0]["state"] = "done"
    run.progress()
    run.emit({"type": FRAME_PROGRESS, "phase": "validating"})
    run.emit({"type": FRAME_PROGRESS, "phase": "saving"})
    with _publish_lock:
        world, failure = _publish(job, merged)
    if failure:
        _fail(run, failure)
        return
    frame: dict[str, Any] = {"type": FRAME_DONE, "world": world}
    if warnings:
        frame["warnings"] = warnings
    if run.usage_out():
        frame["usage"] = run.usage_out()
    run.emit(frame, status=WorldGeneration.STATUS_DONE, world_id=job["worldId"])


def _publish(job: dict[str, Any], merged: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    from jobs.worldgen import _record_metadata, _staging_write
    from sessions import world_selectors
    from sessions.models import World

    manifest = merged["manifest"]
    content = {"characters": merged["characters"], "lorebook": merged["lorebook"], "rules": merged["rules"]}
    contracts = {c: v["data"] for c, v in merged["contracts"].items() if v.get("data") is not None}
    catalog = {c: {"source": v["source"]} for c, v in merged["contracts"].items()}
    gen_job = {"locale": job["locale"], "brief": {"pack": (manifest.get("pluginPolicy") or {}).get("presetId")}}
    if not gen_job["brief"]["pack"]:
        gen_job["brief"].pop("pack")
    staging = _staging_write(manifest=manifest, lore=merged["lore"], content=content, contracts=contracts,
                             catalog=catalog, job=gen_job)
    try:
        package = wp.world_package_load(staging, source=wp.SOURCE_USER, expected_id=job["worldId"])
        if not package.ok:
            errors = [f"{i.file or ''}: {i.message}" for i in package.issues if i.severity == "error"]
            return {}, "The revised world package is invalid: " + "; ".join(errors[:3])
        if job["target"] == "browser":
            record = package.record()
            return {**record, "metadata": {**job["world"]["metadata"], **_record_metadata(package),
                                           "storage": job["world"]["metadata"].get("storage")}}, None
        if job["target"] == "store":
            with transaction.atomic():
                row = World.objects.select_for_update().filter(pk=job["worldId"]).first()
                if row is None or row.state == World.STATE_DELETING or \
                        world_selectors.row_record(row)["updatedAt"] != job["updatedAt"]:
                    return {}, "The world was edited, deleted or replaced during the revision; reload it and try again"
                meta = {**row.metadata, **{k: v for k, v in _record_metadata(package).items()
                                           if k in ("dimensions", "embeddedCharacters", "embeddedLorebook", "tags")}}
                row.name, row.metadata = package.name, meta
                row.package = {**(row.package or {}), "description": package.summary, "lore": package.lore}
                row.save()
            return world_selectors.row_record(row), None
        root = Path(job["identity"]["root"])
        with transaction.atomic():
            row = World.objects.select_for_update().filter(pk=job["worldId"]).first()
            deleting = row is not None and row.state == World.STATE_DELETING
        if deleting or not (root / wp.WORLD_FILE).is_file() or _identity(root) != job["identity"]:
            return {}, "The world was edited, deleted or replaced during the revision; reload it and try again"
        changes = package_changes(root)
        if changes is None or changes["added"] or changes["changed"]:
            return {}, "The generated package has files added or changed by hand; reload it and try again"
        backup = root.parent / f".covel-replaced-{uuid.uuid4().hex[:12]}"
        backup.mkdir()
        root.rename(backup / "package")  # the old package stays until the new one is in place
        try:
            staging.rename(root)
        except OSError:
            try:
                (backup / "package").rename(root)
            except OSError:
                return {}, f"Publishing failed and the old package could not be restored; it is kept at {backup / 'package'}"
            shutil.rmtree(backup, ignore_errors=True)
            return {}, "Publishing the revised package failed; the old package was restored"
        shutil.rmtree(backup, ignore_errors=True)
        view = world_selectors.world_get(job["worldId"])
        record = copy.deepcopy(view.record)
        record["metadata"].update({"generated": True})
        return record, None
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
