"""Benchmark: how long the OpenAPI document takes (issue 16: every route typed, so the document grew
from a list of paths to ~100 typed operations with their components).

Prints, each as a median of READS runs in one process (embedded test shape):

- building the document in process (``api.get_openapi_schema()``: ninja's pass plus the contracts),
- GET /api/openapi.json through the Django test client (middleware, building and JSON rendering),
- the anchor measured in the same run: GET /api/ai/protocols, a bare request through the same
  middleware that reads no database,

and the document's size, operation count and component count. The first build (cold: every model's
JSON schema is built then, and cached for the process) is printed separately.

Run: .venv/bin/python tests/bench/openapi_generation.py [--reads 30]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

READS = 30


def _median_ms(action, reads: int) -> float:
    times = []
    for _ in range(reads):
        started = time.perf_counter()
        action()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def _get(client, url: str):
    def run():
        response = client.get(url)
        if response.status_code != 200:
            raise SystemExit(f"GET {url}: {response.status_code} {response.content[:200]!r}")
        return response
    return run


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reads", type=int, default=READS)
    args = parser.parse_args()
    os.environ["DJANGO_SETTINGS_MODULE"] = "covel.settings.test"
    import django

    django.setup()
    from django.test import Client
    from django.test.utils import setup_test_environment

    setup_test_environment()
    from covel.api import api
    from covel.openapi import operations

    started = time.perf_counter()
    document = api.get_openapi_schema()
    cold_ms = (time.perf_counter() - started) * 1000
    client = Client(HTTP_HOST="127.0.0.1")
    build_ms = _median_ms(api.get_openapi_schema, args.reads)
    served_ms = _median_ms(_get(client, "/api/openapi.json"), args.reads)
    anchor_ms = _median_ms(_get(client, "/api/ai/protocols"), args.reads)
    size = len(client.get("/api/openapi.json").content)
    count = len(operations(document))
    schemas = len(document["components"]["schemas"])
    print(f"openapi: {count} operations, {schemas} component schemas, {size / 1024:.1f} KiB")
    print(f"build (in process): cold {cold_ms:7.1f} ms, median {build_ms:6.1f} ms | "
          f"GET /api/openapi.json median {served_ms:6.1f} ms | anchor GET /api/ai/protocols median {anchor_ms:6.2f} ms")


if __name__ == "__main__":
    main()
