from django.apps import AppConfig


class TurnsConfig(AppConfig):
    name = "turns"
    label = "turns"
    # JSON fields that may mention media ids (see media.selectors.media_reference_tables).
    media_reference_fields = {"RuntimeOutput": ("output",), "TraceEvent": ("payload",), "TurnResult": ("summary",)}

    def ready(self) -> None:
        # Registers this app's task names, which services send by name (covel.taskqueue).
        from turns import tasks  # noqa: F401
        # ctx.media of function runtimes stores through this port (the engine does not import media).
        from media.services import media_put
        from turns.engine import ports

        ports.media_put_install(media_put)
        # asset.generate requests become media generation jobs (queue media; turns/assets.py).
        from turns import assets, tasks_assets  # noqa: F401

        ports.asset_generation_stage_install(assets.asset_job_stage)
        # POST /api/actions retries pending dimension settlements before a player turn.
        from turns.settlement_retry import pending_settlements_retry

        ports.settlements_retry_install(pending_settlements_retry)
        # GET /api/health reports the memory index's real vector driver (covel cannot import turns).
        from covel.health import vector_status_install
        from turns.engine.memory_index import vector_status

        vector_status_install(vector_status)
        # World authoring (sessions.world_data_sync) tells sessions through the event log.
        from sessions.world_data_sync import world_event_emit_install
        from turns.events import NewEvent, session_events_append

        world_event_emit_install(lambda sid, kind, topic, payload: session_events_append(
            sid, [NewEvent(type=kind, topic=topic, payload=payload)]))
