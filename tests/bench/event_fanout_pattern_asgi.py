"""Anchor of tests/bench/event_fanout.py (no tests here): covel's ASGI application plus the event-bus
listener as it was before issue 18 — one ``PSUBSCRIBE covel:*`` per process that decodes every
message of the deployment and hands it to ``eventbus.dispatch_local`` (which drops it when this
process has no subscriber of the channel). Served by daphne as
``tests.bench.event_fanout_pattern_asgi:application`` beside a plain ``covel.asgi:application`` so
both cost figures come from the same run.
"""
from __future__ import annotations

import json
import threading

from covel.asgi import application  # noqa: F401  (what daphne serves)
from covel import eventbus


def _pattern_listener(url: str) -> None:
    import redis

    client = redis.Redis.from_url(url, socket_connect_timeout=2, socket_keepalive=True)
    pubsub = client.pubsub(ignore_subscribe_messages=True)
    pubsub.psubscribe(eventbus._PREFIX + "*")
    for raw in pubsub.listen():  # the old covel.eventbus._listen loop body
        if raw.get("type") != "pmessage":
            continue
        channel = raw["channel"].decode() if isinstance(raw["channel"], bytes) else raw["channel"]
        try:
            message = json.loads(raw["data"])
        except ValueError:
            continue
        eventbus.dispatch_local(channel[len(eventbus._PREFIX):], message)


def _start() -> None:
    from django.conf import settings

    threading.Thread(target=_pattern_listener, args=(settings.REDIS_URL,), name="bench-psubscribe", daemon=True).start()


_start()
