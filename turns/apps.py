from django.apps import AppConfig


class TurnsConfig(AppConfig):
    name = "turns"
    label = "turns"
    # JSON fields that may mention media ids (see media.selectors.media_reference_tables).
    media_reference_fields = {"RuntimeOutput": ("output",), "TraceEvent": ("payload",), "TurnResult": ("summary",)}

    def ready(self) -> None:
        # Before any connection: bulk inserts of trace rows and frames (JSON arrays) escape at C
        # speed on PostgreSQL (covel.pgadapt, issue 18).
        from covel.pgadapt import install as pg_adapters_install

        pg_adapters_install()
        # Registers this app's task names, which services send by name (covel.taskqueue).
        from turns import tasks  # noqa: F401
        # ctx.media of function runtimes stores through this port (the engine does not import media).
        from media.services import media_put
        from turns.engine import ports

        ports.media_put_install(media_put)
        # asset.generate requests become media generation jobs (queue media; turns/assets.py).
        from turns import assets, tasks_assets  # noqa: F401

        ports.asset_generation_stage_install(assets.asset_job_stage)
        from sessions.ports import session_deleted_install
        from turns.browser_workspace import workspace_release

        # A deleted session's browser-private revision, head and replay cache go with it.
        session_deleted_install(workspace_release)
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
