"""The worldgen.generate_world task called directly (spec 004 AI 生成; STYLE: unit tests call task
functions directly). The generation row is written inside the test transaction, so nothing is
scheduled on the in-process worker."""
from __future__ import annotations

import pytest

from jobs import worldgen
from jobs.tasks import generate_world

pytestmark = pytest.mark.django_db

CONCEPT_EN = "A drowned archive city where librarians ration daylight"


@pytest.fixture(autouse=True)
def _private_home(settings, tmp_path):
    settings.COVEL_HOME = tmp_path / "home"
    settings.COVEL_LLM_TOML = str(tmp_path / "llm.toml")


def test_task_runs_a_queued_generation_once(django_capture_on_commit_callbacks):
    job = worldgen.generation_request_parse({"concept": CONCEPT_EN, "saveTarget": "return-only"},
                                            contracts_catalog={}, packs=worldgen.packs_catalog())
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        generation = worldgen.generation_start(request=job)
    assert len(callbacks) == 1  # scheduled after commit

    generate_world(str(generation.id))
    generate_world(str(generation.id))

    generation.refresh_from_db()
    assert generation.status == "done"
    assert [f["type"] for f in generation.frames].count("done") == 1


def test_stalled_generation_is_closed_and_late_worker_does_nothing(django_capture_on_commit_callbacks):
    job = worldgen.generation_request_parse({"concept": CONCEPT_EN, "saveTarget": "return-only"},
                                            contracts_catalog={}, packs=worldgen.packs_catalog())
    with django_capture_on_commit_callbacks(execute=False):
        generation = worldgen.generation_start(request=job)

    worldgen.generation_fail_stalled(str(generation.id), "World generation stalled: no worker answered")
    generate_world(str(generation.id))

    generation.refresh_from_db()
    assert generation.status == "failed"
    assert generation.frames == [{"type": "error", "message": "World generation stalled: no worker answered"}]
