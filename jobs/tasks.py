"""Celery tasks of the jobs app. Each takes ids only and calls a service."""
from __future__ import annotations

from celery import shared_task

from jobs import worldgen


@shared_task(name="worldgen.generate_world", acks_late=True, ignore_result=True)
def generate_world(generation_id: str) -> None:
    """Run one AI world generation (queue ``worldgen``). Safe to deliver twice: the service claims
    the queued row and a second delivery finds it claimed and exits."""
    worldgen.generation_run(generation_id)
