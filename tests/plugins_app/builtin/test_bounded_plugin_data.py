"""Plugin data that grows a row per turn is bounded (issue 18: a turn must not read more data the
longer a session runs): guide keeps 4 per-turn guides, world-ir 4 per-turn fact sets, and the
dimension provider's resolved settlement receipts are pruned past RESOLVED_RECEIPTS_KEPT."""
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
    guides = {k for k in _keys(played.id, "guide", "guides") if k.startswith("turn-")}
    turns = sorted(int(k.split("-")[1]) for k in guides)
    # the last 4 per-turn guides are kept, the older ones are gone, "latest" stays
    assert len(turns) == 4 and turns == list(range(turns[-1] - 3, turns[-1] + 1)), turns
    assert "latest" in _keys(played.id, "guide", "guides")
    facts = sorted(int(k.split("-")[1]) for k in _keys(played.id, "world-ir", "facts"))
    assert len(facts) == 4 and facts == list(range(facts[-1] - 3, facts[-1] + 1)), facts
    # resolved receipts: only the newest RESOLVED_RECEIPTS_KEPT, pending ones never pruned
    receipts = PluginData.objects.filter(session_id=played.id, plugin_id="world-init", namespace=S.SETTLEMENTS_NAMESPACE)
    resolved = [r for r in receipts if r.value.get("status") != S.STATUS_PENDING]
    assert 1 <= len(resolved) <= 4, [r.value.get("status") for r in receipts]
    # and the session still reads as a whole: the view answers with its receipts
    view = client.get(f"/api/sessions/{played.id}/view", HTTP_AUTHORIZATION=f"Bearer {played.token}").json()
    assert len(view["dimensionSettlements"]) == receipts.count()
    # the view carries the receipts as summaries only; the plugin-data route still lists the full rows
    assert not [r for r in view["pluginData"] if r["pluginId"] == "world-init" and r["namespace"] == S.SETTLEMENTS_NAMESPACE]
    assert {"guide", "world-ir"} <= {r["pluginId"] for r in view["pluginData"]}  # other plugins' rows stay
    listed = client.get(f"/api/sessions/{played.id}/plugin-data/world-init/{S.SETTLEMENTS_NAMESPACE}",
                        HTTP_AUTHORIZATION=f"Bearer {played.token}")
    assert listed.status_code == 200, listed.content
    assert len(listed.json()["items"] if isinstance(listed.json(), dict) else listed.json()) == receipts.count()
