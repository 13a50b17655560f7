"""generate-world normalises the locale's case (issue 21): "en-us" is en-US, not a 400."""
from __future__ import annotations

import pytest

from sessions.worldpkg.files import locale_canonical
from tests.jobs.test_worldgen import CONCEPT_EN, _generate, _private_home, llm_path  # noqa: F401  (fixtures)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize("raw,canonical", [("en-us", "en-US"), ("EN-US", "en-US"), ("zh_hans_cn", "zh-Hans-CN"),
                                           ("ja-JP", "ja-JP"), ("fr", "fr"), ("not a locale", None), ("", None), (3, None)])
def test_locale_canonical(raw, canonical):
    assert locale_canonical(raw) == canonical


def test_generate_world_accepts_lowercase_region_and_stores_the_canonical_tag(client, llm_path):
    response, frames = _generate(client, {"concept": CONCEPT_EN, "locale": "en-us", "saveTarget": "return-only"})
    assert response.status_code == 200, response.content
    done = frames[-1]
    assert done["type"] == "done", done
    assert done["world"]["locale"] == "en-US"
    assert done["world"]["metadata"].get("defaultLocale", "en-US") == "en-US"


def test_generation_revision_and_translation_share_one_mutex(client, llm_path):
    from jobs.models import WorldGeneration

    running = WorldGeneration.objects.create(request={"operation": "translate", "idleTimeoutMs": 120000}, status="running")
    busy, _frames = _generate(client, {"concept": CONCEPT_EN, "saveTarget": "return-only"})
    assert busy.status_code == 429 and busy.json()["code"] == "operation_in_progress"
    assert WorldGeneration.objects.count() == 1  # no model call, no new generation
    running.status = "done"
    running.save()
    ok, frames = _generate(client, {"concept": CONCEPT_EN, "saveTarget": "return-only"})
    assert ok.status_code == 200 and frames[-1]["type"] == "done"
