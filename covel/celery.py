"""The Celery app. Hosted: Redis broker, workers per queue (turns, jobs, media, worldgen).

Embedded: the same tasks run on the in-process worker (``covel.inprocess``) — every task class
derives from ``InProcessAwareTask``, so ``delay``/``delay_on_commit`` stay the one way to schedule.
"""
import os

from celery import Celery

from covel.settings import default_settings_module

os.environ.setdefault("DJANGO_SETTINGS_MODULE", default_settings_module())

app = Celery("covel", task_cls="covel.inprocess:InProcessAwareTask")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
