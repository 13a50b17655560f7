"""Server-side extension providers: who provides an extension point, and calling one with a deadline.

An extension is declared in ``contributes.extensions`` as ``{point, id, order?, slot?}``; a plugin
whose entry registered a provider for it (``api.register_extension(point, id, provider)``) answers
calls at that point. The caller decides which plugins may take part (active in the session, code
granted); this module only orders them and bounds each call (spec 004 §Session UI projections:
"media.image-flow@1 扩展给每个提供者 500 ms 的时间，失败的提供者被跳过").

Pure Python: no Django.
"""
from __future__ import annotations

import concurrent.futures
import logging
from dataclasses import dataclass
from typing import Any, Sequence

from plugins_app.registry import HOST_LOADED

logger = logging.getLogger(__name__)

PROVIDER_TIMEOUT_MS = 500
# Provider calls run here so a slow one cannot hold the request past its deadline. A provider that
# never returns keeps its worker; the pool is bounded so such a plugin cannot spawn threads without end.
_POOL = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="covel-extension")


class ExtensionFailed(Exception):
    """A provider raised, timed out or answered something other than a JSON object."""


@dataclass(frozen=True)
class ExtensionProvider:
    """One registered provider of ``point``: its plugin, the declaration and the callable."""

    plugin_id: str
    extension_id: str
    declaration: dict[str, Any]
    provider: Any


def extension_providers(registry: Any, plugin_ids: Sequence[str], point: str) -> list[ExtensionProvider]:
    """Registered providers of ``point`` among ``plugin_ids`` (loaded plugins only), ordered by the
    declaration's ``order`` (absent sorts last), then by the order of ``plugin_ids``."""
    found: list[tuple[int, int, int, ExtensionProvider]] = []
    for plugin_rank, plugin_id in enumerate(plugin_ids):
        record = registry.get(plugin_id)
        if record is None or record.host_state != HOST_LOADED:
            continue
        for index, declared in enumerate(record.manifest.contributes.extensions):
            if declared.get("point") != point:
                continue
            registration = record.registrations.extensions.get(declared.get("id"))
            if registration is None:
                continue
            order = declared.get("order")
            rank = order if isinstance(order, int) and not isinstance(order, bool) else 2**31
            found.append((rank, plugin_rank, index,
                          ExtensionProvider(plugin_id, str(declared.get("id")), dict(declared), registration.target)))
    found.sort(key=lambda item: item[:3])
    return [item[3] for item in found]


def extension_call(provider: ExtensionProvider, context: dict[str, Any], *, timeout_ms: int = PROVIDER_TIMEOUT_MS) -> dict[str, Any]:
    """Call ``provider(context)`` and return its JSON object answer within ``timeout_ms``.

    Raises ExtensionFailed when the provider raises, is late (its thread is left to finish on its
    own; the answer is dropped) or returns anything but a dict.
    """
    future = _POOL.submit(provider.provider, dict(context))
    try:
        answer = future.result(timeout=timeout_ms / 1000)
    except concurrent.futures.TimeoutError:
        future.cancel()
        raise ExtensionFailed(f"{provider.plugin_id}:{provider.extension_id} did not answer within {timeout_ms} ms") from None
    except Exception as exc:  # plugin code may raise anything; the provider is skipped
        logger.warning("extension %s:%s failed: %s", provider.plugin_id, provider.extension_id, exc.__class__.__name__)
        raise ExtensionFailed(f"{provider.plugin_id}:{provider.extension_id} failed") from exc
    if not isinstance(answer, dict):
        raise ExtensionFailed(f"{provider.plugin_id}:{provider.extension_id} answered {type(answer).__name__}, not an object")
    return answer
