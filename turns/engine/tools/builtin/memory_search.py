"""memory-search: hybrid recall over recall (messages + summaries) and archival (lorebook,
characters, searchable plugin data) (spec 000, memory-search, 插件记忆与向量搜索).

Keywords: both sources rank with BM25 (k1=1.2, b=0.75). CJK text is split into adjacent-character
bigrams; English words are lower-cased with plural and possessive endings folded to the base form.

Vectors: when the call's context carries the turn's model router (``ToolContext.model_router``),
vectors are on (``VECTOR_BACKEND`` is not ``none``), an embedding model is configured (the
``memory`` slot, or the offline default) and the session's index is not stale, each source is also
ranked by cosine similarity (turns.engine.memory_index, one query embedding shared by both
sources), and the two rankings are fused by reciprocal rank (k=60; BM25 hits below a tenth of the
best BM25 score are left out of the fusion, so words that nearly every item shares do not vote).
When the vector side is off or fails, a source ranks by BM25 alone. Scores are comparable only
inside their own source.
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass
from typing import Any

from turns.engine.tools.context import CallContext
from plugins_app.toolkit.definition import READ_ONLY_SAFE, Tool, ToolResult, tool
from turns.engine.tools.envelope import UUID_RE

NAME = "memory-search"
RECALL_MESSAGE_LIMIT = 500
EXCERPT_MAX_CHARS = 500
DEFAULT_LIMIT = 5
MAX_LIMIT = 20
BM25_K1 = 1.2
BM25_B = 0.75

_CJK = r"\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_TOKEN_RE = re.compile(rf"[{_CJK}]+|[a-z0-9]+(?:['’][a-z]+)?")
_CJK_RE = re.compile(rf"^[{_CJK}]+$")
_UUID_ONLY_RE = re.compile(rf"^{UUID_RE.pattern}$")

PARAMETERS: dict[str, Any] = {
    "type": "object",
    "required": ["query"],
    "properties": {
        "query": {
            "type": "string",
            "minLength": 1,
            "description": "Names and keywords to look for; several phrasings may be given together.",
        },
        "scope": {"enum": ["recall", "archival", "all"], "default": "all"},
        "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT},
    },
    "additionalProperties": False,
}


def stem(word: str) -> str:
    """Fold English possessives and plurals: lamp's/lamps'→lamp, cities→city, boxes→box, lamps→lamp."""
    if word.endswith(("'s", "’s")):
        word = word[:-2]
    word = word.rstrip("'’")
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 4 and word.endswith(("sses", "xes", "ches", "shes", "zes")):
        return word[:-2]
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def tokenize(text: str) -> list[str]:
    """BM25 terms: CJK runs as bigrams (a lone character stays a unigram), words stemmed."""
    terms: list[str] = []
    for match in _TOKEN_RE.finditer(unicodedata.normalize("NFKC", text).lower()):
        token = match.group(0)
        if _CJK_RE.match(token):
            if len(token) == 1:
                terms.append(token)
            else:
                terms.extend(token[i : i + 2] for i in range(len(token) - 1))
        else:
            terms.append(stem(token))
    return terms


def bm25_rank(query: str, texts: list[str]) -> list[tuple[int, float]]:
    """(index, score) of texts with a positive BM25 score, best first (ties keep input order)."""
    q_terms = set(tokenize(query))
    docs = [Counter(tokenize(t)) for t in texts]
    if not q_terms or not docs:
        return []
    n = len(docs)
    avg_len = sum(sum(d.values()) for d in docs) / n or 1.0
    df = {term: sum(1 for d in docs if term in d) for term in q_terms}
    scored = []
    for i, doc in enumerate(docs):
        length = sum(doc.values())
        score = 0.0
        for term in q_terms:
            tf = doc.get(term, 0)
            if not tf:
                continue
            idf = math.log(1 + (n - df[term] + 0.5) / (df[term] + 0.5))
            score += idf * tf * (BM25_K1 + 1) / (tf + BM25_K1 * (1 - BM25_B + BM25_B * length / avg_len))
        if score > 0:
            scored.append((i, score))
    return sorted(scored, key=lambda t: -t[1])


def excerpt(text: str, query: str) -> str:
    """≤500 characters of body around the first query hit (the start when none), with ellipses."""
    if len(text) <= EXCERPT_MAX_CHARS:
        return text
    lowered = unicodedata.normalize("NFKC", text).lower()
    position = -1
    for match in _TOKEN_RE.finditer(unicodedata.normalize("NFKC", query).lower()):
        token = match.group(0)
        probes = [token[i : i + 2] for i in range(max(1, len(token) - 1))] if _CJK_RE.match(token) else [token, stem(token)]
        for probe in probes:
            found = lowered.find(probe)
            if found >= 0 and (position < 0 or found < position):
                position = found
    start = 0 if position < 0 else max(0, position - EXCERPT_MAX_CHARS // 4)
    start = min(start, len(text) - EXCERPT_MAX_CHARS)
    body = text[start : start + EXCERPT_MAX_CHARS]
    return ("…" if start > 0 else "") + body + ("…" if start + EXCERPT_MAX_CHARS < len(text) else "")


@dataclass
class _Doc:
    source: str
    text: str
    role: str | None = None
    kind: str | None = None
    key: str | None = None


def _readable_key(*candidates: str | None) -> str | None:
    for c in candidates:
        if c and c.strip() and not _UUID_ONLY_RE.match(c.strip()):
            return c.strip()
    return None


def _record_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _recall_docs(ctx: CallContext) -> list[_Doc]:
    docs = [_Doc("recall", m.text, role="summary") for m in ctx.state.history_summaries()]
    docs += [_Doc("recall", m.text, role=m.role) for m in ctx.state.recent_messages(RECALL_MESSAGE_LIMIT)]
    return [d for d in docs if d.text.strip()]


def _archival_docs(ctx: CallContext) -> list[_Doc]:
    docs = []
    for entry in ctx.state.lorebook_entries():
        if entry.enabled and entry.content.strip():
            key = _readable_key(entry.keys[0] if entry.keys else None, entry.id)
            docs.append(_Doc("archival", entry.content, kind="lorebook", key=key))
    for c in ctx.state.characters():
        parts = [c.name, *c.aliases, c.description]
        if c.fields:
            parts.append(json.dumps(c.fields, ensure_ascii=False))
        docs.append(_Doc("archival", "\n".join(p for p in parts if p), kind="character", key=c.name))
    for record in ctx.state.searchable_plugin_data():
        docs.append(
            _Doc("archival", _record_text(record.value), kind=f"{record.plugin_id}/{record.namespace}",
                 key=_readable_key(record.key))
        )
    return docs


def _search(docs: list[_Doc], query: str, limit: int) -> list[tuple[_Doc, float]]:
    return [(docs[i], score) for i, score in bm25_rank(query, [d.text for d in docs])[:limit]]


RRF_K = 60
#: BM25 hits below this share of the best score do not vote in the fusion.
BM25_FUSION_FLOOR = 0.1


def fuse(keyword: list[tuple[int, float]], vector: list[tuple[int, float]], limit: int) -> list[tuple[int, float]]:
    """Reciprocal-rank fusion of two rankings of the same items: (index, fused score), best first."""
    top = keyword[0][1] if keyword else 0.0
    scores: dict[int, float] = {}
    for rank, (i, score) in enumerate(k for k in keyword if k[1] >= BM25_FUSION_FLOOR * top):
        scores[i] = scores.get(i, 0.0) + 1.0 / (RRF_K + rank + 1)
    for rank, (i, _cos) in enumerate(vector[: max(limit * 4, 20)]):
        scores[i] = scores.get(i, 0.0) + 1.0 / (RRF_K + rank + 1)
    return sorted(scores.items(), key=lambda t: -t[1])[:limit]


def _thread_connection_close() -> None:
    """Close the database connection a tool worker thread opened (the executor's threads are not
    Django's request threads; an open connection would outlive the call)."""
    import threading

    from django.db import connection

    if threading.current_thread() is not threading.main_thread() and not connection.in_atomic_block:
        connection.close()


def _hybrid(ctx: CallContext, query: str, scope: str, limit: int) -> tuple[list, list] | None:
    """(recall hits, archival hits) ranked by BM25 fused with vectors, or None when the vector
    side is off for this call (no router in the context, vectors off, stale, or it failed)."""
    router = getattr(ctx, "model_router", None)
    if router is None:
        return None
    from turns.engine import memory_index
    from turns.engine.providers.embeddings import embedder_for

    items = memory_index.memory_items(ctx.state, scope=scope)
    choice = embedder_for(router)
    try:
        ranked = memory_index.memory_vector_rank(ctx.session_id, choice, query, items)
    finally:
        _thread_connection_close()
    if ranked is None:
        return None
    out = []
    for source in ("recall", "archival"):
        positions = [i for i, item in enumerate(items) if item.source == source]
        if not positions:
            out.append([])
            continue
        local = {p: n for n, p in enumerate(positions)}
        docs = [_Doc(source, items[p].text, role=items[p].role, kind=items[p].kind,
                     key=_readable_key(items[p].label) if source == "archival" else None) for p in positions]
        keyword = bm25_rank(query, [d.text for d in docs])
        vector = [(local[i], score) for i, score in ranked if i in local]
        out.append([(docs[i], score) for i, score in fuse(keyword, vector, limit)])
    return out[0], out[1]


def interleave(recall: list[Any], archival: list[Any], limit: int) -> list[Any]:
    """Alternate by rank, recall first on equal rank; the other source fills when one runs out."""
    out: list[Any] = []
    for i in range(max(len(recall), len(archival))):
        if i < len(recall):
            out.append(recall[i])
        if i < len(archival):
            out.append(archival[i])
    return out[:limit]


def _execute(args: dict[str, Any], ctx: CallContext) -> ToolResult:
    query, scope, limit = args["query"], args.get("scope", "all"), args.get("limit", DEFAULT_LIMIT)
    hybrid = _hybrid(ctx, query, scope, limit)
    if hybrid is not None:
        recall, archival = hybrid
    else:
        recall = _search(_recall_docs(ctx), query, limit) if scope in ("recall", "all") else []
        archival = _search(_archival_docs(ctx), query, limit) if scope in ("archival", "all") else []
    hits = interleave(recall, archival, limit) if scope == "all" else (recall or archival)[:limit]
    results = []
    lines = []
    for n, (doc, score) in enumerate(hits, 1):
        text = excerpt(doc.text, query)
        item: dict[str, Any] = {"source": doc.source, "text": text, "score": round(score, 4)}
        if doc.role:
            item["role"] = doc.role
        if doc.kind:
            item["kind"] = doc.kind
        if doc.key:
            item["key"] = doc.key
        results.append(item)
        if doc.source == "recall":
            lines.append(f"{n}. [recall] {doc.role}: {text}")
        else:
            where = f"{doc.kind}: {doc.key}" if doc.key else doc.kind
            lines.append(f"{n}. [archival] ({where}) {text}")
    if lines:
        summary = f'Memories matching "{query}" ({len(lines)}):\n' + "\n".join(lines)
    else:
        summary = f'No memories matched "{query}". Try other names or phrasings of the same thing.'
    return ToolResult(content={"results": results}, summary=summary)


def build() -> Tool:
    return tool(
        name=NAME,
        description=(
            "Search memory: conversation history and summaries (recall) and long-term knowledge "
            "(archival: lorebook, characters, searchable plugin data). Matching is literal: include "
            "the names involved, and give several phrasings at once."
        ),
        parameters=PARAMETERS,
        annotations=READ_ONLY_SAFE,
        execute=_execute,
    )
