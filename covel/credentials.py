"""The model credentials of the request a piece of work came from, as they travel to background jobs
(spec 004 §后台作业用谁的模型凭据: worker 优先使用来源请求在内存里短期保留的 adapter / gateway；凭据不写进作业).

- ``credentials_scope(keys, routing)``: the turn worker (and a plugin-rpc request) runs its work
  inside it, so whatever that work stages — a runtime job written by the turn's commit — can hold
  on to the request's ``X-Provider-Keys`` and model routing (``{"slotConfig"?, "relay"?}``) for
  the job's worker (``credentials_current``). Nothing here is stored.
- ``credentials_offer(session_id, keys, routing)``: a new execution request that carries keys
  offers them to the session's background work still waiting for credentials (spec: 等一个带凭据的
  新执行请求来提供服务; 下一次带 provider key 的请求会重新交出凭证). The jobs app subscribes at
  start-up (``credentials_offer_subscribe``); a subscriber's failure is logged, never raised.

Plain Python, no app imports: the turn services (below the jobs app) call in, the jobs app listens.
"""
from __future__ import annotations

import logging
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

logger = logging.getLogger("covel.credentials")


@dataclass(frozen=True)
class RequestCredentials:
    """A request's provider keys (``{provider: key}``) and model routing; ``repr`` hides the keys."""

    keys: dict[str, str] = field(default_factory=dict, repr=False)
    routing: dict[str, Any] = field(default_factory=dict)

    @property
    def is_empty(self) -> bool:
        return not self.keys and not self.routing


_current: ContextVar[RequestCredentials | None] = ContextVar("covel_request_credentials", default=None)

CredentialsOffer = Callable[[str, RequestCredentials], Any]
_subscribers: list[CredentialsOffer] = []


@contextmanager
def credentials_scope(keys: dict[str, str] | None, routing: dict[str, Any] | None = None) -> Iterator[None]:
    """Make ``keys``/``routing`` the current request's credentials while the block runs (this
    thread/context only; threads the block starts do not inherit them)."""
    token = _current.set(RequestCredentials(dict(keys or {}), dict(routing or {})))
    try:
        yield
    finally:
        _current.reset(token)


def credentials_current() -> RequestCredentials | None:
    """The credentials of the request the running code works for, or None outside any scope."""
    value = _current.get()
    return None if value is None or value.is_empty else value


def credentials_offer_subscribe(subscriber: CredentialsOffer) -> None:
    """Call ``subscriber(session_id, credentials)`` whenever a request offers credentials (once per
    subscriber; apps subscribe in ``AppConfig.ready``)."""
    if subscriber not in _subscribers:
        _subscribers.append(subscriber)


def credentials_offer(session_id: str, keys: dict[str, str] | None, routing: dict[str, Any] | None = None) -> None:
    """A request of ``session_id`` arrived with ``keys`` (no-op without keys): tell the subscribers."""
    if not keys:
        return
    credentials = RequestCredentials(dict(keys), dict(routing or {}))
    for subscriber in list(_subscribers):
        try:
            subscriber(str(session_id), credentials)
        except Exception:
            logger.warning("session %s: offering request credentials failed", session_id, exc_info=True)
