"""Automatic snapshots (spec 004 §Snapshot / Fork: kind ``auto``; 自动快照被刷新时 ID 不变，payload 和
createdAt 更新; issue 17): every committed action refreshes the session's one auto snapshot after its
commit, next to manual snapshots; a turn that commits nothing leaves it alone."""
from __future__ import annotations

import pytest

from plugins_app.registry import registry_reset
from sessions.models import Snapshot
from tests.turns.lifecycle_support import builtin_dir_with_lifecycle_plugins, completed, fail, heal, reset_files, say
from tests.turns.test_actions_helpers import session_make
from turns.models import SessionEvent

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def plugins(settings, tmp_path):
    settings.COVEL_BUILTIN_PLUGINS_DIR = str(builtin_dir_with_lifecycle_plugins(tmp_path / "builtin"))
    reset_files()
    registry_reset()
    yield
    reset_files()
    registry_reset()


def _auto(session) -> Snapshot:
    return Snapshot.objects.get(session=session, kind=Snapshot.KIND_AUTO)


def test_the_auto_snapshot_is_refreshed_after_every_committed_turn_and_kept_once(api):
    # given a session that played one turn
    session = session_make(plugins=("teller", "flaky"))
    first_turn = completed(say(api, session.id, "One."))["turnId"]
    first = _auto(session)
    assert first.turn_id == first_turn and first.data["session"]["completedPlayerTurns"] == 1
    # and a manual save in between
    manual = api.post(f"/api/sessions/{session.id}/snapshots", data={}, content_type="application/json")
    assert manual.status_code == 201, manual.content
    # when four more turns are played, one of them failing
    for text in ("Two.", "Three."):
        completed(say(api, session.id, text))
    fail("teller")
    assert completed(say(api, session.id, "Lost."))["committed"] is False
    heal()
    last_turn = completed(say(api, session.id, "Four."))["turnId"]
    # then there is still one auto snapshot, the same id, holding the state after the last commit
    auto = _auto(session)
    assert auto.snapshot_id == first.snapshot_id
    assert auto.turn_id == last_turn and auto.completed_player_turns == 4
    assert auto.data["turnId"] == last_turn and auto.data["session"]["completedPlayerTurns"] == 4
    assert auto.created_at > first.created_at and auto.payload_size_bytes > 0
    seen = {row["key"]: row["value"] for row in auto.data["pluginData"] if row["namespace"] == "seen"}
    assert seen == {"1": "One.", "2": "Two.", "3": "Three.", "4": "Four."}
    # and the manual snapshot is untouched; the list shows both, by capture time
    assert Snapshot.objects.filter(session=session).count() == 2
    listed = api.get(f"/api/sessions/{session.id}/snapshots").json()["items"]
    assert [(i["kind"], i["id"]) for i in listed] == [("manual", manual.json()["id"]), ("auto", first.snapshot_id)]
    # and each refresh announced itself (four committed turns)
    created = SessionEvent.objects.filter(session=session, type="state.snapshot.created", payload__kind="auto")
    assert created.count() == 4 and {e.payload["snapshotId"] for e in created} == {first.snapshot_id}
