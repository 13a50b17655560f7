"""Session state as tools and plugin code read it (spec 000 §读到的是哪一份数据): the record types
and the read-only ``StateView`` protocol. The turn engine implements StateView over the database
plus the execution's staged writes (turns.engine.state); ``turns.engine.tools.context`` has an
in-memory implementation for tests.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from covel.jsoncopy import json_copy

JsonObject = dict[str, Any]


@dataclass(frozen=True)
class CharacterRecord:
    """One session character as tools read it (spec 000, Character 管理工具).

    updated_at / created_at: ISO-8601 UTC strings (or None); version starts at 1.
    """

    id: str
    name: str
    type: str = "npc"
    aliases: tuple[str, ...] = ()
    description: str = ""
    fields: JsonObject = field(default_factory=dict)
    version: int = 1
    created_at: str | None = None
    updated_at: str | None = None

    def snapshot(self) -> JsonObject:
        """CharacterSnapshot JSON (camelCase wire names)."""
        out: JsonObject = {
            "id": self.id,
            "name": self.name,
            "type": self.type,
            "aliases": list(self.aliases),
            "description": self.description,
            "fields": json_copy(self.fields),
            "version": self.version,
        }
        if self.created_at:
            out["createdAt"] = self.created_at
        if self.updated_at:
            out["updatedAt"] = self.updated_at
        return out


@dataclass(frozen=True)
class WorldDimension:
    """One public world dimension of the frozen snapshot (spec 000, world-dimension-get).

    value: current value; schema: the value's JSON Schema (may be None); version: int.
    Never carries initialValue / updateRule.
    """

    id: str
    value: Any
    version: int
    name: str | None = None
    schema: JsonObject | None = None


@dataclass(frozen=True)
class MemoryMessage:
    """A committed message or history summary for memory-search recall.

    role: "user" | "assistant" | "summary" | ...; message_id is internal (dedupe only).
    """

    role: str
    text: str
    message_id: str | None = None
    turn: int | None = None


@dataclass(frozen=True)
class LorebookEntry:
    """A lorebook entry for memory-search archival; disabled entries are never returned."""

    id: str
    keys: tuple[str, ...]
    content: str
    enabled: bool = True


@dataclass(frozen=True)
class SearchableRecord:
    """A plugin-data record from a namespace declared `contributes.data.<ns>.search`."""

    plugin_id: str
    namespace: str
    key: str
    value: Any


@dataclass(frozen=True)
class EventTopic:
    """A domain event declared by an enabled plugin (`events[]`); advertise=False is internal."""

    topic: str
    plugin_id: str
    schema: JsonObject | None = None
    description: str = ""
    advertise: bool = True
    #: True when a schema is declared but cannot be read (the directory marks it "(schema unavailable)").
    schema_unavailable: bool = False


@dataclass(frozen=True)
class DatasetDeclaration:
    """One `contributes.datasets.<name>` entry of a plugin (spec 000, 数据集工具).

    schema: record JSON Schema; key_field: top-level field holding the key, or None;
    ops: allowed operations (see turns.engine.tools.dataops.DATA_OPS); tools: explicit tool
    suffixes ("get", "list", "upsert", "update") or None to derive them from ops.
    """

    name: str
    schema: JsonObject
    key_field: str | None = None
    ops: tuple[str, ...] = ("set",)
    tools: tuple[str, ...] | None = None
    description: str = ""


@runtime_checkable
class StateView(Protocol):
    """Read-only session state the builtin tools use. All returned values are copies.

    Character and schema reads include staged writes (committed + upstream + own proposals);
    world dimensions are the execution's frozen public snapshot.
    """

    def characters(self) -> list[CharacterRecord]:
        """Every character of the session (any order)."""

    def character_schema(self) -> JsonObject | None:
        """`{types: [str], attributes: [AttributeDef]}` or None when the world has none."""

    def world_dimensions(self) -> list[WorldDimension]:
        """The frozen public dimension snapshot, in declaration order."""

    def plugin_data_get(self, plugin_id: str, namespace: str, key: str) -> tuple[bool, Any]:
        """(exists, value) of one plugin-data row, with the plugin's staged writes applied."""

    def plugin_data_list(self, plugin_id: str, namespace: str) -> dict[str, Any]:
        """All rows `{key: value}` of one namespace, with staged writes applied."""

    def recent_messages(self, limit: int) -> list[MemoryMessage]:
        """The last `limit` committed messages, oldest first."""

    def history_summaries(self) -> list[MemoryMessage]:
        """Every history summary segment (role "summary"), oldest first."""

    def lorebook_entries(self) -> list[LorebookEntry]:
        """All lorebook entries of the session, enabled or not."""

    def searchable_plugin_data(self) -> list[SearchableRecord]:
        """Rows of namespaces declared searchable by plugins enabled in this session."""

    def form_validators(self, plugin_id: str) -> frozenset[str]:
        """Names a plugin declared in contributes.forms and registered."""

    def event_topics(self) -> list[EventTopic]:
        """Domain events declared by enabled plugins of the session."""

    def datasets(self, plugin_id: str) -> dict[str, DatasetDeclaration]:
        """A plugin's declared datasets by name."""
