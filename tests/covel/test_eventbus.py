"""covel.eventbus: per-channel subscriptions (issue 18) — a process holds on Redis exactly the
channels it has subscribers for, and keeps the bus's guarantees (live on return, RESYNC after the
listener reconnects). Redis's own view (``PUBSUB NUMSUB``, ``CLIENT LIST``) is the witness."""
from __future__ import annotations

import os
import threading
import uuid

import pytest
from django.conf import settings

from covel import eventbus


def _channel() -> str:
    return f"session:test-bus-{uuid.uuid4().hex}"


def _redis():
    import redis

    return redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=3, socket_timeout=3)


def _numsub(client, channel: str) -> int:
    ((_, count),) = client.pubsub_numsub(eventbus._PREFIX + channel)
    return count


def _listener_entry(client) -> dict:
    name = f"{eventbus.LISTENER_CLIENT_NAME_PREFIX}{os.getpid()}"
    (entry,) = [e for e in client.client_list() if e.get("name") == name]
    return entry


class Inbox:
    """A subscriber callback that records messages and lets a test wait for the n-th one."""

    def __init__(self) -> None:
        self.messages: list[dict] = []
        self._cond = threading.Condition()

    def __call__(self, message: dict) -> None:
        with self._cond:
            self.messages.append(message)
            self._cond.notify_all()

    def wait(self, count: int, timeout: float = 5.0) -> list[dict]:
        with self._cond:
            self._cond.wait_for(lambda: len(self.messages) >= count, timeout)
            return list(self.messages)


@pytest.mark.hosted_only
def test_a_process_subscribes_exactly_the_channels_it_has_subscribers_for():
    client = _redis()
    watched, other = _channel(), _channel()
    inbox, foreign = Inbox(), Inbox()
    # given: two subscribers of one channel in this process
    first = eventbus.subscribe(watched, inbox)
    second = eventbus.subscribe(watched, foreign)
    try:
        # then: one plain SUBSCRIBE on Redis for it, no pattern, nothing for the other channel
        entry = _listener_entry(client)
        assert int(entry["psub"]) == 0
        assert _numsub(client, watched) == 1 and _numsub(client, other) == 0
        assert watched in eventbus.subscribed_channels()
        # when: the first leaves — the channel stays; the other subscriber still gets messages
        first()
        first()  # idempotent
        eventbus.publish(watched, {"seq": 1})
        assert foreign.wait(1) == [{"seq": 1}]
        assert _numsub(client, watched) == 1
    finally:
        second()
    # then: the last one leaving unsubscribes the channel on Redis
    for _ in range(50):
        if _numsub(client, watched) == 0:
            break
        threading.Event().wait(0.05)
    assert _numsub(client, watched) == 0
    assert watched not in eventbus.subscribed_channels()
    assert inbox.messages == []


@pytest.mark.hosted_only
def test_a_subscription_is_live_when_subscribe_returns():
    # given/when: fresh channels, each published to by another client right after subscribe returns
    client = _redis()
    inboxes, unsubscribes = [], []
    try:
        for _ in range(20):
            channel, inbox = _channel(), Inbox()
            unsubscribes.append(eventbus.subscribe(channel, inbox))
            client.publish(eventbus._PREFIX + channel, '{"seq": 7}')
            inboxes.append(inbox)
        # then: not one message was published before the subscription was live
        assert [inbox.wait(1) for inbox in inboxes] == [[{"seq": 7}]] * 20
    finally:
        for unsubscribe in unsubscribes:
            unsubscribe()


@pytest.mark.hosted_only
def test_ready_runs_once_the_subscription_is_live_without_blocking():
    client = _redis()
    channel, inbox = _channel(), Inbox()
    live = threading.Event()
    seen_at_ready: list[int] = []

    def ready() -> None:
        seen_at_ready.append(_numsub(client, channel))
        live.set()

    # when: a non-blocking subscription (an event loop's), and a publish once ready ran
    unsubscribe = eventbus.subscribe(channel, inbox, ready=ready)
    try:
        assert live.wait(5)
        client.publish(eventbus._PREFIX + channel, '{"seq": 3}')
        # then: Redis already held the subscription when ready ran, and the message arrived
        assert seen_at_ready == [1]
        assert inbox.wait(1) == [{"seq": 3}]
        # and: a second subscriber of a live channel is ready at once
        again: list[bool] = []
        eventbus.subscribe(channel, Inbox(), ready=lambda: again.append(True))()
        assert again == [True]
    finally:
        unsubscribe()


@pytest.mark.hosted_only
def test_after_the_listener_reconnects_every_channel_is_resubscribed_and_resynced():
    from tests.fault_support import redis_listener_kill

    client = _redis()
    channels = [_channel(), _channel()]
    inboxes = [Inbox(), Inbox()]
    unsubscribes = [eventbus.subscribe(c, i) for c, i in zip(channels, inboxes)]
    try:
        # when: Redis drops this process's listener connection
        assert redis_listener_kill() == 1
        # then: each channel gets RESYNC once it is subscribed again, and later messages arrive
        for inbox in inboxes:
            assert inbox.wait(1, timeout=10) == [eventbus.RESYNC]
        assert [_numsub(client, c) for c in channels] == [1, 1]
        assert int(_listener_entry(client)["psub"]) == 0
        eventbus.publish(channels[0], {"seq": 9})
        assert inboxes[0].wait(2) == [eventbus.RESYNC, {"seq": 9}]
    finally:
        for unsubscribe in unsubscribes:
            unsubscribe()


def test_embedded_bus_delivers_in_process_and_is_ready_at_once(settings):
    settings.REDIS_URL = ""
    channel, inbox = _channel(), Inbox()
    ready: list[bool] = []
    unsubscribe = eventbus.subscribe(channel, inbox, ready=lambda: ready.append(True))
    eventbus.publish(channel, {"seq": 1})
    unsubscribe()
    eventbus.publish(channel, {"seq": 2})
    assert ready == [True]
    assert inbox.messages == [{"seq": 1}]
    assert eventbus.backend_name() == "local"


@pytest.mark.hosted_only
def test_subscription_churn_from_many_threads_leaves_the_last_subscriber_live():
    client = _redis()
    channel = _channel()

    def churn() -> None:
        for _ in range(25):
            eventbus.subscribe(channel, Inbox(), ready=lambda: None)()

    # when: four threads subscribe and unsubscribe the same channel as fast as they can
    threads = [threading.Thread(target=churn) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    # then: a subscriber arriving after the churn is live on return and receives
    inbox = Inbox()
    unsubscribe = eventbus.subscribe(channel, inbox)
    try:
        client.publish(eventbus._PREFIX + channel, '{"seq": 1}')
        assert inbox.wait(1) == [{"seq": 1}]
        assert _numsub(client, channel) == 1
    finally:
        unsubscribe()
