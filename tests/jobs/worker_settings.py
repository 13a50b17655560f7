"""Settings of the Celery worker processes the hosted runtime-job tests start: the hosted shape with
every ``turns.*`` and ``jobs.*`` task routed to the test's private queue (``COVEL_TEST_QUEUE``), so
a job a worker sends again (warm shutdown) reaches the next test worker and no one else's."""
import os

from covel.settings.hosted import *  # noqa: F401,F403
from covel.settings.hosted import CELERY_TASK_ROUTES

_queue = {"queue": os.environ["COVEL_TEST_QUEUE"]}
CELERY_TASK_ROUTES = {**CELERY_TASK_ROUTES, "turns.*": _queue, "jobs.*": _queue}
# As the test process (covel.settings.test_hosted): the scripted server services may run jobs.
COVEL_CAN_RUN_RUNTIME_JOB_WITH_SERVER_SERVICES = os.environ.get("COVEL_CAN_RUN_RUNTIME_JOB_WITH_SERVER_SERVICES", "1") == "1"
