"""Benchmark: framework overhead per model call — the time our code spends between a model answer's
last byte and the next request of the same runtime (stream parsing, tool execution, staging, trace
events, building the next request), embedded shape (SQLite, in-process worker).

The model is ``tests.model_peer.ModelPeer``: a real HTTP server on loopback that answers at once, so
every gap is ours. Setup and the timed turns play the builtin world ``hollow-reach-light``; the
peer ignores a forced tool choice once per conversation (as llama.cpp does), so every tool runtime
makes at least two calls.

Anchor, measured in the same run: a bare httpx client that reads the same peer's streamed answer to
``[DONE]`` and sends the next request at once (connection set-up and HTTP parsing only).

Run: .venv/bin/python tests/bench/model_call_overhead.py [--turns 10]
Prints the median and p95 gap in milliseconds for our loop and for the anchor, and the number of gaps.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

WORLD = "hollow-reach-light"


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))]


def _gaps(requests) -> list[float]:
    """Milliseconds from an answer's last byte to the next request of the same conversation (a
    request whose messages extend the earlier one's)."""
    out = []
    for i, later in enumerate(requests):
        messages = later.body.get("messages") or []
        for earlier in reversed(requests[:i]):
            before = earlier.body.get("messages") or []
            if len(before) < len(messages) and messages[:len(before)] == before and earlier.finished_at:
                out.append((later.received_at - earlier.finished_at) * 1000)
                break
    return out


def _anchor(peer, rounds: int) -> list[float]:
    import httpx

    body = {"model": "peer-large", "stream": True, "messages": [{"role": "system", "content": "x" * 4000},
                                                                 {"role": "user", "content": "Hello."}]}
    gaps = []
    with httpx.Client(timeout=10) as http:
        last_end = None
        for _ in range(rounds):
            start = time.perf_counter()
            with http.stream("POST", peer.base_url + "/chat/completions", json=body) as response:
                for line in response.iter_lines():
                    if line == "data: [DONE]":
                        break
            if last_end is not None:
                gaps.append((start - last_end) * 1000)
            last_end = time.perf_counter()
    # the anchor's gap: from having read [DONE] to the peer receiving the next request
    return [peer_gap for peer_gap in _gaps_plain(peer.requests[-rounds:])] or gaps


def _gaps_plain(requests) -> list[float]:
    return [(b.received_at - a.finished_at) * 1000 for a, b in zip(requests, requests[1:]) if a.finished_at]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=10)
    args = parser.parse_args()
    home = tempfile.mkdtemp(prefix="covel-bench-home-")
    os.environ["COVEL_HOME"] = home
    os.environ["DJANGO_SETTINGS_MODULE"] = "covel.settings.test"
    import django

    django.setup()
    from django.conf import settings

    class _NoMigrations(dict):
        def __contains__(self, item):
            return True

        def __getitem__(self, item):
            return None

    settings.MIGRATION_MODULES = _NoMigrations()
    import logging

    logging.disable(logging.INFO)
    from django.db import connection
    from django.test import Client
    from django.test.utils import setup_test_environment

    from tests.e2e.play import expect_committed, session_create, session_setup
    from tests.model_peer import ModelPeer, Quirks
    from tests.turns.test_real_model_game import ClientApi, LINES

    setup_test_environment()
    connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    with ModelPeer(quirks=Quirks(indexless=True, ignore_tool_choice=True)) as peer:
        lines = []
        for slot in ("story", "plugin", "default"):
            lines += [f"[covel.{slot}]", 'provider = "bench-lab"', 'protocol = "openai-chat-v1"', 'model = "peer-large"',
                      f'baseUrl = "{peer.base_url}"', ""]
        toml = Path(home) / "llm.toml"
        toml.write_text("\n".join(lines), encoding="utf-8")
        settings.COVEL_LLM_TOML = str(toml)
        settings.COVEL_OUTBOUND_ALLOW = ("127.0.0.1",)
        played = session_create(ClientApi(Client()), WORLD)
        session_setup(played)
        start = len(peer.requests)
        for n in range(args.turns):
            expect_committed(played.api.action("submit_actions", played.id,
                                               {"actions": [{"kind": "say", "text": LINES[n % len(LINES)]}]}))
        ours = _gaps(peer.requests[start:])
        anchor_rounds = max(20, len(ours))
        anchor = _anchor(peer, anchor_rounds)
    print(f"model-call overhead, embedded, {args.turns} turns of {WORLD} on a loopback HTTP model:")
    print(f"  framework gap (answer's last byte -> next request): median {statistics.median(ours):.1f} ms, "
          f"p95 {_percentile(ours, 0.95):.1f} ms over {len(ours)} gaps")
    print(f"  anchor (bare httpx client, same peer):              median {statistics.median(anchor):.1f} ms, "
          f"p95 {_percentile(anchor, 0.95):.1f} ms over {len(anchor)} gaps")


if __name__ == "__main__":
    main()
