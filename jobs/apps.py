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

        from jobs.services import runtime_jobs_settle_wait
        from turns.engine.ports import runtime_jobs_settle_wait_install

        # An execution waits for the session's detached `settle` jobs (memory extraction) first.
        runtime_jobs_settle_wait_install(runtime_jobs_settle_wait)

        from jobs.services import memory_index_update_schedule
        from turns.engine.ports import memory_index_changed_install

        # Every commit (turn or runtime job) sends the memory index update after it commits.
        memory_index_changed_install(memory_index_update_schedule)

        from jobs.config_services import TRUST_SOURCES, server_setting_value
        from jobs.selectors import runtime_jobs_queued_count
        from jobs.selectors import runtime_jobs_unfinished as selectors_unfinished
        from plugins_app.trust import trusted_sources_install
        from turns.engine.ports import runtime_jobs_queued_count_install

        # plugin-rpc refuses a background run when the session's queue is full (429 background_queue_full).
        runtime_jobs_queued_count_install(runtime_jobs_queued_count)
        from turns.engine.ports import runtime_jobs_unfinished_count_install

        # A browser checkpoint upload keeps the server's jobs when the session has unfinished ones.
        runtime_jobs_unfinished_count_install(lambda session_id: len(selectors_unfinished(session_id)))
        # Community plugins whose install source is in trust.sources skip the code approvals.
        trusted_sources_install(lambda: server_setting_value(TRUST_SOURCES))

        from jobs.model_db import model_capability_cached
        from turns.engine.ports import model_capability_install

        # The agent loop reads a slot model's capabilities (tools, context window) from the model DB.
        model_capability_install(model_capability_cached)

        from jobs.services import session_jobs_drain
        from sessions.ports import session_jobs_drain_install

        # Session DELETE waits for the session's running runtime jobs before it removes the rows.
        session_jobs_drain_install(session_jobs_drain)

        from covel.credentials import credentials_offer_subscribe
        from covel.metrics import scrape_collector_install
        from covel.workers import queue_consumers_metrics
        from jobs.services import jobs_credentials_offered
        from jobs.selectors import background_metrics

        # Queued jobs waiting for credentials take them from the session's next request with keys.
        credentials_offer_subscribe(jobs_credentials_offered)
        # GET /metrics reads queue depths, oldest-queued ages and status counts at every scrape.
        scrape_collector_install(background_metrics)
        scrape_collector_install(queue_consumers_metrics)
