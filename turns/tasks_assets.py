"""The asset generation task (queue ``media``: routed by its ``media.*`` name; see turns/assets.py).
It lives in the turns app because it appends session events and reads the model slots, which the
media app (below turns) cannot import."""
from __future__ import annotations

from celery import shared_task

from turns import assets


@shared_task(name=assets.TASK_GENERATE_ASSET, ignore_result=False)
def generate_asset(job: dict) -> str:
    """Generate one ``asset.generate`` job's image and publish it (turns.assets.asset_job_run)."""
    return assets.asset_job_run(job)
