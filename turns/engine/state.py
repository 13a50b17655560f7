"""EngineStateView: the tools' StateView over a SessionSnapshot plus staged proposals.

Reads see committed rows, then the successful upstream runtimes' proposals, then this runtime's
own staged proposals, in that order (spec 000 §读到的是哪一份数据). The overlay rules are the same
as the appliers' (character.upsert merges ``fields`` when ``expectedVersion`` is given; plugin
data ops through ``turns.engine.tools.dataops``), so what a tool reads is what the commit writes.
Pure Python; safe to call from tool worker threads.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any, Callable, Iterable

from covel.jsoncopy import dimension_copy, json_copy
from turns.engine.snapshot import SessionSnapshot
from plugins_app.toolkit import proposals as P
from plugins_app.toolkit.state import CharacterRecord, DatasetDeclaration, EventTopic, LorebookEntry, MemoryMessage, SearchableRecord, WorldDimension
from turns.engine.tools.dataops import apply_data_ops


def characters_overlay(base: Iterable[CharacterRecord], proposals: Iterable[P.Proposal]) -> list[CharacterRecord]:
    """Apply character.upsert proposals to ``base`` (by id, in order). Returns new records."""
    by_id: dict[str, CharacterRecord] = {c.id: c for c in base}
    order = list(by_id)
    for proposal in proposals:
        if proposal.kind != P.CHARACTER_UPSERT:
            continue
        p = proposal.payload
        existing = by_id.get(p["id"])
        if existing is None:
            record = CharacterRecord(
                id=p["id"], name=p["name"], type=p.get("type") or "npc", aliases=tuple(p.get("aliases") or ()),
                description=p.get("description") or "", fields=json_copy(p.get("fields") or {}),
                version=int(p.get("version") or 1), created_at=p.get("createdAt"),
            )
            order.append(record.id)
        else:
            fields = dict(existing.fields)
            if isinstance(p.get("fields"), dict):
                if "expectedVersion" in p:
                    fields.update(json_copy(p["fields"]))
                else:
                    fields = json_copy(p["fields"])
            record = replace(
                existing, name=p.get("name") or existing.name, type=p.get("type") or existing.type,
                aliases=tuple(p["aliases"]) if "aliases" in p else existing.aliases,
                description=p["description"] if "description" in p else existing.description,
                fields=fields, version=existing.version + 1,
            )
        by_id[record.id] = record
    return [by_id[i] for i in order]


def plugin_data_overlay(rows: dict[str, Any], plugin_id: str, namespace: str, proposals: Iterable[P.Proposal]) -> dict[str, Any]:
    """Apply one plugin's staged plugin.data* proposals for ``namespace`` to ``rows`` (a copy)."""
    out = json_copy(rows)
    for proposal in proposals:
        if proposal.plugin_id != plugin_id:
            continue
        p = proposal.payload
        if proposal.kind == P.PLUGIN_DATA and p["namespace"] == namespace:
            out[p["key"]] = json_copy(p["value"])
        elif proposal.kind == P.PLUGIN_DATA_DELETE and p["namespace"] == namespace:
            out.pop(p["key"], None)
        elif proposal.kind == P.PLUGIN_DATA_BATCH:
            for entry in p["entries"]:
                if entry["namespace"] != namespace:
                    continue
                if entry.get("delete"):
                    out.pop(entry["key"], None)
                else:
                    out[entry["key"]] = json_copy(entry.get("value"))
        elif proposal.kind == P.PLUGIN_DATA_UPDATE and p["namespace"] == namespace:
            try:
                exists, value = apply_data_ops(p["key"] in out, out.get(p["key"]), p["ops"])
            except Exception:  # a failing op is reported by the applier; the view keeps the old value
                continue
            if exists:
                out[p["key"]] = value
            else:
                out.pop(p["key"], None)
    return out


def plugin_data_value(rows: dict[str, Any], plugin_id: str, namespace: str, key: str,
                      proposals: Iterable[P.Proposal]) -> tuple[bool, Any]:
    """``(exists, value)`` of ``key`` in ``plugin_data_overlay(rows, ...)`` (value a private copy),
    copying only that key's value: a namespace grows with the session (one row per turn for some
    plugins) and copying all of it for one read was a per-turn cost growing with history (issue 18)."""
    exists = key in rows
    value = json_copy(rows[key]) if exists else None
    for proposal in proposals:
        if proposal.plugin_id != plugin_id:
            continue
        p = proposal.payload
        if proposal.kind == P.PLUGIN_DATA and p["namespace"] == namespace and p["key"] == key:
            exists, value = True, json_copy(p["value"])
        elif proposal.kind == P.PLUGIN_DATA_DELETE and p["namespace"] == namespace and p["key"] == key:
            exists, value = False, None
        elif proposal.kind == P.PLUGIN_DATA_BATCH:
            for entry in p["entries"]:
                if entry["namespace"] != namespace or entry["key"] != key:
                    continue
                if entry.get("delete"):
                    exists, value = False, None
                else:
                    exists, value = True, json_copy(entry.get("value"))
        elif proposal.kind == P.PLUGIN_DATA_UPDATE and p["namespace"] == namespace and p["key"] == key:
            try:
                updated_exists, updated = apply_data_ops(exists, value, p["ops"])
            except Exception:  # as in plugin_data_overlay: the view keeps the old value
                continue
            exists, value = updated_exists, (updated if updated_exists else None)
    return exists, value


class StagedProposals:
    """A thread-safe, append-only list of proposals (one runtime's own staged writes)."""

    def __init__(self, items: Iterable[P.Proposal] = ()) -> None:
        self._lock = threading.Lock()
        self._items = list(items)

    def extend(self, items: Iterable[P.Proposal]) -> None:
        with self._lock:
            self._items.extend(items)

    def items(self) -> list[P.Proposal]:
        with self._lock:
            return list(self._items)


class EngineStateView:
    """StateView (turns.engine.tools.context) for one runtime. See module docstring.

    upstream: proposals of successful earlier runtimes in this execution; own: this runtime's
    StagedProposals (grows while the loop runs). registry_info: callables giving form validators,
    event topics, datasets and searchable records for the session's plugins.
    """

    def __init__(
        self,
        snapshot: SessionSnapshot,
        *,
        upstream: list[P.Proposal],
        own: StagedProposals,
        form_validators: Callable[[str], frozenset[str]] = lambda _pid: frozenset(),
        event_topics: Callable[[], list[EventTopic]] = lambda: [],
        datasets: Callable[[str], dict[str, DatasetDeclaration]] = lambda _pid: {},
        searchable: Callable[[], list[SearchableRecord]] = lambda: [],
    ) -> None:
        self._snapshot = snapshot
        self._upstream = list(upstream)
        self._own = own
        self._form_validators = form_validators
        self._event_topics = event_topics
        self._datasets = datasets
        self._searchable = searchable

    def _staged(self) -> list[P.Proposal]:
        # A write that failed its payload check is staged for the commit to reject (proposal-invalid),
        # never read back (its payload may not have its kind's shape).
        return [p for p in self._upstream + self._own.items() if not p.meta.get("invalid")]

    def staged_proposals(self) -> list[P.Proposal]:
        """Upstream and own staged writes, in order (what a delegate's sub-agent reads on top of the
        snapshot)."""
        return self._staged()

    def characters(self) -> list[CharacterRecord]:
        return characters_overlay(self._snapshot.characters, self._staged())

    def character_schema(self) -> dict[str, Any] | None:
        schema = json_copy(self._snapshot.character_schema)
        for proposal in self._staged():
            if proposal.kind == P.CHARACTER_SCHEMA_SET:
                schema = json_copy(proposal.payload)
        return schema

    def world_dimensions(self) -> list[WorldDimension]:
        return [dimension_copy(d) for d in self._snapshot.dimensions]

    def plugin_data_list(self, plugin_id: str, namespace: str) -> dict[str, Any]:
        rows = self._snapshot.plugin_data.get((plugin_id, namespace), {})
        return plugin_data_overlay(rows, plugin_id, namespace, self._staged())

    def plugin_data_get(self, plugin_id: str, namespace: str, key: str) -> tuple[bool, Any]:
        rows = self._snapshot.plugin_data.get((plugin_id, namespace), {})
        return plugin_data_value(rows, plugin_id, namespace, key, self._staged())

    def recent_messages(self, limit: int) -> list[MemoryMessage]:
        return list(self._snapshot.messages[-limit:]) if limit > 0 else []

    def history_summaries(self) -> list[MemoryMessage]:
        from turns.engine.memory_index import HISTORY_SUMMARY_NAMESPACE, HISTORY_SUMMARY_PLUGIN, history_summaries_of

        return history_summaries_of(self.plugin_data_list(HISTORY_SUMMARY_PLUGIN, HISTORY_SUMMARY_NAMESPACE))

    def lorebook_entries(self) -> list[LorebookEntry]:
        entries = {e.id: e for e in self._snapshot.lorebook}
        for proposal in self._staged():
            if proposal.kind == P.LOREBOOK_UPSERT:
                for e in proposal.payload["entries"]:
                    entries[e["id"]] = LorebookEntry(id=e["id"], keys=tuple(e["keys"]), content=e["content"],
                                                     enabled=e.get("enabled", True))
        return list(entries.values())

    def searchable_plugin_data(self) -> list[SearchableRecord]:
        return self._searchable()

    def form_validators(self, plugin_id: str) -> frozenset[str]:
        return self._form_validators(plugin_id)

    def event_topics(self) -> list[EventTopic]:
        return self._event_topics()

    def datasets(self, plugin_id: str) -> dict[str, DatasetDeclaration]:
        return self._datasets(plugin_id)

