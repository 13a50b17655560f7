"""Coalescing of a model call's prose deltas into ``narrative.delta`` frames (issue 18).

A model host streams prose a token or a few characters at a time; one ``narrative.delta`` frame
per chunk cost a bus PUBLISH in the worker, a relay wake-up in the web process and an SSE frame
the client parses — ~40 per builtin-game turn with the scripted model, hundreds with a real one.
``DeltaCoalescer`` sends the first chunk after a quiet spell at once (the client sees prose as soon
as it starts, and a steer offered on the first delta keeps working) and joins the chunks that
arrive within ``DELTA_WINDOW_SECONDS`` of the last frame into the next one, so a stream costs at
most one frame per window. The text a client concatenates is exactly the text the model streamed,
in order; nothing is held past the window: a timer sends the tail of a stream that pauses, and
``close`` (the model call's end, its failure or the execution's stop) sends the rest before any
later frame of the runtime.

Hand-rolled (a lock, a buffer and a ``threading.Timer``): the frame's payload shape and the
ordering against the runtime's other frames are ours; no library coalesces a callback stream.
"""
from __future__ import annotations

import threading
import time
from typing import Callable

#: Longest a streamed chunk waits to be joined with the next ones (seconds): at most ~20 delta
#: frames a second per story runtime, below what a reader notices in a typing display.
DELTA_WINDOW_SECONDS = 0.05


class DeltaCoalescer:
    """Joins text chunks for ``send(text)`` (see module docstring). Thread-safe: ``add`` runs on
    the model call's thread, the tail timer on its own; ``send`` is called under this object's
    lock, so frames leave in the order their text was streamed."""

    def __init__(self, send: Callable[[str], None], *, window_seconds: float = DELTA_WINDOW_SECONDS) -> None:
        self._send = send
        self._window = window_seconds
        self._lock = threading.Lock()
        self._held: list[str] = []
        self._last_sent = float("-inf")  # time.monotonic() of the last frame sent
        self._timer: threading.Timer | None = None
        self._closed = False

    def add(self, text: str) -> None:
        """One streamed chunk: sent now when the last frame is at least a window old, else held
        for the next frame (a timer sends it when nothing else arrives in the window)."""
        if not text:
            return
        with self._lock:
            if self._closed:
                return
            self._held.append(text)
            now = time.monotonic()
            if now - self._last_sent >= self._window:
                self._send_held(now)
            elif self._timer is None:
                self._timer = threading.Timer(self._window - (now - self._last_sent), self._on_timer)
                self._timer.daemon = True
                self._timer.start()

    def close(self) -> None:
        """Send what is held and stop (idempotent); later ``add`` calls are ignored."""
        with self._lock:
            self._closed = True
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if self._held:
                self._send_held(time.monotonic())

    def _on_timer(self) -> None:
        from django.db import connections

        try:
            with self._lock:
                self._timer = None
                if not self._closed and self._held:
                    self._send_held(time.monotonic())
        finally:
            # sending may write the execution's held frames first (ExecutionSink): a connection this
            # short-lived thread opened goes back now (as turns.engine.schedule's runtime threads do)
            connections.close_all()

    def _send_held(self, now: float) -> None:
        text, self._held = "".join(self._held), []
        self._last_sent = now
        self._send(text)
