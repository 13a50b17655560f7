"""generate-world completes the brief (issue 21): brief.content "opening-kit" becomes numeric
starting-resource dimensions plus startingConditions; brief.contracts omitted takes the contracts
GET /api/framework/authoring marks `generate: default`. The offline scripted model answers."""
from __future__ import annotations

import json

import pytest

from plugins_app.registry import registry_reset
from sessions import world_packages as wp
from tests.jobs.test_worldgen import CONCEPT_EN, _generate, _private_home, llm_path  # noqa: F401  (fixtures)

pytestmark = pytest.mark.django_db(transaction=True)

KEEPER = """---
id: tale-keeper
kind: plugin
version: 1.0.0
displayName: Tale keeper
description: Keeps folk tales.
contributes:
  data:
    tales:
      version: 1
      description: Folk tales.
      accepts:
        - folklore.tales@1
      authoring:
        title: Folk tales
        hint: One object with a `tales` list of short strings.
        example: ./example.json
        generate: default
        source:
          kind: json
          path: data/tales.json
          key: id
---
Test plugin.
"""


@pytest.fixture
def keeper(settings, tmp_path):
    root = tmp_path / "plugins" / "tale-keeper"
    root.mkdir(parents=True)
    (root / "PLUGIN.md").write_text(KEEPER, encoding="utf-8")
    (root / "example.json").write_text(json.dumps({"id": "world", "tales": ["The drowned bell"]}), encoding="utf-8")
    settings.COVEL_BUILTIN_PLUGINS_DIR = str(tmp_path / "plugins")
    registry_reset()
    yield
    registry_reset()


def test_opening_kit_and_default_contracts(client, llm_path, keeper, settings):
    authoring = client.get("/api/framework/authoring").json()
    assert [c["contract"] for c in authoring["contracts"] if c.get("generate") == "default"] == ["folklore.tales@1"]
    response, frames = _generate(client, {"concept": CONCEPT_EN, "locale": "en-US",
                                          "brief": {"content": ["characters", "opening-kit"]}})
    assert response.status_code == 200
    done = frames[-1]
    assert done["type"] == "done", done
    assert "warnings" not in done, done.get("warnings")
    part_ids = [p["id"] for p in frames[1]["parts"]]
    assert part_ids == ["manifest", "lore", "characters", "contract:folklore.tales@1"]
    dims = done["world"]["metadata"]["dimensions"]
    assert dims["supplies"]["schema"]["type"] == "integer" and dims["coin"]["initialValue"] == 12
    assert len(dims["startingConditions"]["initialValue"]["openingChoices"]) == 3
    root = wp.user_worlds_dir(settings.COVEL_HOME) / done["world"]["id"]
    assert json.loads((root / "data" / "tales.json").read_text(encoding="utf-8"))["tales"] == ["The drowned bell"]
    package = wp.world_package_load(root, source=wp.SOURCE_USER, expected_id=done["world"]["id"])
    assert package.ok and "startingConditions" in package.dimensions
    # an explicit empty list asks for no contract
    _response, frames = _generate(client, {"concept": CONCEPT_EN + " again", "locale": "en-US", "saveTarget": "return-only",
                                           "brief": {"content": ["opening-kit"], "contracts": []}})
    assert [p["id"] for p in frames[1]["parts"]] == ["manifest", "lore"] and frames[-1]["type"] == "done"
