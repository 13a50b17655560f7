"""Whose model credentials a runtime job runs with, and whether it can run at all (spec 004 §Staged
Runtime 后台作业 — §后台作业用谁的模型凭据, §“能不能跑”是怎么判断的; §重启与凭证).

- Held source credentials. The request a job came from (the turn that staged it, a plugin-rpc
  background run, or a later request of the session that offered its keys) leaves its
  ``X-Provider-Keys`` and model routing for the job's worker, never in the job row: in the
  transient holder of ``turns.control`` under ``job:<jobId>`` (process memory embedded, encrypted in
  Redis with a TTL hosted) for ``job_credentials_wait_seconds`` — the job's ``maxQueueMs`` when it
  declares one, else the 5-minute default (PROVIDER_KEYS_TTL_SECONDS). The worker holds them in
  memory while the job runs (and keeps them for the next worker when a warm shutdown requeues it).
- Runnability (``job_model_services``). The check resolves the job's model exactly as its run
  will (``slot_for_runtime``: request model > runtimeModelOverrides > the runtime's agent model >
  the plugin slot, with the slot's fallbacks) and asks whether a call on it would carry a key
  (``ModelRouter.key_for``: the request's key for the slot's provider, or the server's
  ``{PROVIDER}_API_KEY`` for an operator slot whose origin is trusted):
  1. with held source credentials: that request's configuration (its X-Slot-Config bindings
     and presets) and keys;
  2. else the server's own configuration only (other requests that happen to wake the worker do
     not count);
  3. else only when the host confirmed its own services (COVEL_CAN_RUN_RUNTIME_JOB_WITH_SERVER_SERVICES,
     the spec's canRunRuntimeJobWithServerServices; the embedded shape does).
  A default adapter is not a credential: the offline ``scripted`` provider and a local endpoint
  without a key count only under that confirmation. A function runtime is checked like an agent
  (nobody can prove it will not call a model). Not runnable → the job stays ``queued``: the
  re-sender tries again every COVEL_JOB_REQUEUE_AFTER_SECONDS, a request with keys offers them
  (``jobs_credentials_offered``), and ``maxQueueMs`` still times it out.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from covel.credentials import RequestCredentials
from jobs.models import RuntimeJob
from turns import control
from turns.engine.providers.config import ModelConfigError, ModelRouter, model_config_active, slot_for_runtime
from turns.engine.providers.routing import SlotRoutingError, request_model_router

logger = logging.getLogger("covel.jobs")

HOLDER_PREFIX = "job:"
SOURCE_REQUEST = "source-request"
SERVER = "server"
SERVER_CONFIRMED = "server-confirmed"


@dataclass(frozen=True)
class ModelServices:
    """What a runnable job runs with: ``router`` (its model router), ``credentials`` (the held
    request credentials, None for the server's own), ``source`` (SOURCE_REQUEST, SERVER or
    SERVER_CONFIRMED)."""

    router: ModelRouter
    credentials: RequestCredentials | None
    source: str


def _holder(job_id: str) -> str:
    return HOLDER_PREFIX + str(job_id)


def job_credentials_wait_seconds(job: RuntimeJob) -> float:
    """How long a job's source credentials are held: its ``maxQueueMs`` when declared, else the
    5-minute default (spec 004: 默认最多等 5 分钟；声明了排队期限（maxQueueMs）的作业按那个期限等)."""
    max_queue_ms = ((job.payload or {}).get("completion") or {}).get("maxQueueMs")
    if isinstance(max_queue_ms, int) and max_queue_ms > 0:
        return max(1.0, max_queue_ms / 1000)
    return float(control.PROVIDER_KEYS_TTL_SECONDS)


def job_credentials_hold(job: RuntimeJob, credentials: RequestCredentials | None) -> bool:
    """Keep ``credentials`` for the worker that will run ``job`` (see module docstring); False
    (logged) when there is nothing to keep or the transient holder refused them."""
    if credentials is None or not credentials.keys:
        return False
    try:
        control.provider_keys_put(_holder(job.pk), credentials.keys, routing=credentials.routing,
                                  ttl_seconds=job_credentials_wait_seconds(job))
    except Exception as exc:
        logger.warning("runtime job %s: request credentials could not be kept (%s)", job.pk, exc.__class__.__name__)
        return False
    return True


def job_credentials_held(job_id: str) -> RequestCredentials | None:
    """The source credentials held for the job now (None when none or expired)."""
    context = control.request_context_peek(_holder(job_id))
    if context is None or not context.keys:
        return None
    return RequestCredentials(dict(context.keys), dict(context.routing))


def job_credentials_drop(job_id: str) -> None:
    """Forget the job's held credentials (it finished)."""
    control.provider_keys_discard(_holder(job_id))


def _has_key(router: ModelRouter, job: RuntimeJob, *, manifest_model: str | None, overrides: dict[str, Any]) -> bool:
    slot, _model = slot_for_runtime(config=router.config, runtime_id=job.runtime_id, is_story=False,
                                    request_model=(job.payload or {}).get("model") or None, overrides=overrides,
                                    manifest_model=manifest_model)
    seen: set[str] = set()
    while slot is not None and slot.name not in seen:
        seen.add(slot.name)
        if router.key_for(slot) is not None:
            return True
        slot = router.config.slot(slot.fallback) if slot.fallback else None
    return False


def _manifest_model(job: RuntimeJob, plugin_registry: Any) -> str | None:
    from plugins_app.registry import plugin_registry as registry_default

    record = (plugin_registry or registry_default()).get(job.plugin_id)
    runtimes = record.manifest.runtimes if record is not None and record.manifest is not None else []
    runtime = next((r for r in runtimes if r.id == job.runtime_id), None)
    agent = getattr(runtime, "agent", None)
    return getattr(agent, "model", None) if agent is not None else None


def job_model_services(job: RuntimeJob, *, session=None, plugin_registry: Any = None) -> ModelServices | None:
    """The model services ``job`` may run with now, or None when it must stay queued (see module
    docstring). session: the job's ``sessions.models.Session`` (its runtimeModelOverrides), read
    when omitted. A model configuration that does not resolve counts as runnable: the run then
    reports the configuration error as the job's failure."""
    from sessions.models import Session

    config, _error = model_config_active(settings.COVEL_HOME, path=settings.COVEL_LLM_TOML)
    if session is None:
        session = Session.objects.filter(pk=job.session_id).first()
    overrides = (getattr(session, "metadata", None) or {}).get("runtimeModelOverrides") or {}
    overrides = overrides if isinstance(overrides, dict) else {}
    manifest_model = _manifest_model(job, plugin_registry)
    held = job_credentials_held(str(job.pk))
    if held is not None:
        try:
            router = request_model_router(config, provider_keys=held.keys, routing=held.routing)
            if _has_key(router, job, manifest_model=manifest_model, overrides=overrides):
                return ModelServices(router=router, credentials=held, source=SOURCE_REQUEST)
        except (SlotRoutingError, ModelConfigError):
            logger.info("runtime job %s: the source request's model routing no longer resolves", job.pk)
    server = ModelRouter(config)
    try:
        if _has_key(server, job, manifest_model=manifest_model, overrides=overrides):
            return ModelServices(router=server, credentials=None, source=SERVER)
    except ModelConfigError:
        return ModelServices(router=server, credentials=None, source=SERVER)
    if settings.COVEL_CAN_RUN_RUNTIME_JOB_WITH_SERVER_SERVICES:
        return ModelServices(router=server, credentials=None, source=SERVER_CONFIRMED)
    return None
