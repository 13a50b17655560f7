"""EngineStateView.plugin_data_get reads one key exactly as plugin_data_list shows it (snapshot rows,
then upstream and own staged writes in order), returns a private copy, and leaves other keys alone."""
import itertools

import pytest

from plugins_app.toolkit import proposals as P
from turns.engine.snapshot import SessionSnapshot, WorldContext
from turns.engine.state import EngineStateView, StagedProposals

PLUGIN, NS = "demo", "notes"
ROWS = {"a": {"n": 1, "tags": ["x"]}, "b": [1, 2], "gone": "soon", "nil": None}


def _snapshot(rows):
    return SessionSnapshot(
        session_id="s", locale="en-US", phase="playing", status="active", completed_player_turns=0,
        setup_runtimes={}, active_plugins=[PLUGIN], metadata={}, seats=[], world=WorldContext(),
        characters=[], character_schema=None, dimensions=[], plugin_data={(PLUGIN, NS): rows, (PLUGIN, "other"): {"a": 9}},
        lorebook=[], messages=[], history=[], pending_interactions=[],
    )


def _proposal(kind, payload, plugin_id=PLUGIN):
    proposal = P.Proposal(kind, payload)
    proposal.plugin_id = plugin_id
    return proposal


# Staged writes touching key "a" (and neighbours), including a failing update and another plugin's write.
WRITES = [
    _proposal(P.PLUGIN_DATA, {"namespace": NS, "key": "a", "value": {"n": 2}}),
    _proposal(P.PLUGIN_DATA_DELETE, {"namespace": NS, "key": "a"}),
    _proposal(P.PLUGIN_DATA_BATCH, {"entries": [{"namespace": NS, "key": "a", "value": [3]},
                                                {"namespace": NS, "key": "new", "value": 1},
                                                {"namespace": NS, "key": "gone", "delete": True}]}),
    _proposal(P.PLUGIN_DATA_BATCH, {"entries": [{"namespace": NS, "key": "a", "delete": True},
                                                {"namespace": "other", "key": "a", "value": 0}]}),
    _proposal(P.PLUGIN_DATA_UPDATE, {"namespace": NS, "key": "a", "ops": [{"op": "set", "path": "/n", "value": 5}]}),
    _proposal(P.PLUGIN_DATA_UPDATE, {"namespace": NS, "key": "new", "ops": [{"op": "increment", "path": "", "value": 2}]}),
    _proposal(P.PLUGIN_DATA_UPDATE, {"namespace": NS, "key": "a", "ops": [{"op": "no-such-op"}]}),
    _proposal(P.PLUGIN_DATA, {"namespace": NS, "key": "a", "value": "not mine"}, plugin_id="someone-else"),
    _proposal(P.PLUGIN_DATA, {"namespace": "other", "key": "a", "value": "other ns"}),
]
SEQUENCES = [list(s) for n in range(4) for s in itertools.permutations(range(len(WRITES)), n)][::7]


@pytest.mark.parametrize("order", SEQUENCES, ids=["-".join(map(str, s)) or "none" for s in SEQUENCES])
def test_get_equals_list_for_every_key(order):
    upstream = [WRITES[i] for i in order[: len(order) // 2]]
    own = StagedProposals([WRITES[i] for i in order[len(order) // 2:]])
    view = EngineStateView(_snapshot({k: v for k, v in ROWS.items()}), upstream=upstream, own=own)
    listed = view.plugin_data_list(PLUGIN, NS)
    for key in [*ROWS, "new", "missing"]:
        assert view.plugin_data_get(PLUGIN, NS, key) == ((True, listed[key]) if key in listed else (False, None))


def test_get_returns_a_private_copy():
    rows = {k: v for k, v in ROWS.items()}
    view = EngineStateView(_snapshot(rows), upstream=[], own=StagedProposals())
    exists, value = view.plugin_data_get(PLUGIN, NS, "a")
    value["tags"].append("mutated")
    assert exists and rows["a"] == {"n": 1, "tags": ["x"]}
    assert view.plugin_data_get(PLUGIN, NS, "a") == (True, {"n": 1, "tags": ["x"]})
