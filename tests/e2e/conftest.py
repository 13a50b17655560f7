"""End-to-end tests: real daphne and Celery processes on PostgreSQL and Redis (tests/e2e/cluster.py).

They are collected only when COVEL_E2E=1 (``make e2e``), so ``make test`` stays fast. One cluster
(2 web + 2 workers + beat) serves the whole run; its teardown fails the run when a process had to be
killed or the database/Redis db was left behind. The fault-injection scenarios (test_faults.py)
start a second cluster of their own on a private redis-server and PostgreSQL, which they restart
and stop.
"""
from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import pytest
from tests.shared_paths import FIXTURES_DIR

E2E_ENABLED = os.environ.get("COVEL_E2E") == "1"

if not E2E_ENABLED:
    collect_ignore_glob = ["test_*.py"]

#: The upstream fixture worlds (``../shared/fixtures/upstream/worlds`` next to the checkout).
FIXTURE_WORLDS = Path(os.environ.get("COVEL_E2E_UPSTREAM_WORLDS") or FIXTURES_DIR / "upstream" / "worlds")
# One line per request would drown the assertion messages, which already carry the exchange.
logging.getLogger("httpx").setLevel(logging.WARNING)
logging.getLogger("httpcore").setLevel(logging.WARNING)

#: Lines the scenarios report (the ``figures`` fixture); printed at the end of the run.
FIGURES = pytest.StashKey[list]()


def pytest_configure(config):
    config.stash[FIGURES] = []


def pytest_terminal_summary(terminalreporter, config):
    lines = config.stash.get(FIGURES, [])
    if lines:
        terminalreporter.section("covel e2e figures")
        for line in lines:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def figures(pytestconfig) -> list:
    """Append a line to print it in the run's summary (e.g. scenario 4's latency median)."""
    return pytestconfig.stash[FIGURES]


@pytest.fixture(scope="session")
def stalling_model():
    """The model endpoint of the ``stall`` slot (tests/e2e/fakes.py)."""
    from tests.e2e.fakes import StallingModelServer

    server = StallingModelServer()
    yield server
    server.close()


@pytest.fixture(scope="session")
def cluster(stalling_model):
    """The running cluster: ``cluster.base_urls`` (two daphne), ``cluster.db()``, ``cluster.workers``."""
    from tests.e2e.cluster import cluster_new, run_dir_remove
    from tests.e2e.fakes import llm_toml_text

    started = cluster_new()
    # User-installed world (scenario 2): copied the way an operator installs a world package.
    shutil.copytree(FIXTURE_WORLDS / "emberback", started.covel_home / "worlds" / "emberback")
    (started.covel_home / "llm.toml").write_text(llm_toml_text(stalling_model.base_url), encoding="utf-8")
    try:
        started.start()  # on failure it tears down what it started; the error carries the log tails
    except BaseException:
        run_dir_remove(started)
        raise
    try:
        yield started
    finally:
        problems = started.stop(check=False)
        if not problems:
            run_dir_remove(started)
        assert not problems, f"unclean teardown (logs kept in {started.run_dir}): {problems}"


@pytest.fixture
def web1(cluster):
    from tests.e2e.client import Api

    api = Api(cluster.base_urls[0])
    yield api
    api.close()


@pytest.fixture
def web2(cluster):
    from tests.e2e.client import Api

    api = Api(cluster.base_urls[1])
    yield api
    api.close()
