from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "jobs"
    label = "jobs"

    def ready(self) -> None:
        # Registers this app's task names, which services send by name (covel.taskqueue).
        from jobs import tasks  # noqa: F401
        from jobs.services import runtime_jobs_enqueue
        from turns.engine.ports import runtime_jobs_stage_install

        # The turn engine writes a turn's runtime jobs through this port (turns.engine.ports).
        runtime_jobs_stage_install(runtime_jobs_enqueue)

        from jobs.config_services import TRUST_SOURCES, server_setting_value
        from jobs.selectors import runtime_jobs_queued_count
        from plugins_app.trust import trusted_sources_install
        from turns.engine.ports import runtime_jobs_queued_count_install

        # plugin-rpc refuses a background run when the session's queue is full (429 background_queue_full).
        runtime_jobs_queued_count_install(runtime_jobs_queued_count)
        # Community plugins whose install source is in trust.sources skip the code approvals.
        trusted_sources_install(lambda: server_setting_value(TRUST_SOURCES))

        from jobs.model_db import model_capability_cached
        from turns.engine.ports import model_capability_install

        # The agent loop reads a slot model's capabilities (tools, context window) from the model DB.
        model_capability_install(model_capability_cached)
