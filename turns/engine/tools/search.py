"""Deferred tools and search-tools (spec 000 §search-tools（框架注入，延迟工具加载）).

A runtime that declares ``tools.defer`` (``true``: its whole whitelist; a list: those names) keeps
the deferred tools' schemas out of the first model request. The framework injects ``search-tools``
(never declared by a manifest: the manifest validator rejects it in ``tools.builtin``); a call
ranks the deferred pool with BM25 (k1=1.2, b=0.75, CJK as adjacent-character bigrams — the
memory-search ranker) over each tool's name, description and parameter field names and
descriptions, and the hits' full definitions join the tool list from the next model request on,
for the rest of this runtime's loop. The next turn starts again from the short list.

Deferring changes only what the model sees first, never the authorization: deferred names stay in
the runtime's authorized set (a model that guesses one can still call it).

How the loop uses it (turns.engine.agent)::

    deferred = DeferredTools.for_runtime(defer, definitions, plugin_id=...)   # None without tools.defer
    if deferred is not None:
        definitions = deferred.definitions          # the live list the loop sends every step
        runtime_tools[SEARCH_TOOLS] = deferred.tool()

``definitions`` is one list object: search-tools appends the activated definitions to it, so the
next request carries them without the loop rebuilding anything. The call itself never reaches a
plugin or the registry; it is a barrier in its batch (default annotations) and does not count as
business work for ``completion.require: tool-use``.
"""

from __future__ import annotations

import threading
from typing import Any, Iterable

from plugins_app.toolkit.definition import Tool, ToolResult, tool
from plugins_app.toolkit.locale import ZH_CN, instruction_locale_for
from plugins_app.toolkit.names import SEARCH_TOOLS
from turns.engine.tools.builtin.memory_search import bm25_rank

#: Default and largest number of tools one search activates.
DEFAULT_LIMIT = 8
MAX_LIMIT = 20
#: Tools never deferred: the loop's completion tool stays in every request.
NEVER_DEFERRED = frozenset({"runtime-done"})

PARAMETERS: dict[str, Any] = {
    "type": "object",
    "required": ["query"],
    "properties": {
        "query": {"type": "string", "minLength": 1,
                  "description": "Capability keywords (any language), e.g. \"switch the scene background\"."},
        "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT,
                  "description": f"Most tools to load (default {DEFAULT_LIMIT}, at most {MAX_LIMIT})."},
    },
    "additionalProperties": False,
}


def _schema_words(schema: Any, out: list[str]) -> None:
    """Field names and descriptions of a parameter schema, at any depth."""
    if isinstance(schema, dict):
        props = schema.get("properties")
        if isinstance(props, dict):
            for name, sub in props.items():
                out.append(str(name))
                _schema_words(sub, out)
        if isinstance(schema.get("description"), str):
            out.append(schema["description"])
        for key in ("items", "anyOf", "oneOf", "allOf", "additionalProperties"):
            if key in schema:
                _schema_words(schema[key], out)
    elif isinstance(schema, list):
        for item in schema:
            _schema_words(item, out)


def search_text(definition: dict[str, Any]) -> str:
    """What search-tools matches a tool on: name (also split at -/_), description, field names and
    field descriptions of its parameter schema."""
    name = str(definition.get("name") or "")
    words = [name, name.replace("-", " ").replace("_", " "), str(definition.get("description") or "")]
    _schema_words(definition.get("parameters"), words)
    return "\n".join(w for w in words if w)


def deferred_names(defer: bool | Iterable[str], offered: Iterable[str]) -> list[str]:
    """The deferred subset of ``offered`` (model order): all of it for ``defer: true`` (but
    runtime-done), the listed names for a list, nothing for ``false``."""
    names = list(offered)
    if defer is True:
        return [n for n in names if n not in NEVER_DEFERRED]
    if not defer or isinstance(defer, bool):
        return []
    wanted = set(defer)
    return [n for n in names if n in wanted and n not in NEVER_DEFERRED]


class DeferredTools:
    """One runtime loop's deferred pool. ``definitions``: the live tool list sent to the model
    (thread-safe appends; the executor may run search-tools on a worker thread)."""

    def __init__(self, visible: list[dict[str, Any]], pool: list[dict[str, Any]], *, plugin_id: str) -> None:
        self._lock = threading.Lock()
        self.plugin_id = plugin_id
        self.pool = {d["name"]: d for d in pool}
        self.activated: list[str] = []
        self.definitions: list[dict[str, Any]] = list(visible)

    @classmethod
    def for_runtime(cls, defer: bool | Iterable[str], definitions: list[dict[str, Any]], *,
                    plugin_id: str) -> "DeferredTools | None":
        """Split a runtime's tool definitions into the first request's list and the deferred pool;
        None when nothing is deferred (then search-tools is not injected)."""
        names = set(deferred_names(defer, [d["name"] for d in definitions]))
        if not names:
            return None
        visible = [d for d in definitions if d["name"] not in names]
        pool = [d for d in definitions if d["name"] in names]
        return cls(visible, pool, plugin_id=plugin_id)

    def activate(self, names: Iterable[str]) -> list[str]:
        """Add the named pool tools to the live list (once each); returns the newly added names.
        Also used by resume to restore the tools a suspended loop had activated (names no longer
        deferred are skipped)."""
        added: list[str] = []
        with self._lock:
            for name in names:
                if name in self.pool and name not in self.activated:
                    self.activated.append(name)
                    self.definitions.append(self.pool[name])
                    added.append(name)
        return added

    def search(self, query: str, limit: int = DEFAULT_LIMIT) -> list[str]:
        """Names of the best BM25 matches in the pool (best first, at most ``limit``)."""
        names = list(self.pool)
        ranked = bm25_rank(query, [search_text(self.pool[n]) for n in names])
        return [names[i] for i, _score in ranked[: max(1, min(MAX_LIMIT, limit))]]

    def description(self) -> str:
        return (f"Search the {len(self.pool)} deferred tools of plugin \"{self.plugin_id}\" that are not loaded yet "
                "(some may be framework tools) and load the best matches: their full definitions are available "
                "from your next step on. Pass capability keywords in any language.")

    def _execute(self, args: dict[str, Any], ctx: Any) -> ToolResult:
        query = args["query"]
        hits = self.search(query, int(args.get("limit") or DEFAULT_LIMIT))
        self.activate(hits)
        zh = instruction_locale_for(getattr(ctx, "locale", None)) == ZH_CN
        if not hits:
            summary = (f"没有与“{query}”匹配的延迟工具，换个说法再搜。" if zh
                       else f'No deferred tool matches "{query}". Try other words.')
        else:
            lines = [f"- {n}: {self.pool[n].get('description') or ''}".rstrip() for n in hits]
            head = "已加载以下工具，下一步起可以调用：" if zh else "Loaded these tools; call them from your next step on:"
            summary = head + "\n" + "\n".join(lines)
        return ToolResult(content={"query": query, "loaded": hits}, summary=summary)

    def tool(self) -> Tool:
        """search-tools as this runtime's own tool (never in the registry; no plugin code runs)."""
        return tool(name=SEARCH_TOOLS, description=self.description(), parameters=PARAMETERS, execute=self._execute)
