"""The plugin toolkit: everything builtin and community Python plugins import from the host
(spec 000 §创建新工具, "covel.toolkit"; STYLE.md). Plugin code imports ``plugins_app.toolkit`` and
nothing else of the server; the turn engine builds on the same definitions, so a tool written with
this toolkit is registered, validated, repaired and executed exactly like a framework tool.

- tools: ``tool()``, ``Tool``, ``ToolResult`` (content, proposals, events, model view),
  ``ToolAnnotations`` / ``READ_ONLY_SAFE``; errors: ``ToolError`` and the spec's codes;
- proposals: ``Proposal`` and the kind names (``PLUGIN_DATA``, ``CHARACTER_UPSERT``, ...);
- context: the ``CallContext`` protocol, the ``StateView`` reads and their record types;
- ids: ``word_id``, ``short_id`` / ``short_id_batch`` (spec "shortId"), ``dataset_key``;
- text: ``ZH_CN`` / ``EN_US``, ``instruction_locale_for``, ``locale_text``;
- characters: ``normalize_name``, ``character_attr_issues``, ``merge_schema_defaults``;
- forms: ``FORM_FIELD_SCHEMA``, ``option_values``;
- ``module_load_by_path``: load another module of the plugin's own package by file path.
"""

from plugins_app.toolkit.characters import character_attr_issues, merge_schema_defaults, normalize_name, value_text
from plugins_app.toolkit.context import CallContext
from plugins_app.toolkit.definition import READ_ONLY_SAFE, Tool, ToolAnnotations, ToolResult, tool
from plugins_app.toolkit.errors import (
    AMBIGUOUS,
    CANCELLED,
    CONFLICT,
    INTERNAL,
    INVALID_INPUT,
    NOT_FOUND,
    REFUSED,
    TIMEOUT,
    UNAVAILABLE,
    ToolError,
)
from plugins_app.toolkit.forms import FORM_FIELD_SCHEMA, option_values
from plugins_app.toolkit.ids import dataset_key, short_id, short_id_batch, word_id
from plugins_app.toolkit.locale import EN_US, ZH_CN, instruction_locale_for, locale_text
from plugins_app.toolkit.modules import module_load_by_path
from plugins_app.toolkit.proposals import (
    ASSET_GENERATE,
    CHARACTER_SCHEMA_SET,
    CHARACTER_UPSERT,
    DIMENSION_INITIALIZE,
    DIMENSION_UPDATE,
    EVENT_EMIT,
    INTERACTION_REQUEST,
    LOREBOOK_UPSERT,
    NARRATIVE_APPEND,
    PLUGIN_DATA,
    PLUGIN_DATA_BATCH,
    PLUGIN_DATA_DELETE,
    PLUGIN_DATA_UPDATE,
    UI_RENDER,
    Proposal,
)
from plugins_app.toolkit.state import CharacterRecord, StateView, WorldDimension

__all__ = [
    "AMBIGUOUS", "ASSET_GENERATE", "CANCELLED", "CHARACTER_SCHEMA_SET", "CHARACTER_UPSERT", "CONFLICT",
    "CallContext", "CharacterRecord", "DIMENSION_INITIALIZE", "DIMENSION_UPDATE", "EN_US", "EVENT_EMIT",
    "FORM_FIELD_SCHEMA", "INTERACTION_REQUEST", "INTERNAL", "INVALID_INPUT", "LOREBOOK_UPSERT", "NARRATIVE_APPEND",
    "NOT_FOUND", "PLUGIN_DATA", "PLUGIN_DATA_BATCH", "PLUGIN_DATA_DELETE", "PLUGIN_DATA_UPDATE", "Proposal",
    "READ_ONLY_SAFE", "REFUSED", "StateView", "TIMEOUT", "Tool", "ToolAnnotations", "ToolError", "ToolResult",
    "UI_RENDER", "UNAVAILABLE", "WorldDimension", "ZH_CN", "character_attr_issues", "dataset_key",
    "instruction_locale_for", "locale_text", "merge_schema_defaults", "module_load_by_path", "normalize_name",
    "option_values", "short_id", "short_id_batch", "tool", "value_text", "word_id",
]
