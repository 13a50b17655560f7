"""The semantic memory index of a session (spec 004 §GET /api/sessions/:id/memory-index, §rebuild,
§向量配置; spec 000 §插件记忆与向量搜索; issue 22). Plain Python over ``turns.models``.

What is indexed: the memory items ``memory_items(state)`` lists — recall (the last 500 messages,
history summaries) and archival (enabled lorebook entries, characters, plugin data declared
searchable) — one ``MemoryVector`` row per item, keyed by a stable ``item_key`` and the SHA-1 of
the embedded text, so an edited item is re-embedded and a disabled or deleted one never scores
(vectors are only ever scored against the items the caller passes in, which come from the current
source data).

When it is written: ``memory_index_write`` embeds the items that have no vector for their current
text. Every commit (a turn's or a runtime job's) sends ``jobs.memory_index_update`` after it
commits (``memory_index_update``: the session's new messages, summaries, lorebook, characters and
searchable plugin data, once its index is locked); memory-search also calls it before each vector
query (so a turn's recall sees everything committed before it, with the request's own provider
keys, even when the update task has not run yet), and the background re-index of a rebuild calls
it over the session's rows. The first write locks the session to the embedding model that made it
(``MemoryIndex``: provider, modelName, dim, lockedAt). While the configured model differs from the
lock (``stale``) nothing is written and recall is keyword-only. ``VECTOR_BACKEND=none`` turns off
locking, writing and vector recall; existing vectors are kept.

Search method: exact cosine (a dot product of unit vectors, numpy) over the session's vectors,
decoded once per process and kept while the session's MemoryIndex row is unchanged
(``_session_vectors``). Measured on the 2-core machine (tests/bench/memory_recall.py, SQLite):
the vector side of one recall takes ~60 ms at 1,000 items and ~300 ms at 10,000 (~600 ms for the
first recall after a write, which reloads the blobs), dominated by per-item Python work and the
blob load, not by the cosine itself. A session holds at most ~500 recall items plus its archival
items, where this is fine; it stops being fine at a few thousand items per session (recall past
~100 ms per call), where an ANN index in the database (pgvector HNSW, sqlite-vec) with the
candidate filter in SQL would replace it.

Concurrency: embedding happens outside any transaction; the write runs in one transaction that
first locks the session's ``MemoryIndex`` row (``select_for_update``; SQLite serialises writers
anyway) and drops the write when the index generation moved on (a rebuild swapped the index) or the
lock no longer matches. A rebuild takes the same row lock, so it waits for in-flight writes.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Iterable

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from covel.errors import ApiError
from turns.engine.providers.embeddings import EmbeddingChoice, EmbeddingError, Embedder

logger = logging.getLogger("covel.memory")

SOURCE_RECALL = "recall"
SOURCE_ARCHIVAL = "archival"
RECALL_MESSAGE_LIMIT = 500
#: Background re-index states: idle (done or never run), running, failed (the model stopped
#: answering), deferred (the index is locked to a model only the player's requests can reach).
REBUILD_IDLE, REBUILD_RUNNING, REBUILD_FAILED, REBUILD_DEFERRED = "idle", "running", "failed", "deferred"
#: Items embedded per write transaction by the background re-index (progress moves per batch).
REINDEX_BATCH = 64

CODE_UNAVAILABLE = "memory_index_unavailable"
CODE_EMBEDDING_UNAVAILABLE = "embedding_unavailable"
CODE_CHANGED = "memory_index_changed"
CODE_INCARNATION_CHANGED = "session_incarnation_changed"


class MemoryIndexError(ApiError):
    """A rebuild the server refuses: 409 memory_index_unavailable / memory_index_changed /
    session_incarnation_changed, 502 embedding_unavailable (``details.reason``)."""


@dataclass(frozen=True)
class MemoryItem:
    """One searchable memory: ``key`` (stable id, see MemoryVector), ``source`` recall|archival,
    ``text`` (what is embedded and ranked) and the display fields of memory-search."""

    key: str
    source: str
    text: str
    role: str | None = None
    kind: str | None = None
    label: str | None = None

    @functools.cached_property
    def text_hash(self) -> str:
        # cached: recall compares every item's hash twice (index write, then ranking)
        return hashlib.sha1(self.text.encode("utf-8")).hexdigest()


def vectors_enabled() -> bool:
    """False under ``VECTOR_BACKEND=none`` (spec 004 §向量配置)."""
    return getattr(settings, "VECTOR_BACKEND", "database") != "none"


#: ``vector.driver`` of GET /api/health: exact cosine in process memory (numpy) over the vectors the
#: database stores — none of the spec's extension drivers (sqlite-vec / pgvector) is used.
DRIVER_IN_MEMORY = "in-memory"
#: Physical tables holding vectors: one (``turns_memoryvector``) for every model, keyed by session.
VECTOR_TABLES = 1


def vector_status() -> dict[str, Any]:
    """The ``vector`` section of GET /api/health (spec 004 §健康检查): ``{capable, driver,
    modelCount, tableCount}``. Off (``none``) under VECTOR_BACKEND=none or without numpy;
    modelCount: distinct (provider, modelName) the sessions' indexes are locked to."""
    from turns.models import MemoryIndex

    if not vectors_enabled():
        return {"capable": False, "driver": "none", "modelCount": 0, "tableCount": 0}
    try:
        import numpy  # noqa: F401
    except ImportError:
        return {"capable": False, "driver": "none", "modelCount": 0, "tableCount": 0}
    models = MemoryIndex.objects.exclude(provider="").values_list("provider", "model_name").distinct().count()
    return {"capable": True, "driver": DRIVER_IN_MEMORY, "modelCount": models, "tableCount": VECTOR_TABLES}


#: Where history summaries live (the history-compaction plugin's ``summaries`` namespace): the
#: ``role: summary`` results of memory-search recall (spec 000 §插件记忆与向量搜索).
HISTORY_SUMMARY_PLUGIN = "history-compaction"
HISTORY_SUMMARY_NAMESPACE = "summaries"


def history_summaries_of(rows: dict[str, Any]) -> list:
    """Summary segments ``{text, ...}`` of ``rows`` (key order = oldest first) as recall messages."""
    from plugins_app.toolkit.state import MemoryMessage

    out = []
    for key in sorted(rows):
        value = rows[key]
        text = value.get("text") if isinstance(value, dict) else None
        if isinstance(text, str) and text.strip():
            out.append(MemoryMessage(role="summary", text=text, message_id=f"summary-{key}"))
    return out


# ------------------------------------------------------------------------------------ items


def _record_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def memory_items(state: Any, *, scope: str = "all") -> list[MemoryItem]:
    """The memory items of a StateView (turns.engine.tools.context) for ``scope`` recall|archival|all."""
    items: list[MemoryItem] = []
    if scope in ("recall", "all"):
        for n, m in enumerate(state.history_summaries()):
            if m.text.strip():
                items.append(MemoryItem(f"summary:{m.message_id or n}", SOURCE_RECALL, m.text, role="summary"))
        for n, m in enumerate(state.recent_messages(RECALL_MESSAGE_LIMIT)):
            if m.text.strip():
                items.append(MemoryItem(f"message:{m.message_id or 'n' + str(n)}", SOURCE_RECALL, m.text, role=m.role))
    if scope in ("archival", "all"):
        for entry in state.lorebook_entries():
            if entry.enabled and entry.content.strip():
                label = entry.keys[0] if entry.keys else None
                items.append(MemoryItem(f"lorebook:{entry.id}", SOURCE_ARCHIVAL, entry.content, kind="lorebook",
                                        label=label if label and label.strip() else entry.id))
        for c in state.characters():
            parts = [c.name, *c.aliases, c.description]
            if c.fields:
                parts.append(json.dumps(c.fields, ensure_ascii=False))
            items.append(MemoryItem(f"character:{c.id}", SOURCE_ARCHIVAL, "\n".join(p for p in parts if p),
                                    kind="character", label=c.name))
        for record in state.searchable_plugin_data():
            items.append(MemoryItem(f"plugin:{record.plugin_id}/{record.namespace}/{record.key}", SOURCE_ARCHIVAL,
                                    _record_text(record.value), kind=f"{record.plugin_id}/{record.namespace}",
                                    label=record.key))
    return items


def memory_items_of_session(session: Any) -> list[MemoryItem]:
    """The session's committed items (history summaries, messages, lorebook, characters, the
    active plugins' searchable plugin data) for the background re-index and the index update after
    a commit."""
    from turns.engine.snapshot import session_snapshot_load

    snapshot = session_snapshot_load(session)
    return memory_items(_SnapshotItems(snapshot, searchable=_searchable_records(snapshot)))


def _searchable_records(snapshot: Any) -> list:
    """The committed records of the session's active plugins' ``search`` namespaces (the same
    items memory-search ranks, turns.engine.env.ExecutionEnv.searchable_records)."""
    from plugins_app.registry import plugin_registry
    from plugins_app.toolkit.state import SearchableRecord

    registry = plugin_registry()
    out = []
    for plugin_id in snapshot.active_plugins:
        record = registry.get(plugin_id)
        if record is None or not record.is_loaded:
            continue
        for namespace, decl in record.manifest.contributes.data.items():
            if isinstance(decl, dict) and decl.get("search"):
                for key, value in snapshot.plugin_data.get((plugin_id, namespace), {}).items():
                    out.append(SearchableRecord(plugin_id=plugin_id, namespace=namespace, key=key, value=value))
    return out


class _SnapshotItems:
    """The reads ``memory_items`` makes, over a committed SessionSnapshot (no staged proposals)."""

    def __init__(self, snapshot: Any, *, searchable: list | None = None) -> None:
        self._snapshot = snapshot
        self._searchable = list(searchable or [])

    def history_summaries(self) -> list:
        return history_summaries_of(self._snapshot.plugin_data.get((HISTORY_SUMMARY_PLUGIN, HISTORY_SUMMARY_NAMESPACE), {}))

    def recent_messages(self, limit: int) -> list:
        return list(self._snapshot.messages[-limit:])

    def lorebook_entries(self) -> list:
        return list(self._snapshot.lorebook)

    def characters(self) -> list:
        return list(self._snapshot.characters)

    def searchable_plugin_data(self) -> list:
        return self._searchable


# ------------------------------------------------------------------------------------ state


def _index_row(session_id: str):
    from turns.models import MemoryIndex

    return MemoryIndex.objects.filter(session_id=session_id).first()


def _locked_json(row: Any) -> dict[str, Any] | None:
    if row is None or not row.provider:
        return None
    locked_at = row.locked_at.isoformat(timespec="milliseconds").replace("+00:00", "Z") if row.locked_at else None
    return {"provider": row.provider, "modelName": row.model_name, "dim": row.dim, "lockedAt": locked_at}


def _matches(row: Any, embedder: Embedder | None) -> bool:
    return row is not None and embedder is not None and row.provider == embedder.provider \
        and row.model_name == embedder.model_name


def memory_index_state(session_id: str, choice: EmbeddingChoice) -> dict[str, Any]:
    """The body of GET /api/sessions/:id/memory-index: ``available``, ``locked``, ``configured``,
    ``stale``, plus ``progress`` {state, indexed, total} of the background re-index."""
    if not vectors_enabled():
        return {"available": False, "locked": None, "configured": None, "stale": False}
    row = _index_row(session_id)
    locked = _locked_json(row)
    configured = choice.configured
    stale = locked is not None and not _matches(row, choice.embedder)
    progress = {"state": row.rebuild_state if row else REBUILD_IDLE,
                "indexed": row.indexed if row else 0, "total": row.total if row else 0}
    return {"available": True, "locked": locked, "configured": configured, "stale": stale, "progress": progress}


def memory_index_usable(session_id: str, choice: EmbeddingChoice) -> bool:
    """True when vector recall and index writes may run: vectors on, a model configured, and the
    session unlocked or locked to that model (not stale)."""
    if not vectors_enabled() or choice.embedder is None:
        return False
    row = _index_row(session_id)
    return row is None or not row.provider or _matches(row, choice.embedder)


# ------------------------------------------------------------------------------------ writes


def _pack(vector: list[float]) -> bytes:
    import numpy as np

    return np.asarray(vector, dtype="<f4").tobytes()


def memory_index_write(session_id: str, choice: EmbeddingChoice, items: Iterable[MemoryItem], *,
                       generation: int | None = None, count_progress: bool = False) -> int:
    """Embed the items without a vector for their current text and store them (module docstring).
    Returns how many were written (0 when the index is not usable, or the write was dropped).
    ``generation``: the rebuild generation the caller works for (None: whatever is current).
    Raises EmbeddingError when the model does not answer."""
    from sessions.models import Session
    from turns.models import MemoryIndex, MemoryVector

    if not memory_index_usable(session_id, choice):
        return 0
    embedder = choice.embedder
    assert embedder is not None
    items = list({item.key: item for item in items}.values())
    have = _session_vectors(session_id).hashes
    missing = [item for item in items if have.get(item.key) != item.text_hash]
    if not missing:
        return 0
    vectors = embedder.embed([item.text for item in missing])
    dim = len(vectors[0]) if vectors else 0
    with transaction.atomic():
        if not Session.objects.filter(id=session_id).exists():
            return 0
        row, _ = MemoryIndex.objects.get_or_create(session_id=session_id)
        row = MemoryIndex.objects.select_for_update().get(session_id=session_id)
        if generation is not None and row.generation != generation:
            return 0
        if not row.provider:
            row.provider, row.model_name, row.dim, row.locked_at = embedder.provider, embedder.model_name, dim, timezone.now()
        elif not _matches(row, embedder) or row.dim != dim:
            return 0
        MemoryVector.objects.filter(session_id=session_id, item_key__in=[i.key for i in missing]).delete()
        MemoryVector.objects.bulk_create([
            MemoryVector(session_id=session_id, item_key=item.key, source=item.source, text_hash=item.text_hash, dim=dim,
                         vector=_pack(vector))
            for item, vector in zip(missing, vectors)
        ])
        if count_progress:
            row.indexed = min(row.total, row.indexed + len(missing)) if row.total else row.indexed + len(missing)
        row.save()
    return len(missing)


# ------------------------------------------------------------------------------------ vectors in memory

#: Sessions whose decoded vectors this process keeps (least recently used dropped first).
VECTOR_CACHE_SESSIONS = 16
_vector_cache: "OrderedDict[str, _SessionVectors]" = OrderedDict()
_vector_cache_lock = threading.Lock()


@dataclass(frozen=True)
class _SessionVectors:
    """A session's stored vectors decoded once: ``hashes`` item_key → text hash, ``rows`` item_key
    → row of ``matrix`` (n × dim float32, None when empty; rows of another dim are left out)."""

    stamp: tuple | None
    hashes: dict[str, str]
    rows: dict[str, int]
    matrix: Any
    dim: int


def _session_vectors(session_id: str) -> _SessionVectors:
    """The session's vectors, from this process's cache while the session's MemoryIndex row is
    unchanged (every index write and rebuild saves it: ``generation`` + ``updated_at`` is the
    stamp, one single-row query), else loaded from the database. Loading and decoding the blobs is
    what recall spends its time on past a few hundred items (tests/bench/memory_recall.py); the
    stamp is read before the rows, so a write racing the load only makes the next call reload."""
    import numpy as np

    from turns.models import MemoryIndex, MemoryVector

    stamp = MemoryIndex.objects.filter(session_id=session_id).values_list("generation", "updated_at").first()
    with _vector_cache_lock:
        cached = _vector_cache.get(session_id)
        if cached is not None and stamp is not None and cached.stamp == tuple(stamp):
            _vector_cache.move_to_end(session_id)
            return cached
    hashes: dict[str, str] = {}
    rows: dict[str, int] = {}
    blobs: list[bytes] = []
    dim = 0
    for key, text_hash, blob in MemoryVector.objects.filter(session_id=session_id).values_list("item_key", "text_hash", "vector"):
        blob = bytes(blob)
        hashes[key] = text_hash
        dim = dim or len(blob) // 4
        if len(blob) == 4 * dim:
            rows[key] = len(blobs)
            blobs.append(blob)
    matrix = np.frombuffer(b"".join(blobs), dtype="<f4").reshape(len(blobs), dim) if blobs else None
    loaded = _SessionVectors(tuple(stamp) if stamp is not None else None, hashes, rows, matrix, dim)
    if stamp is not None:
        with _vector_cache_lock:
            _vector_cache[session_id] = loaded
            _vector_cache.move_to_end(session_id)
            while len(_vector_cache) > VECTOR_CACHE_SESSIONS:
                _vector_cache.popitem(last=False)
    return loaded


# ------------------------------------------------------------------------------------ search


def memory_vector_rank(session_id: str, choice: EmbeddingChoice, query: str, items: list[MemoryItem], *,
                       query_vector: list[float] | None = None) -> list[tuple[int, float]] | None:
    """(index into ``items``, cosine) of the indexed items, best first; None when vector recall is
    off, stale or failed (the caller ranks by keywords). Indexes missing items first."""
    import numpy as np

    if not items or not memory_index_usable(session_id, choice):
        return None
    try:
        memory_index_write(session_id, choice, items)
        vector = query_vector if query_vector is not None else choice.embedder.embed([query])[0]  # type: ignore[union-attr]
    except EmbeddingError as exc:
        logger.info("memory-search falls back to keywords: %s", exc.message)
        return None
    stored = _session_vectors(session_id)
    if stored.matrix is None or stored.dim != len(vector):
        return None
    hashes, where = stored.hashes, stored.rows
    positions = [i for i, item in enumerate(items) if hashes.get(item.key) == item.text_hash and item.key in where]
    rows = [where[items[i].key] for i in positions]
    if not positions:
        return None
    scores = stored.matrix[np.asarray(rows)] @ np.asarray(vector, dtype=np.float32)
    order = np.argsort(-scores, kind="stable")
    return [(positions[j], float(scores[j])) for j in order]


# ------------------------------------------------------------------------------------ rebuild


def memory_index_rebuild(session: Any, choice: EmbeddingChoice, *, schedule: Any = None) -> dict[str, Any]:
    """POST /api/sessions/:id/memory-index/rebuild (spec 004): probe the configured model's
    dimension (502 embedding_unavailable leaves the index as it was), wait for in-flight writes,
    swap in one transaction (drop the session's vectors and progress, lock to the new model, or
    unlock when none is configured), then re-index in the background (``schedule(session_id,
    generation)`` after commit). Returns the new state. Raises MemoryIndexError."""
    from sessions.models import Session
    from turns.models import MemoryIndex, MemoryVector

    if not vectors_enabled():
        raise MemoryIndexError(409, CODE_UNAVAILABLE, "This server has no vector index (VECTOR_BACKEND=none)")
    before = _index_row(session.id)
    seen = (before.generation, before.provider, before.model_name) if before else (0, "", "")
    incarnation = session.incarnation
    embedder = choice.embedder
    dim = 0
    if embedder is not None:
        try:
            probe = embedder.embed(["dimension probe"])
            dim = len(probe[0])
        except EmbeddingError as exc:
            raise MemoryIndexError(502, CODE_EMBEDDING_UNAVAILABLE, "The configured embedding model did not answer",
                                   {"reason": exc.message, "provider": embedder.provider,
                                    "modelName": embedder.model_name}) from None
    with transaction.atomic():
        current = Session.objects.select_for_update().filter(id=session.id).first()
        if current is None or current.incarnation != incarnation:
            raise MemoryIndexError(409, CODE_INCARNATION_CHANGED,
                                   "The session was deleted and created again while the rebuild waited")
        MemoryIndex.objects.get_or_create(session_id=session.id)
        row = MemoryIndex.objects.select_for_update().get(session_id=session.id)
        if (row.generation, row.provider, row.model_name) != seen:
            raise MemoryIndexError(409, CODE_CHANGED, "Another request changed the session's memory index; read it again")
        MemoryVector.objects.filter(session_id=session.id).delete()
        row.generation += 1
        if embedder is None:
            row.provider, row.model_name, row.dim, row.locked_at = "", "", 0, None
            row.rebuild_state, row.indexed, row.total = REBUILD_IDLE, 0, 0
        else:
            row.provider, row.model_name, row.dim, row.locked_at = embedder.provider, embedder.model_name, dim, timezone.now()
            row.rebuild_state, row.indexed, row.total = REBUILD_RUNNING, 0, len(memory_items_of_session(current))
        row.save()
        if embedder is not None and schedule is not None:
            generation = row.generation
            transaction.on_commit(lambda: schedule(session.id, generation))
    return memory_index_state(session.id, choice)


def memory_index_reindex(session_id: str, generation: int, choice: EmbeddingChoice) -> int:
    """The background half of a rebuild: index the session's items from the first message on, in
    batches, moving ``indexed`` forward; stop when a newer rebuild took over. Failures leave the
    state ``failed`` (memory-search indexes lazily from then on). Returns items written."""
    from sessions.models import Session
    from turns.models import MemoryIndex

    session = Session.objects.filter(id=session_id).first()
    if session is None:
        return 0
    if not memory_index_usable(session_id, choice):
        # The lock came from the request's own routing (X-Slot-Config / X-Provider-Keys), which a
        # worker never sees: memory-search indexes with the request's model from here on.
        MemoryIndex.objects.filter(session_id=session_id, generation=generation).update(
            rebuild_state=REBUILD_DEFERRED, updated_at=timezone.now())
        return 0
    items = memory_items_of_session(session)
    written = 0
    try:
        for start in range(0, len(items), REINDEX_BATCH):
            if MemoryIndex.objects.filter(session_id=session_id, generation=generation).count() == 0:
                return written
            written += memory_index_write(session_id, choice, items[start:start + REINDEX_BATCH], generation=generation,
                                          count_progress=True)
        state = REBUILD_IDLE
    except EmbeddingError as exc:
        logger.warning("memory index rebuild of %s stopped: %s", session_id, exc.message)
        state = REBUILD_FAILED
    done = {"indexed": F("total")} if state == REBUILD_IDLE else {}
    MemoryIndex.objects.filter(session_id=session_id, generation=generation).update(
        rebuild_state=state, updated_at=timezone.now(), **done)
    return written


def memory_index_update(session_id: str, choice: EmbeddingChoice) -> int:
    """Index what a commit added (``jobs.memory_index_update``, sent after every turn or job commit).
    Only for a session whose index is locked (its first recall or a rebuild locked it) and usable
    with ``choice`` (not stale): an unlocked session is indexed by its first memory-search, a
    running re-index covers the commit itself. Returns items written; an embedding failure is
    logged and leaves the rest to the next update or memory-search."""
    from sessions.models import Session

    row = _index_row(session_id)
    if row is None or not row.provider or row.rebuild_state == REBUILD_RUNNING:
        return 0
    if not memory_index_usable(session_id, choice):
        return 0
    session = Session.objects.filter(id=session_id).first()
    if session is None:
        return 0
    try:
        return memory_index_write(session_id, choice, memory_items_of_session(session), generation=row.generation)
    except EmbeddingError as exc:
        logger.info("memory index update of %s skipped: %s", session_id, exc.message)
        return 0


def memory_choice_default() -> EmbeddingChoice:
    """The embedding model of the server's own configuration (llm.toml, server keys): what a
    background worker embeds with."""
    from turns.engine.providers.config import ModelRouter, model_config_active
    from turns.engine.providers.embeddings import embedder_for

    config, _error = model_config_active(settings.COVEL_HOME, path=settings.COVEL_LLM_TOML)
    return embedder_for(ModelRouter(config))
