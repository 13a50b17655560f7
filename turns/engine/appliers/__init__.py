"""Proposal appliers: one function per proposal kind, grouped by family (spec 000 §Proposal 类型).

An applier runs inside the execution's commit transaction: ``apply(ctx, proposal)`` writes the
owning app's rows and appends the SessionEvents the write produces to ``ctx.events``. It raises
``ProposalRejected(code, message)`` when the proposal cannot be committed (reserved namespace,
size, version conflict ...); the commit chain then drops that runtime's writes or the whole
execution (see turns/engine/commit.py). Payloads arrive already validated against their schema.
"""

from __future__ import annotations

from turns.engine.appliers import characters, dimensions, events, interaction, lorebook, narrative, plugin_data, ui
from turns.engine.appliers.base import Applier
from plugins_app.toolkit import proposals as P


def appliers() -> dict[str, Applier]:
    """proposal kind → applier (every kind of PROPOSAL_KINDS)."""
    table: dict[str, Applier] = {
        P.NARRATIVE_APPEND: narrative.apply_narrative_append,
        P.EVENT_EMIT: events.apply_event_emit,
        P.INTERACTION_REQUEST: interaction.apply_interaction_request,
        P.UI_RENDER: ui.apply_ui_render,
        P.ASSET_GENERATE: events.apply_asset_generate,
        P.PLUGIN_DATA: plugin_data.apply_plugin_data,
        P.PLUGIN_DATA_BATCH: plugin_data.apply_plugin_data_batch,
        P.PLUGIN_DATA_DELETE: plugin_data.apply_plugin_data_delete,
        P.PLUGIN_DATA_UPDATE: plugin_data.apply_plugin_data_update,
        P.CHARACTER_UPSERT: characters.apply_character_upsert,
        P.CHARACTER_SCHEMA_SET: characters.apply_character_schema_set,
        P.DIMENSION_INITIALIZE: dimensions.apply_dimension_initialize,
        P.DIMENSION_UPDATE: dimensions.apply_dimension_update,
        P.LOREBOOK_UPSERT: lorebook.apply_lorebook_upsert,
    }
    return table
