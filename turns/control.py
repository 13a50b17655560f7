"""Turn control across processes (POST /api/sessions/:id/abort and /steer) and the transient
``X-Provider-Keys`` of an execution (spec 004 §回合中控制（W4）, §请求头（可选）, §官方网页版 API 密钥).

Control channel. The worker running an execution subscribes to the bus channel
``control:<execution_id>`` (``covel.eventbus``: in-process in the embedded shape, Redis pub/sub in
the hosted one) from before it claims the row until the execution is finished
(``ExecutionControl``). A web process that receives /abort or /steer publishes
``{"action": "abort"|"steer", "message"?, "replyTo": "control-reply:<nonce>"}`` there and waits up
to ``ACK_SECONDS`` for the worker's answer on ``replyTo``:
``{"ok": true, "state": "waiting"|"running"}`` or ``{"ok": false, "code", "message"}``. Nobody
answering means no process runs that turn any more (its worker died, or it just finished) and the
endpoint answers 409. This is where we differ from spec 004 §多实例能力边界 on purpose: the spec's
control registry is per process (a request reaching another pod gets 409); ARCHITECTURE.md asks for
control that reaches the worker through Redis, which the web processes of the hosted shape need
because no web process ever runs a turn.

Which executions a request controls (spec 004 §回合中控制 两者共同的限制): the session's current turn
is the execution that holds the session lock (status ``running`` with ``started_at`` set). With
one, abort/steer act on it only. Without one, abort stops every action request of the session that
is still waiting (queued, or claimed and waiting for the lock); steer needs a current turn.
A queued execution no worker claimed yet is aborted in the database directly: its row becomes
``aborted`` and its stream gets the single ``execution.completed``
``{committed: false, abortReason: "aborted-by-player"}``; a later delivery of its task finds it
taken and does nothing.

Steer: the worker's ``ExecutionControl.token`` is a ``turns.engine.steer.TurnControl`` (the
CancelToken the engine gets as ``execution_run(cancel=...)``) and a steer request is offered to
its inbox; the story runtime's next model call includes it (spec 004 §回合中控制 steer: 消息并入
story runtime 的下一次 LLM 调用). The worker answers ``{"ok": true, "state": "running"}`` when the
inbox took it, ``{"ok": false, "code": "steer_closed"}`` when no story model call of the turn can
take it any more (the story runtime already finished, the turn runs no agent story runtime, or
it was stopped); the endpoint answers 200 or 409 steer_closed. A message is saved (chat record
and prompt history) only with a committed turn (turns.engine.run).

Provider keys (``X-Provider-Keys``: base64(JSON) ``{provider: key}``). Never written to the
database. ``provider_keys_put`` keeps them until the worker claims the execution
(``provider_keys_take``, which removes them), at most ``PROVIDER_KEYS_TTL_SECONDS`` (the spec's
5-minute default wait):
- in-process worker (embedded default, and any process with ``COVEL_INPROCESS_WORKER``): a
  dict in this process's memory, keyed by execution id;
- separate Celery workers (hosted): the Redis key ``covel:provider-keys:<execution_id>`` with that
  TTL, read and deleted atomically on claim. Redis here is transient memory shared with the
  worker, not a store: the value is encrypted (Fernet, key derived from ``SECRET_KEY``) so a Redis
  RDB/AOF snapshot taken in those seconds never holds a key in clear text.
The worker then holds them in memory for the whole execution (``execution_run(provider_keys=...)``).
Keys that expired before a worker claimed the execution are gone: the turn runs with the
server's own ``{PROVIDER}_API_KEY`` keys, if any.
The request's model routing travels the same way and with the keys (``provider_keys_put(...,
routing=...)``, ``request_context_take``): ``{"slotConfig"?: <X-Slot-Config JSON>, "relay"?:
<X-Model-Relay channel id>}`` — per-request settings that, like the keys, are never stored (the relay
channel id is what lets a browser answer the player's model calls, covel.model_relay).
"""
from __future__ import annotations

import base64
import hashlib
import json
import logging
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.utils import timezone

from covel import eventbus
from turns.engine.run import ABORTED_BY_PLAYER
from turns.errors import STEER_CLOSED, NoActiveTurn, SteerClosed, TurnNotReachable

logger = logging.getLogger("covel.turns.control")

ACTION_ABORT = "abort"
ACTION_STEER = "steer"
STATE_WAITING = "waiting"
STATE_RUNNING = "running"
STEER_MESSAGE_MAX_CHARS = 100_000

#: How long an endpoint waits for the worker's acknowledgement (seconds); the setting
#: COVEL_CONTROL_ACK_SECONDS overrides it.
ACK_SECONDS = 2.0
#: How long provider keys wait for a worker to claim the execution (spec: 5 minutes by default).
PROVIDER_KEYS_TTL_SECONDS = 300
_REDIS_KEYS_PREFIX = "covel:provider-keys:"


def control_channel(execution_id: str) -> str:
    """The bus channel a worker listens on while it runs ``execution_id``."""
    return f"control:{execution_id}"


# --- worker side --------------------------------------------------------------------------------


class ExecutionControl:
    """The worker's end of one execution's control channel.

    Create it before claiming the row (so no request published between the claim and the
    subscription is lost), call ``claimed()`` once the claim succeeded, ``started()`` when the
    session lock is held, ``close()`` when the execution finished (or the claim failed).
    ``token`` is the ``TurnControl`` (a CancelToken with a steer inbox) handed to the engine; an
    abort cancels it with ``"aborted-by-player"``, a steer is offered to its inbox. Replies are sent only by a worker that owns the claim: a request that
    arrives earlier is answered right after ``claimed()``.
    """

    def __init__(self, execution_id: str) -> None:
        from turns.engine.steer import TurnControl

        self.execution_id = str(execution_id)
        self.token = TurnControl()
        self._lock = threading.Lock()
        self._is_claimed = False
        self._state = STATE_WAITING
        self._deferred: list[dict[str, Any]] = []
        self._unsubscribe = eventbus.subscribe(control_channel(self.execution_id), self._on_message)

    @property
    def is_aborted(self) -> bool:
        return self.token.is_cancelled

    def claimed(self) -> None:
        """This worker owns the execution: answer the requests that arrived before the claim."""
        with self._lock:
            self._is_claimed = True
            deferred, self._deferred = self._deferred, []
        for request in deferred:
            self._answer(request)

    def started(self) -> None:
        """The session lock is held: the execution is now the session's current turn."""
        with self._lock:
            self._state = STATE_RUNNING

    def close(self) -> None:
        self._unsubscribe()

    def _on_message(self, message: dict[str, Any]) -> None:
        # Runs on the publisher's thread (embedded) or the bus listener thread (hosted): no waiting.
        action = message.get("action")
        if action not in (ACTION_ABORT, ACTION_STEER):
            return  # {"resync": true} after a Redis reconnect, or junk
        if action == ACTION_ABORT:
            self.token.cancel(ABORTED_BY_PLAYER)
        with self._lock:
            if not self._is_claimed:
                self._deferred.append(message)
                return
        self._answer(message)

    def _answer(self, message: dict[str, Any]) -> None:
        reply_to = message.get("replyTo")
        if not isinstance(reply_to, str) or not reply_to.startswith("control-reply:"):
            return
        with self._lock:
            state = self._state
        if message.get("action") == ACTION_ABORT:
            reply: dict[str, Any] = {"ok": True, "executionId": self.execution_id, "state": state}
        else:
            text = message.get("message")
            if state == STATE_RUNNING and isinstance(text, str) and text.strip() and self.token.steer_offer(text):
                reply = {"ok": True, "executionId": self.execution_id, "state": state}
            else:
                reply = {"ok": False, "executionId": self.execution_id, "code": STEER_CLOSED,
                         "message": "The running turn's story runtime can no longer take a message"}
        try:
            eventbus.publish(reply_to, reply)
        except Exception:
            logger.warning("execution %s: control reply failed", self.execution_id, exc_info=True)


# --- web side -----------------------------------------------------------------------------------


def control_request(execution_id: str, action: str, *, message: str | None = None,
                    timeout_seconds: float | None = None) -> dict[str, Any] | None:
    """Publish a control request for ``execution_id`` and wait for the worker's reply.

    Returns the reply dict (see module docstring) or None when no worker answered within
    ``timeout_seconds`` (default ACK_SECONDS). Raises redis.RedisError when the hosted bus is down.
    """
    reply_channel = f"control-reply:{uuid.uuid4().hex}"
    answered = threading.Event()
    box: dict[str, Any] = {}

    def on_reply(reply: dict[str, Any]) -> None:
        if "ok" in reply and "reply" not in box:
            box["reply"] = reply
            answered.set()

    unsubscribe = eventbus.subscribe(reply_channel, on_reply)
    try:
        request: dict[str, Any] = {"action": action, "replyTo": reply_channel}
        if message is not None:
            request["message"] = message
        eventbus.publish(control_channel(str(execution_id)), request)
        if timeout_seconds is None:
            timeout_seconds = settings.COVEL_CONTROL_ACK_SECONDS
        answered.wait(timeout_seconds)
    finally:
        unsubscribe()
    return box.get("reply")


def _current_turn(session_id: str):
    from turns.models import Execution

    return (
        Execution.objects.filter(session_id=session_id, status=Execution.STATUS_RUNNING, started_at__isnull=False)
        .order_by("-started_at")
        .first()
    )


def _still_active(execution_ids: list[str]) -> bool:
    from turns.models import Execution

    return Execution.objects.filter(pk__in=execution_ids, status__in=Execution.ACTIVE_STATUSES).exists()


def _queued_abort(execution) -> bool:
    """Abort an execution no worker claimed yet, in the database; False when a worker was faster."""
    from turns.models import Execution
    from turns.sse import ExecutionSink

    origin = execution.origin or "player"
    payload = {"committed": False, "turnId": execution.turn_id, "origin": origin, "abortReason": ABORTED_BY_PLAYER}
    updated = Execution.objects.filter(pk=execution.pk, status=Execution.STATUS_QUEUED).update(
        status=Execution.STATUS_ABORTED, outcome=payload, finished_at=timezone.now()
    )
    if not updated:
        return False
    provider_keys_discard(str(execution.pk))
    # A queued execution has no frames and, with its row taken, no other writer.
    sink = ExecutionSink(execution_id=str(execution.pk), turn_id=execution.turn_id)
    sink.complete(payload, turn_id=execution.turn_id)
    return True


def turn_abort(session) -> dict[str, Any]:
    """Stop the session's current turn, or every waiting action request when none runs (spec 004
    §回合中控制 abort; idempotent while the turn runs).

    Returns ``{"ok": true, "requestIds": [...], "turnId"?: str}`` (turnId: the current turn that
    was told to stop). The action's stream then ends with its one ``execution.completed``
    ``{committed: false, abortReason: "aborted-by-player"}`` unless the turn had already committed
    (a finished transaction is never undone).
    Raises 409 no_active_turn (nothing running or waiting, or it finished meanwhile), 409
    turn_not_reachable (the database says running but no worker acknowledged within ACK_SECONDS).
    """
    from turns.models import Execution

    current = _current_turn(session.pk)
    if current is not None:
        targets = [current]
    else:
        targets = list(
            Execution.objects.filter(session_id=session.pk, status__in=Execution.ACTIVE_STATUSES).order_by("created_at")
        )
    if not targets:
        raise NoActiveTurn()
    stopped = []
    for execution in targets:
        if execution.status == Execution.STATUS_QUEUED and _queued_abort(execution):
            stopped.append(execution)
            continue
        reply = control_request(str(execution.pk), ACTION_ABORT)
        if reply is not None and reply.get("ok"):
            stopped.append(execution)
    if not stopped:
        if not _still_active([str(e.pk) for e in targets]):
            raise NoActiveTurn()
        raise TurnNotReachable()
    out: dict[str, Any] = {"ok": True, "requestIds": [e.request_id for e in stopped]}
    if current is not None and current.turn_id:
        out["turnId"] = Execution.objects.filter(pk=current.pk).values_list("turn_id", flat=True).first() or current.turn_id
    return out


def steer_message_parse(body: Any) -> str:
    """The /steer body ``{message: string}``: a non-blank string of at most
    STEER_MESSAGE_MAX_CHARS characters, no other field. Raises 400 invalid_request_body."""
    from covel.errors import ApiError

    if not isinstance(body, dict):
        raise ApiError(400, "invalid_request_body", "body must be { message: string }")
    unknown = sorted(set(body) - {"message"})
    if unknown:
        raise ApiError(400, "invalid_request_body", f"unknown field: {unknown[0]}")
    message = body.get("message")
    if not isinstance(message, str) or not message.strip():
        raise ApiError(400, "invalid_request_body", "message must be a non-empty string")
    if len(message) > STEER_MESSAGE_MAX_CHARS:
        raise ApiError(400, "invalid_request_body", f"message is longer than {STEER_MESSAGE_MAX_CHARS} characters")
    return message


def turn_steer(session, message: str) -> dict[str, Any]:
    """Hand ``message`` to the session's current turn (spec 004 §回合中控制 steer).

    Raises 409 no_active_turn (no current turn: nothing holds the session lock), 409
    turn_not_reachable (no worker acknowledged), 409 steer_closed (the worker running the turn
    answered that no story model call of it can take the message any more; module docstring).
    Returns ``{"ok": true, "requestId", "turnId"}`` once the turn's steer inbox took it: the story
    runtime's next model call includes it.
    """
    current = _current_turn(session.pk)
    if current is None:
        raise NoActiveTurn()
    reply = control_request(str(current.pk), ACTION_STEER, message=message)
    if reply is None:
        if not _still_active([str(current.pk)]):
            raise NoActiveTurn()
        raise TurnNotReachable()
    if not reply.get("ok"):
        if reply.get("code") == STEER_CLOSED:
            raise SteerClosed()
        raise TurnNotReachable()
    from turns.models import Execution

    turn_id = Execution.objects.filter(pk=current.pk).values_list("turn_id", flat=True).first() or current.turn_id
    return {"ok": True, "requestId": current.request_id, "turnId": turn_id}


# --- provider keys ------------------------------------------------------------------------------


@dataclass(frozen=True)
class RequestContext:
    """What an action request leaves for its worker besides the row (see module docstring):
    ``keys`` {provider: key} and ``routing`` {"slotConfig"?, "relay"?}."""

    keys: dict[str, str] = field(default_factory=dict)
    routing: dict[str, Any] = field(default_factory=dict)


_memory_keys: dict[str, tuple[float, RequestContext]] = {}
_memory_guard = threading.Lock()
_redis_state: dict[str, Any] = {}


def _uses_memory() -> bool:
    return bool(settings.COVEL_INPROCESS_WORKER)


def _memory_sweep(now: float) -> None:
    for execution_id in [k for k, (expires, _) in _memory_keys.items() if expires <= now]:
        _memory_keys.pop(execution_id, None)


def _redis():
    import redis

    client = _redis_state.get("client")
    if client is None or _redis_state.get("url") != settings.REDIS_URL:
        client = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=2, socket_timeout=2)
        _redis_state.update(client=client, url=settings.REDIS_URL)
    return client


def _fernet():
    from cryptography.fernet import Fernet

    digest = hashlib.sha256(b"covel-provider-keys:" + settings.SECRET_KEY.encode("utf-8")).digest()
    return Fernet(base64.urlsafe_b64encode(digest))


def provider_keys_put(execution_id: str, keys: dict[str, str], *, ttl_seconds: float = PROVIDER_KEYS_TTL_SECONDS,
                      routing: dict[str, Any] | None = None) -> None:
    """Keep ``keys`` (and the request's model ``routing``, see module docstring) for the worker
    that will claim ``execution_id``.

    Call before the execution's task can be enqueued (inside its row's transaction). No-op when
    both are empty. Raises redis.RedisError when the hosted store cannot take them.
    """
    if not keys and not routing:
        return
    context = RequestContext(dict(keys or {}), dict(routing or {}))
    if _uses_memory():
        now = time.monotonic()
        with _memory_guard:
            _memory_sweep(now)
            _memory_keys[str(execution_id)] = (now + ttl_seconds, context)
        return
    token = _fernet().encrypt(json.dumps({"keys": context.keys, "routing": context.routing}).encode("utf-8"))
    _redis().set(_REDIS_KEYS_PREFIX + str(execution_id), token, ex=max(1, int(ttl_seconds)))


def provider_keys_take(execution_id: str) -> dict[str, str] | None:
    """Remove and return the keys kept for ``execution_id`` (None when there are none or they
    expired); the routing kept with them is dropped (``request_context_take`` returns both)."""
    context = request_context_take(execution_id)
    return context.keys if context is not None else None


def request_context_take(execution_id: str) -> RequestContext | None:
    """Remove and return the keys and routing kept for ``execution_id`` (None when nothing is kept
    or it expired). Called once by the worker that claimed the execution."""
    return _request_context_read(execution_id, remove=True)


def request_context_peek(holder_id: str) -> RequestContext | None:
    """The keys and routing kept under ``holder_id`` (an execution id, or ``job:<jobId>`` for a
    runtime job), left in place until they expire or are discarded; None when nothing is kept."""
    return _request_context_read(holder_id, remove=False)


def _request_context_read(execution_id: str, *, remove: bool) -> RequestContext | None:
    now = time.monotonic()
    with _memory_guard:
        _memory_sweep(now)
        entry = _memory_keys.pop(str(execution_id), None) if remove else _memory_keys.get(str(execution_id))
    if entry is not None:
        return entry[1]
    if not settings.REDIS_URL:
        return None
    try:
        if remove:
            pipe = _redis().pipeline(transaction=True)
            pipe.get(_REDIS_KEYS_PREFIX + str(execution_id))
            pipe.delete(_REDIS_KEYS_PREFIX + str(execution_id))
            token = pipe.execute()[0]
        else:
            token = _redis().get(_REDIS_KEYS_PREFIX + str(execution_id))
    except Exception:
        logger.warning("execution %s: provider keys could not be read from Redis", execution_id, exc_info=True)
        return None
    if token is None:
        return None
    from cryptography.fernet import InvalidToken

    try:
        stored = json.loads(_fernet().decrypt(token))
    except (InvalidToken, ValueError):
        logger.warning("execution %s: provider keys in Redis could not be decrypted", execution_id)
        return None
    if not isinstance(stored, dict):
        return None
    if set(stored) == {"keys", "routing"} and isinstance(stored["keys"], dict) and isinstance(stored["routing"], dict):
        return RequestContext(stored["keys"], stored["routing"])
    return RequestContext(stored, {})  # a flat {provider: key} map, as written before the routing


def provider_keys_discard(execution_id: str) -> None:
    """Forget the keys of an execution that will never run (aborted before a claim, rolled back)."""
    with _memory_guard:
        _memory_keys.pop(str(execution_id), None)
    if settings.REDIS_URL and not _uses_memory():
        try:
            _redis().delete(_REDIS_KEYS_PREFIX + str(execution_id))
        except Exception:
            logger.warning("execution %s: provider keys could not be deleted from Redis", execution_id, exc_info=True)
