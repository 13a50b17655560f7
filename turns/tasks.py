"""Celery tasks of the turns app (queue ``turns``). Each takes ids only and calls a service."""
from __future__ import annotations

from celery import shared_task

from covel.taskqueue import TASK_RUN_EXECUTION
from turns import services


@shared_task(name=TASK_RUN_EXECUTION, acks_late=True, ignore_result=True)
def run_execution(execution_id: str) -> None:
    """Run one execution. Safe to deliver twice: the service claims the row and a second
    delivery finds it claimed and exits (spec 004 §Turn 执行; ARCHITECTURE step 3)."""
    services.execution_task_run(execution_id)


@shared_task(name="turns.reap_executions", ignore_result=True)
def reap_executions() -> int:
    """Mark executions whose worker died as interrupted (run periodically by beat)."""
    return services.executions_reap()


@shared_task(name="turns.resend_executions", ignore_result=True)
def resend_executions() -> int:
    """Send again, once, the task of executions still queued after COVEL_EXECUTION_RESEND_AFTER_SECONDS
    (their message was lost; run periodically by beat). A duplicate delivery exits at the claim."""
    return services.executions_resend()
