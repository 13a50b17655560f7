"""Celery tasks of the turns app (queue ``turns``). Each takes ids only and calls a service.

Task states tell the truth (Flower, ``covel_celery_tasks_total``): an execution that ended failed,
interrupted or rejected ends its task with ``TurnFailed`` (an expected error: logged without a
traceback, acknowledged like any failure — CELERY_TASK_ACKS_ON_FAILURE_OR_TIMEOUT — and never
retried, since the outcome is already recorded and streamed). A redelivered task that finds the
execution claimed, a committed or aborted turn, and a turn put back in the queue by a warm
shutdown succeed.
"""
from __future__ import annotations

from celery import shared_task

from covel.taskqueue import TASK_RUN_EXECUTION
from turns import services
from turns.models import Execution

#: Execution statuses whose task ends as failed.
FAILED_STATUSES = (Execution.STATUS_FAILED, Execution.STATUS_INTERRUPTED, Execution.STATUS_REJECTED)


class TurnFailed(Exception):
    """The execution ran (or was refused) and did not commit; its status is in the message."""


@shared_task(name=TASK_RUN_EXECUTION, bind=True, acks_late=True, ignore_result=True, throws=(TurnFailed,))
def run_execution(self, execution_id: str) -> str | None:
    """Run one execution. Safe to deliver twice: the service claims the row and a second
    delivery finds it claimed and exits (spec 004 §Turn 执行; ARCHITECTURE step 3).
    Returns the final status; raises TurnFailed when it is failed / interrupted / rejected."""
    status = services.execution_task_run(execution_id, hostname=self.request.hostname or "")
    if status in FAILED_STATUSES:
        raise TurnFailed(f"execution {execution_id} {status}")
    return status


@shared_task(name="turns.release_suspension_claims", ignore_result=True)
def release_suspension_claims() -> None:
    """Embedded start-up: give back the resume claims a killed previous run left (turns.suspensions)."""
    from turns.suspensions import suspension_claims_release_all

    suspension_claims_release_all()


@shared_task(name="turns.reap_executions", ignore_result=True)
def reap_executions() -> int:
    """Mark executions whose worker died as interrupted (run periodically by beat)."""
    return services.executions_reap()


@shared_task(name="turns.resend_executions", ignore_result=True)
def resend_executions() -> int:
    """Send again, once, the task of executions still queued after COVEL_EXECUTION_RESEND_AFTER_SECONDS
    (their message was lost; run periodically by beat). A duplicate delivery exits at the claim."""
    return services.executions_resend()
