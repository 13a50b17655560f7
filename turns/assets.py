"""Asset generation jobs: what an ``asset.generate`` proposal without a ``ref`` starts (spec 000
§Proposal 类型 asset.generate; spec 004 §SSE 协议 asset.progress / asset.generated).

At commit (turns.engine.appliers.events) the proposal ``{kind, prompt, options?}`` becomes a job:
``asset_job_stage`` (installed as the engine's ``asset_generation_stage`` port) writes the job's
record ``_assets/<jobId>`` = ``{status: "queued", kind, prompt, options, runtimeId}`` in the
requesting plugin's data (a framework ``_`` namespace: the plugin reads it, only the framework
writes it) and an ``asset.progress`` event ``{jobId, progress: 0, status: "queued"}`` inside the
commit transaction, and sends the Celery task ``media.generate_asset`` (queue ``media``) once the
turn commits. The task (``asset_job_run``) calls the session's image provider slot — the ``image``
slot of llm.toml (``provider = "scripted"`` or any OpenAI-compatible provider with ``baseUrl`` and
``model``); without one, the offline scripted provider — stores the image with ``media_put`` (the
session's media reference) and, in one transaction, sets the record to ``{status: "done", ref}``
and appends ``asset.progress`` (100) and ``asset.generated`` ``{jobId, pluginId, runtimeId, kind,
prompt, ref}``. A failure sets ``{status: "failed", error: {code, message}}`` and appends
``asset.progress`` ``{status: "failed", error}``. The ref stays referenced by the plugin-data row
(media cleanup scans plugin_data).
"""
from __future__ import annotations

import logging
import uuid
from typing import Any

from django.conf import settings
from django.db import transaction

from covel import taskqueue
from turns.events import NewEvent, session_events_append

logger = logging.getLogger(__name__)

TASK_GENERATE_ASSET = "media.generate_asset"
ASSETS_NAMESPACE = "_assets"
IMAGE_SLOT = "image"
ASSET_PROGRESS = "asset.progress"
ASSET_GENERATED = "asset.generated"
TOPIC_MEDIA = "media"


def _record_write(session_id: str, plugin_id: str, job_id: str, value: dict[str, Any]) -> None:
    from plugins_app.models import PluginData

    PluginData.objects.update_or_create(session_id=session_id, plugin_id=plugin_id, namespace=ASSETS_NAMESPACE,
                                        key=job_id, defaults={"value": value})


def asset_job_stage(*, session: Any, plugin_id: str, runtime_id: str | None, turn_id: str, payload: dict[str, Any]) -> list[NewEvent]:
    """Stage one generation job inside the commit transaction; returns the events to append."""
    job_id = str(uuid.uuid4())
    record = {"status": "queued", "kind": payload.get("kind") or "image", "prompt": payload.get("prompt"),
              "options": payload.get("options") or {}, "runtimeId": runtime_id, "turnId": turn_id}
    _record_write(session.pk, plugin_id, job_id, record)
    job = {"jobId": job_id, "sessionId": session.pk, "pluginId": plugin_id, "runtimeId": runtime_id, "turnId": turn_id,
           "kind": record["kind"], "prompt": record["prompt"], "options": record["options"]}
    taskqueue.task_send_on_commit(TASK_GENERATE_ASSET, job)
    return [NewEvent(type=ASSET_PROGRESS, topic=TOPIC_MEDIA, turn_id=turn_id,
                     payload={"jobId": job_id, "pluginId": plugin_id, "runtimeId": runtime_id, "progress": 0, "status": "queued"})]


def image_provider() -> Any:
    """The image provider of the ``image`` slot in llm.toml (COVEL_LLM_TOML or COVEL_HOME/llm.toml;
    scripted when there is none)."""
    from media.generation import OpenAIImagesProvider, ScriptedImageProvider
    from turns.engine.providers.config import PROVIDER_SCRIPTED, model_config_active

    config, _error = model_config_active(settings.COVEL_HOME, path=getattr(settings, "COVEL_LLM_TOML", None))
    if not config.has_slot(IMAGE_SLOT):
        return ScriptedImageProvider()
    slot = config.slot(IMAGE_SLOT)
    if slot.provider == PROVIDER_SCRIPTED or not slot.endpoint:
        return ScriptedImageProvider()
    from turns.engine.providers.config import ModelRouter

    return OpenAIImagesProvider(base_url=slot.endpoint, model=slot.model, key=ModelRouter(config).key_for(slot),
                                name=slot.provider)


def asset_job_run(job: dict[str, Any]) -> str:
    """Run one generation job (the ``media.generate_asset`` task). Returns "done" or "failed"."""
    from media.errors import MediaInvalid
    from media.generation import ImageGenerationFailed, image_asset_generate

    session_id, plugin_id, job_id = job["sessionId"], job["pluginId"], job["jobId"]
    base = {"jobId": job_id, "pluginId": plugin_id, "runtimeId": job.get("runtimeId")}
    options = job.get("options") or {}
    try:
        if job.get("kind") not in (None, "image"):
            raise ImageGenerationFailed("unsupported", f"asset kind {job.get('kind')!r} has no generator on this server")
        provider = image_provider()
        ref = image_asset_generate(session_id=session_id, prompt=str(job.get("prompt") or ""), provider=provider,
                                   size=str(options.get("size") or "1024x1024"))
    except (ImageGenerationFailed, MediaInvalid) as exc:
        error = {"code": getattr(exc, "code", "failed"), "message": getattr(exc, "message", str(exc))}
        with transaction.atomic():
            _record_write(session_id, plugin_id, job_id, {"status": "failed", "kind": job.get("kind") or "image",
                                                          "prompt": job.get("prompt"), "error": error})
            session_events_append(session_id, [NewEvent(type=ASSET_PROGRESS, topic=TOPIC_MEDIA, turn_id=job.get("turnId") or "",
                                                        payload={**base, "progress": 100, "status": "failed", "error": error})])
        return "failed"
    meta = {"prompt": job.get("prompt"), "provider": provider.name, **({"model": provider.model} if getattr(provider, "model", "") else {})}
    with transaction.atomic():
        _record_write(session_id, plugin_id, job_id, {"status": "done", "kind": "image", "prompt": job.get("prompt"),
                                                      "ref": ref, "meta": meta})
        session_events_append(session_id, [
            NewEvent(type=ASSET_PROGRESS, topic=TOPIC_MEDIA, turn_id=job.get("turnId") or "",
                     payload={**base, "progress": 100, "status": "done"}),
            NewEvent(type=ASSET_GENERATED, topic=TOPIC_MEDIA, turn_id=job.get("turnId") or "",
                     payload={**base, "kind": "image", "modality": "image", "prompt": job.get("prompt"), "ref": ref, "meta": meta}),
        ])
    return "done"
