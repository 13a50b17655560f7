"""POST /api/worlds/:id/translate (spec 004 世界管理, 生成的世界文件, 世界数据的语言覆盖): add a
locale to a world package in the user worlds directory with the configured model.

The request is checked before the stream (400 locale / idleTimeoutMs, 404 world_not_found, 409
world_not_translatable, world_already_translated, world_deleting); the work runs as the same
``worldgen.generate_world`` task as a generation (a ``WorldGeneration`` row whose request has
``operation: "translate"``), so the frames reach the client through the same relay in both shapes.

Steps, one model request each (progress ``{step, done, total}``): ``glossary`` (the names and terms,
so one name has one translation), ``names`` (name-like fields), ``texts`` (short texts), ``long
texts`` (WORLD.md and long fields). The model answers a JSON object mapping each key it was given to
its translation; an answer that is not JSON, lacks a key or changes a ``{{placeholder}}`` is
rejected for those keys. While the model runs nothing is locked or written. Publishing takes the
publish lock, checks the package is the one the request started from (path, world.yaml inode and
creation time), writes the locale files into a staged copy — world.<locale>.yaml, WORLD.<locale>.md,
<file>.<locale>.<ext> beside each translated data file (lists of objects keep their base ids, so a
reordered list never pairs a translation with another entry) — reloads it with the package loader,
then swaps the directory; a failure discards the copy and leaves the package as it was.
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
from sessions.worldpkg.files import locale_canonical

logger = logging.getLogger("covel.worldgen")

OPERATION = "translate"
NAME_FIELDS = ("name", "title", "displayName", "label")
TEXT_FIELDS = ("summary", "description", "content", "hint", "updateRule", "openingScenario", "startingLocation")
LIST_FIELDS = ("aliases", "keys", "openingChoices")
LONG_TEXT_CHARS = 600
STEPS = ("glossary", "names", "texts", "long texts")
_PLACEHOLDER_RE = re.compile(r"\{\{[^}]+\}\}")
TRANSLATABLE_SOURCES = (wp.SOURCE_USER, wp.SOURCE_GENERATED)
GENERATED_MARKER = ".covel-generated.json"


def _identity(root: Path) -> dict[str, Any]:
    stat = (root / wp.WORLD_FILE).stat()
    return {"root": str(root), "inode": stat.st_ino, "ctime": stat.st_ctime_ns}


def translate_request_parse(*, world_id: str, body: Any) -> dict[str, Any]:
    """Validate the body and the world before the stream; returns the generation request.

    Raises 400 (locale not a language tag, idleTimeoutMs outside 1000–1800000), 404
    world_not_found, 409 world_deleting / world_not_translatable / world_already_translated.
    """
    from jobs.worldgen import IDLE_TIMEOUT_DEFAULT_MS, IDLE_TIMEOUT_MAX_MS, IDLE_TIMEOUT_MIN_MS
    from sessions import world_selectors
    from sessions.errors import WorldDeleting, WorldNotFound

    if not isinstance(body, dict):
        raise ApiError(400, None, "body must be an object")
    locale = locale_canonical(body.get("locale"))
    if locale is None:
        raise ApiError(400, None, "locale must be a BCP 47 language tag such as ja-JP")
    idle = body.get("idleTimeoutMs", IDLE_TIMEOUT_DEFAULT_MS)
    if isinstance(idle, bool) or not isinstance(idle, int) or not IDLE_TIMEOUT_MIN_MS <= idle <= IDLE_TIMEOUT_MAX_MS:
        raise ApiError(400, None, "idleTimeoutMs must be an integer from 1000 to 1800000")
    view = world_selectors.world_get(world_id)
    if view is None:
        raise WorldNotFound(world_id)
    if view.is_deleting:
        raise WorldDeleting(world_id)
    package = view.package
    if package is None or package.source not in TRANSLATABLE_SOURCES:
        raise ApiError(409, "world_not_translatable", "Only world packages in the user worlds directory can be translated")
    if locale in package.supported_locales or not _texts(package):
        raise ApiError(409, "world_already_translated", f"The world has no missing text in {locale}")
    return {"operation": OPERATION, "worldId": world_id, "locale": locale, "idleTimeoutMs": idle,
            "model": body.get("model") if isinstance(body.get("model"), str) else "story",
            "concept": package.name, "brief": {"content": [], "contracts": []}, "identity": _identity(package.root)}


# ------------------------------------------------------------------------------ texts


def _walk(value: Any, path: str, out: dict[str, str]) -> None:
    """Collect translatable strings of a data file: key = JSON-pointer-like path."""
    if isinstance(value, dict):
        for key, item in value.items():
            sub = f"{path}/{key}"
            if key in NAME_FIELDS + TEXT_FIELDS and isinstance(item, str) and item.strip():
                out[sub] = item
            elif key in LIST_FIELDS and isinstance(item, list):
                for index, text in enumerate(item):
                    if isinstance(text, str) and text.strip():
                        out[f"{sub}/{index}"] = text
            elif isinstance(item, (dict, list)):
                _walk(item, sub, out)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _walk(item, f"{path}/{index}", out)


def _texts(package: wp.WorldPackage) -> dict[str, str]:
    """Every text of the package that the target locale lacks: ``{key: source text}``. Keys:
    ``world.yaml/name``, ``WORLD.md``, ``<data file rel>/<path>``."""
    texts: dict[str, str] = {}
    if package.name:
        texts["world.yaml/name"] = package.name
    if package.summary:
        texts["world.yaml/summary"] = package.summary
    if package.lore:
        texts[wp.LORE_FILE] = package.lore
    for rel, content in sorted(package.data_files.items()):
        if rel.startswith("media/"):
            continue
        _walk(content, rel, texts)
    return texts


def _step_of(key: str, text: str) -> str:
    if key == wp.LORE_FILE or len(text) > LONG_TEXT_CHARS:
        return "long texts"
    leaf = key.rsplit("/", 2)
    if leaf[-1] in NAME_FIELDS or (len(leaf) > 1 and leaf[-2] == "aliases"):
        return "names"
    return "texts"


def _set(target: Any, parts: list[str], value: str) -> None:
    node = target
    for part in parts[:-1]:
        node = node[int(part)] if isinstance(node, list) else node[part]
    last = parts[-1]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value


def _overlay(base: Any, translated: dict[str, str]) -> Any:
    """The overlay file of one data file: the base with its translated strings replaced, other
    strings untouched (so every list keeps its ids and order)."""
    out = copy.deepcopy(base)
    for path, text in translated.items():
        _set(out, [p for p in path.split("/") if p != ""], text)
    return out


# ------------------------------------------------------------------------------ run


def _ask(run, step: str, batch: dict[str, str], glossary: dict[str, str]) -> dict[str, str]:
    """One model request for ``batch``; returns the accepted translations (others are left out)."""
    from turns.engine.providers.base import ModelError, ModelRequest, ModelResponse, TextDelta
    from jobs.worldgen import SCRIPTED_ID, SCRIPTED_ROOT, _IdleTimeout, _structured, _Invalid

    locale = run.job["locale"]
    system = (f"You translate parts of a world package for an interactive fiction engine into {locale}. Answer with one "
              "JSON object mapping every given key to its translation. Keep {{placeholders}} exactly. Use the glossary.")
    user = f"Step: {step}\nGlossary: {json.dumps(glossary, ensure_ascii=False)}\nTexts: {json.dumps(batch, ensure_ascii=False)}"
    context = {"plugin_id": SCRIPTED_ID, "plugin_root": str(SCRIPTED_ROOT), "is_story": False, "runtime_id": "worldgen",
               "locale": locale, "worldgen": {"part": "translate", "step": step, "locale": locale, "texts": batch,
                                              "glossary": glossary}}
    request = ModelRequest(messages=[{"role": "system", "content": system}, {"role": "user", "content": user}], context=context)
    chunks: list[str] = []
    response = None
    try:
        for item in run.router.stream(run.slot, run.model, request):
            if isinstance(item, TextDelta):
                chunks.append(item.text)
            elif isinstance(item, ModelResponse):
                response = item
    except ModelError as exc:
        if exc.code == "idle_timeout":
            raise _IdleTimeout(exc.message) from None
        raise
    if response is not None:
        run.has_usage = True
        run.usage["inputTokens"] += response.usage.input_tokens
        run.usage["outputTokens"] += response.usage.output_tokens
        run.usage["requests"] += 1
    text = response.text if response is not None and response.text else "".join(chunks)
    try:
        answer = _structured(text)
    except _Invalid:
        run.rejections.append("the reply is not JSON")
        return {}
    if not isinstance(answer, dict):
        run.rejections.append("the reply is not JSON")
        return {}
    accepted = {}
    for key, source in batch.items():
        value = answer.get(key)
        if not isinstance(value, str) or not value.strip():
            run.rejections.append("no translation")
        elif sorted(_PLACEHOLDER_RE.findall(value)) != sorted(_PLACEHOLDER_RE.findall(source)):
            run.rejections.append("a placeholder was changed")
        else:
            accepted[key] = value
    return accepted


def translate_run(run) -> None:
    """The task body of a translation (``run``: jobs.worldgen._Run over the generation row)."""
    from jobs.worldgen import FRAME_DONE, FRAME_PROGRESS, _IdleTimeout, _fail, _publish_lock
    from turns.engine.providers.base import ModelError
    from sessions import world_selectors

    job = run.job
    run.rejections = []
    view = world_selectors.world_get(job["worldId"])
    if view is None or view.package is None:
        _fail(run, "The world was deleted or replaced; reload it and translate again")
        return
    package = view.package
    texts = _texts(package)
    total = len(texts)
    by_step: dict[str, dict[str, str]] = {step: {} for step in STEPS}
    for key, text in texts.items():
        by_step[_step_of(key, text)][key] = text
    names = {k: v for k, v in by_step["names"].items()}
    translated: dict[str, str] = {}
    glossary: dict[str, str] = {}
    try:
        done = 0
        for step in STEPS:
            run.emit({"type": FRAME_PROGRESS, "step": step, "done": done, "total": total})
            if step == "glossary":
                terms = dict(list({v: v for v in names.values()}.items())[:200])
                glossary = _ask(run, step, terms, {}) if terms else {}
                continue
            batch = by_step[step]
            if not batch:
                continue
            # The glossary fixes each name: a name translated there is not asked again.
            fixed = {k: glossary[v] for k, v in batch.items() if v in glossary}
            asked = {k: v for k, v in batch.items() if k not in fixed}
            translated.update(fixed)
            if asked:
                translated.update(_ask(run, step, asked, glossary))
            done += len(batch)
        run.emit({"type": FRAME_PROGRESS, "step": "long texts", "done": total, "total": total})
    except _IdleTimeout as exc:
        _fail(run, f"The model sent nothing for {job['idleTimeoutMs']} ms: {exc}", "model_idle_timeout")
        return
    except ModelError as exc:
        logger.warning("translate %s: model error %s: %s", run.id, exc.code, exc.message)
        _fail(run, "The model request failed; check the model configuration or the server log")
        return
    if not translated:
        _fail(run, (run.rejections or ["no translation"])[0])
        return
    with _publish_lock:
        record, failure = _publish(job, package, translated)
    if failure:
        _fail(run, failure)
        return
    frame = {"type": FRAME_DONE, "world": record, "total": total, "translated": len(translated),
             "failed": total - len(translated)}
    if run.usage_out():
        frame["usage"] = run.usage_out()
    run.emit(frame, status=WorldGeneration.STATUS_DONE, world_id=job["worldId"])


def _files(package: wp.WorldPackage, locale: str, translated: dict[str, str]) -> dict[str, str]:
    files: dict[str, str] = {}
    overlay: dict[str, Any] = {}
    if "world.yaml/name" in translated:
        overlay["name"] = translated["world.yaml/name"]
    if "world.yaml/summary" in translated:
        overlay["summary"] = translated["world.yaml/summary"]
    if wp.LORE_FILE in translated:
        files[f"WORLD.{locale}.md"] = translated[wp.LORE_FILE].rstrip("\n") + "\n"
    # Either file gives the world this locale; write an empty world.<locale>.yaml when neither has text.
    if overlay or f"WORLD.{locale}.md" not in files:
        files[f"world.{locale}.yaml"] = yaml.safe_dump(overlay, allow_unicode=True, sort_keys=False) if overlay else "{}\n"
    per_file: dict[str, dict[str, str]] = {}
    for key, text in translated.items():
        if key.startswith(("world.yaml/", wp.LORE_FILE)):
            continue
        rel = next((r for r in package.data_files if key.startswith(r + "/")), None)
        if rel is not None:
            per_file.setdefault(rel, {})[key[len(rel):]] = text
    for rel, strings in per_file.items():
        stem, dot, ext = rel.rpartition(".")
        content = _overlay(package.data_files[rel], strings)
        files[f"{stem}.{locale}.{ext}"] = (json.dumps(content, ensure_ascii=False, indent=2) + "\n") if ext == "json" else \
            yaml.safe_dump(content, allow_unicode=True, sort_keys=False)
    return files


def _publish(job: dict[str, Any], package: wp.WorldPackage, translated: dict[str, str]) -> tuple[dict[str, Any], str | None]:
    """Stage, check and swap the package (module docstring). Returns (WorldRecord, failure or None)."""
    from sessions import world_selectors
    from sessions.models import World

    locale = job["locale"]
    root = package.root
    identity = job.get("identity") or {}
    with transaction.atomic():
        row = World.objects.select_for_update().filter(pk=job["worldId"]).first()
        if row is not None and row.state == World.STATE_DELETING:
            return {}, "The world is being deleted"
    if not root.is_dir() or not (root / wp.WORLD_FILE).is_file() or _identity(root) != identity:
        return {}, "The world was deleted or replaced while it was translated; reload it and translate again"
    staging = root.parent / f".covel-staging-{uuid.uuid4().hex[:12]}"
    replaced = root.parent / f".covel-replaced-{uuid.uuid4().hex[:12]}"
    try:
        shutil.copytree(root, staging, symlinks=True)
        files = _files(package, locale, translated)
        for rel, text in files.items():
            target = staging / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
        marker_path = staging / GENERATED_MARKER
        if marker_path.is_file():  # the app's own translations stay revisable
            marker = json.loads(marker_path.read_text(encoding="utf-8"))
            if isinstance(marker.get("files"), dict):
                marker["files"].update({rel: "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()
                                        for rel, text in files.items()})
                marker_path.write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")
        check = wp.world_package_load(staging, source=package.source, expected_id=package.id)
        if not check.ok or locale not in check.supported_locales:
            errors = [f"{i.file or ''}: {i.message}" for i in check.issues if i.severity == "error"]
            shutil.rmtree(staging, ignore_errors=True)
            return {}, "The translated package does not load: " + ("; ".join(errors[:3]) or f"no {locale} version")
        root.rename(replaced)
        try:
            staging.rename(root)
        except OSError:
            replaced.rename(root)
            raise
        shutil.rmtree(replaced, ignore_errors=True)
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        logger.exception("translate %s: publishing failed", job["worldId"])
        return {}, f"Writing the language files failed: {exc.strerror or exc}"
    view = world_selectors.world_get(job["worldId"])
    return (view.record if view is not None else {}), None
