"""Scheduling Celery tasks by their registered name.

Services schedule their app's tasks through these instead of importing the task functions, because
each ``tasks.py`` imports its ``services.py`` (a task is a doorway into a service, STYLE.md): a name
lookup keeps that one-way. Task names are the wire constants in each app's ``tasks.py``; every app
imports its tasks module in ``AppConfig.ready`` so the name is registered in every process (web,
worker, in-process worker).
"""
from __future__ import annotations

from typing import Any

from celery import current_app

# Names of the tasks services send (routing by prefix: covel.settings.base CELERY_TASK_ROUTES).
TASK_RUN_EXECUTION = "turns.run_execution"
TASK_RUN_RUNTIME_JOB = "jobs.run_runtime_job"
TASK_GENERATE_WORLD = "worldgen.generate_world"
TASK_MEMORY_INDEX_REBUILD = "jobs.memory_index_rebuild"
TASK_MEMORY_INDEX_UPDATE = "jobs.memory_index_update"


def task_send(name: str, *args: Any) -> None:
    """Send task ``name`` now (a broker message, or the in-process pool). KeyError if not registered."""
    current_app.tasks[name].delay(*args)


def task_send_on_commit(name: str, *args: Any) -> None:
    """Send task ``name`` once the current transaction commits (at once outside a transaction), so a
    worker never reads a row that does not exist yet."""
    current_app.tasks[name].delay_on_commit(*args)
