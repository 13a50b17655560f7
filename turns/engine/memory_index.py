"""The semantic memory index of a session (spec 004 §GET /api/sessions/:id/memory-index, §rebuild,
§向量配置; spec 000 §插件记忆与向量搜索; issue 22). Plain Python over ``turns.models``.

What is indexed: the memory items ``memory_items(state)`` lists — recall (the last 500 messages,
history summaries) and archival (enabled lorebook entries, characters, plugin data declared
searchable) — one ``MemoryVector`` row per item, keyed by a stable ``item_key`` and the SHA-1 of
the embedded text, so an edited item is re-embedded and a disabled or deleted one never scores
(vectors are only ever scored against the items the caller passes in, which come from the current
source data).

When it is written: ``memory_index_write`` embeds the items that have no vector for their current
text. memory-search calls it before each vector query (so a turn's recall sees everything committed
before it, with the request's own provider keys), and the background re-index of a rebuild calls it
over the session's rows. The first write locks the session to the embedding model that made it
(``MemoryIndex``: provider, modelName, dim, lockedAt). While the configured model differs from the
lock (``stale``) nothing is written and recall is keyword-only. ``VECTOR_BACKEND=none`` turns off
locking, writing and vector recall; existing vectors are kept.

Search method: exact cosine (a dot product of unit vectors, numpy) over the session's vectors.
A session holds at most ~500 recall items plus its archival items, where this costs well under a
millisecond per thousand vectors (tests/bench/memory_index.py); it stops being the right tool
somewhere past ~100,000 vectors per session (tens of ms plus loading the blobs), where an ANN index
(pgvector HNSW, sqlite-vec) would replace it.

Concurrency: embedding happens outside any transaction; the write runs in one transaction that
first locks the session's ``MemoryIndex`` row (``select_for_update``; SQLite serialises writers
anyway) and drops the write when the index generation moved on (a rebuild swapped the index) or the
lock no longer matches. A rebuild takes the same row lock, so it waits for in-flight writes.
"""

from __future__ import annotations

import hashlib
import json
import logging
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

    @property
    def text_hash(self) -> str:
        return hashlib.sha1(self.text.encode("utf-8")).hexdigest()


def vectors_enabled() -> bool:
    """False under ``VECTOR_BACKEND=none`` (spec 004 §向量配置)."""
    return getattr(settings, "VECTOR_BACKEND", "database") != "none"


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
    """The session's committed items (messages, lorebook, characters) for the background re-index.
    Searchable plugin data needs the plugin registry and is indexed by memory-search itself."""
    from turns.engine.snapshot import session_snapshot_load

    snapshot = session_snapshot_load(session)
    return memory_items(_SnapshotItems(snapshot))


class _SnapshotItems:
    """The reads ``memory_items`` makes, over a committed SessionSnapshot (no staged proposals)."""

    def __init__(self, snapshot: Any) -> None:
        self._snapshot = snapshot

    def history_summaries(self) -> list:
        return []

    def recent_messages(self, limit: int) -> list:
        return list(self._snapshot.messages[-limit:])

    def lorebook_entries(self) -> list:
        return list(self._snapshot.lorebook)

    def characters(self) -> list:
        return list(self._snapshot.characters)

    def searchable_plugin_data(self) -> list:
        return []


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
    have = dict(MemoryVector.objects.filter(session_id=session_id).values_list("item_key", "text_hash"))
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


# ------------------------------------------------------------------------------------ search


def memory_vector_rank(session_id: str, choice: EmbeddingChoice, query: str, items: list[MemoryItem], *,
                       query_vector: list[float] | None = None) -> list[tuple[int, float]] | None:
    """(index into ``items``, cosine) of the indexed items, best first; None when vector recall is
    off, stale or failed (the caller ranks by keywords). Indexes missing items first."""
    import numpy as np

    from turns.models import MemoryVector

    if not items or not memory_index_usable(session_id, choice):
        return None
    try:
        memory_index_write(session_id, choice, items)
        vector = query_vector if query_vector is not None else choice.embedder.embed([query])[0]  # type: ignore[union-attr]
    except EmbeddingError as exc:
        logger.info("memory-search falls back to keywords: %s", exc.message)
        return None
    rows = {key: (h, bytes(v)) for key, h, v in
            MemoryVector.objects.filter(session_id=session_id).values_list("item_key", "text_hash", "vector")}
    positions, blobs = [], []
    for i, item in enumerate(items):
        row = rows.get(item.key)
        if row is not None and row[0] == item.text_hash and len(row[1]) == 4 * len(vector):
            positions.append(i)
            blobs.append(row[1])
    if not positions:
        return None
    matrix = np.frombuffer(b"".join(blobs), dtype="<f4").reshape(len(positions), len(vector))
    scores = matrix @ np.asarray(vector, dtype=np.float32)
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


def memory_choice_default() -> EmbeddingChoice:
    """The embedding model of the server's own configuration (llm.toml, server keys): what a
    background worker embeds with."""
    from turns.engine.providers.config import ModelRouter, model_config_active
    from turns.engine.providers.embeddings import embedder_for

    config, _error = model_config_active(settings.COVEL_HOME, path=settings.COVEL_LLM_TOML)
    return embedder_for(ModelRouter(config))
