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
