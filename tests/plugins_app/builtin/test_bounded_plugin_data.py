"""Plugin data that would grow a row per turn is bounded (issue 18: a turn must not read more data
the longer a session runs): guide keeps only its latest guide (each turn's is in its message's ui
block), world-ir keeps no per-turn copy of its facts (its output carries them), and the dimension
provider's resolved settlement receipts are pruned past RESOLVED_RECEIPTS_KEPT."""
from __future__ import annotations

import pytest

from plugins_app.models import PluginData
from tests.plugins_app.builtin.play_support import play
from turns.engine import settlements as S

pytestmark = pytest.mark.django_db(transaction=True)


def _keys(session_id: str, plugin_id: str, namespace: str) -> set[str]:
    return set(PluginData.objects.filter(session_id=session_id, plugin_id=plugin_id, namespace=namespace)
               .values_list("key", flat=True))


def test_per_turn_plugin_data_stays_bounded_over_a_long_session(client, monkeypatch):
    monkeypatch.setattr(S, "RESOLVED_RECEIPTS_KEPT", 4)
    played = play(client, "hollow-reach-light", says=[f"I look around ({n})." for n in range(19)], name="Ada Quill")
    # one guide row, the latest (turn 19's), and every turn's guide in its own ui message
    assert _keys(played.id, "guide", "guides") == {"latest"}
    latest = PluginData.objects.get(session_id=played.id, plugin_id="guide", namespace="guides", key="latest").value
    assert latest["turn"] == 19, latest
    assert not _keys(played.id, "world-ir", "facts")
    # resolved receipts: only the newest RESOLVED_RECEIPTS_KEPT, pending ones never pruned
    receipts = PluginData.objects.filter(session_id=played.id, plugin_id="world-init", namespace=S.SETTLEMENTS_NAMESPACE)
    resolved = [r for r in receipts if r.value.get("status") != S.STATUS_PENDING]
    assert 1 <= len(resolved) <= 4, [r.value.get("status") for r in receipts]
    # and the session still reads as a whole: the view answers with its receipts
    view = client.get(f"/api/sessions/{played.id}/view", HTTP_AUTHORIZATION=f"Bearer {played.token}").json()
    assert len(view["dimensionSettlements"]) == receipts.count()
    # the view carries the receipts as summaries only; the plugin-data route still lists the full rows
    assert not [r for r in view["pluginData"] if r["pluginId"] == "world-init" and r["namespace"] == S.SETTLEMENTS_NAMESPACE]
    assert "guide" in {r["pluginId"] for r in view["pluginData"]}  # other plugins' rows stay
    guides = [m["block"]["parts"][0]["content"] for m in view["messages"]
              if m.get("kind") == "ui" and m.get("runtimeId") == "guide"]
    assert guides[-1] == latest and {g["turn"] for g in guides} == set(range(1, 20)), [g["turn"] for g in guides]
    listed = client.get(f"/api/sessions/{played.id}/plugin-data/world-init/{S.SETTLEMENTS_NAMESPACE}",
                        HTTP_AUTHORIZATION=f"Bearer {played.token}")
    assert listed.status_code == 200, listed.content
    assert len(listed.json()["items"] if isinstance(listed.json(), dict) else listed.json()) == receipts.count()
