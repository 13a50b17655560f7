"""Embedding models for the memory index: the ``memory`` model slot (spec 004 §GET
/api/sessions/:id/memory-index, issue 22).

Which model embeds (``embedder_for(router)``):

- ``[covel.memory]`` naming a provider (``openai``, ``ollama``, ``my-lab``...): an
  OpenAI-compatible ``POST {baseUrl}/embeddings`` (``{"model", "input": [..]}`` →
  ``{"data": [{"index", "embedding"}]}``), sent through ``covel.outbound.send`` with the key the
  router picks for the slot (``ModelRouter.key_for``: the request's ``X-Provider-Keys`` entry, or
  the server's ``{PROVIDER}_API_KEY`` only for a trusted origin), the SSRF guard and the model
  relay for a request-supplied preset, exactly as a chat call on that slot.
- no ``memory`` slot, or one whose provider is ``scripted`` / ``local``: the offline default,
  WordLlama ``l2_supercat`` (PyPI ``wordllama``, MIT; its 256-dimension token-embedding table,
  16 MB, ships inside the wheel, so nothing is downloaded): average-pooled static token
  embeddings over the Llama-2 tokenizer. Load ≈0.6 s once per process; ≈20,000 short texts/s on
  one core of the 2-core dev machine. It is English-centred: CJK text falls back on its byte
  tokens and recalls weakly (BM25 with CJK bigrams still carries it in the hybrid ranking).
  When ``wordllama`` is not installed the default is ``None``: no semantic side, keyword recall only.
- provider ``none``: no embedding model (``configured`` is null; keyword recall only).

Vectors come back L2-normalised (float32), so cosine similarity is a dot product.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

from covel import outbound
from turns.engine.providers import config as llm

PROVIDER_LOCAL = "local"
PROVIDER_NONE = "none"
LOCAL_MODEL_NAME = "wordllama-l2-supercat-256"
LOCAL_DIM = 256
#: Texts sent in one ``/embeddings`` request.
BATCH_SIZE = 64
#: Most bytes of an ``/embeddings`` answer read (64 texts x 3072 floats as JSON fits easily).
RESPONSE_MAX_BYTES = 32 * 1024 * 1024
TIMEOUT_SECONDS = 30.0


class EmbeddingError(Exception):
    """The embedding model did not answer: ``code`` ("unreachable" | "provider_error" |
    "bad_response" | "not_configured" | a covel.outbound refusal code), ``message`` (never a key)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class Embedder(Protocol):
    """An embedding model: ``provider`` / ``model_name`` identify it (the index lock)."""

    provider: str
    model_name: str

    def embed(self, texts: list[str]) -> list[list[float]]:
        """One unit-length vector per text, in order. Raises EmbeddingError."""
        ...


def _normalise(rows: Any) -> list[list[float]]:
    import numpy as np

    matrix = np.asarray(rows, dtype=np.float32)
    if matrix.ndim != 2:
        raise EmbeddingError("bad_response", "the embedding answer is not a list of vectors")
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return (matrix / norms).tolist()


_local_lock = threading.Lock()
_local_model: Any = None


def local_model_available() -> bool:
    """True when the offline model's package is installed (nothing is loaded)."""
    import importlib.util

    return importlib.util.find_spec("wordllama") is not None


def _local_model_load() -> Any:
    """The WordLlama inference object, loaded once per process from the files in its wheel.
    (``WordLlama.load()`` would look for the tokenizer in the wrong folder and try the network.)"""
    global _local_model
    with _local_lock:
        if _local_model is None:
            from pathlib import Path

            import wordllama
            from safetensors import safe_open
            from tokenizers import Tokenizer
            from wordllama.inference import WordLlamaInference

            root = Path(wordllama.__file__).parent
            with safe_open(str(root / "weights" / "l2_supercat_256.safetensors"), framework="np", device="cpu") as f:
                table = f.get_tensor("embedding.weight")
            tokenizer = Tokenizer.from_file(str(root / "tokenizers" / "l2_supercat_tokenizer_config.json"))
            _local_model = WordLlamaInference(table, tokenizer)
        return _local_model


class LocalEmbedder:
    """The offline default (see module docstring). Thread-safe after the first load."""

    provider = PROVIDER_LOCAL
    model_name = LOCAL_MODEL_NAME

    def embed(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        try:
            model = _local_model_load()
            return _normalise(model.embed(list(texts), norm=True))
        except EmbeddingError:
            raise
        except Exception as exc:  # a broken install must read as "no answer", not a 500
            raise EmbeddingError("unreachable", f"the offline embedding model failed: {type(exc).__name__}") from None


class OpenAIEmbedder:
    """``POST {base_url}/embeddings`` on an OpenAI-compatible endpoint (see module docstring)."""

    def __init__(self, *, provider: str, model_name: str, base_url: str | None, key: outbound.ProviderKey | None,
                 is_request_supplied: bool = False, relay: httpx.BaseTransport | None = None,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.provider = provider
        self.model_name = model_name
        self.base_url = base_url.rstrip("/") if base_url else None
        self._key = key
        self.is_request_supplied = is_request_supplied
        self.relay = relay
        self.transport = transport

    def __repr__(self) -> str:  # never the key
        return f"OpenAIEmbedder({self.provider!r}, {self.model_name!r})"

    def _batch(self, texts: list[str]) -> list[list[float]]:
        body = {"model": self.model_name, "input": texts}
        try:
            with outbound.send("POST", f"{self.base_url}/embeddings", is_request_supplied=self.is_request_supplied,
                               key=self._key, json=body, headers={"Content-Type": "application/json"},
                               timeout=TIMEOUT_SECONDS, transport=self.transport, relay=self.relay) as response:
                status = response.status_code
                raw = outbound.read_limited(response, RESPONSE_MAX_BYTES)
        except outbound.OutboundError as exc:
            code = exc.code if exc.code in outbound.REFUSAL_CODES else "unreachable"
            raise EmbeddingError(code, exc.message) from None
        except httpx.HTTPError as exc:
            raise EmbeddingError("unreachable", f"the embedding answer broke off ({type(exc).__name__})") from None
        if status >= 300:
            raise EmbeddingError("provider_error", f"the embedding endpoint answered HTTP {status}")
        try:
            data = json.loads(raw)["data"]
            rows = sorted(data, key=lambda item: item.get("index", 0))
            vectors = [row["embedding"] for row in rows]
        except (ValueError, KeyError, TypeError, AttributeError):
            raise EmbeddingError("bad_response", "the embedding endpoint's answer is not {data: [{embedding}]}") from None
        if len(vectors) != len(texts) or not all(isinstance(v, list) and v for v in vectors):
            raise EmbeddingError("bad_response", "the embedding endpoint returned the wrong number of vectors")
        return _normalise(vectors)

    def embed(self, texts: list[str]) -> list[list[float]]:
        if not self.base_url:
            raise EmbeddingError("not_configured", f"provider {self.provider!r} has no known endpoint; set baseUrl")
        out: list[list[float]] = []
        for start in range(0, len(texts), BATCH_SIZE):
            out.extend(self._batch(texts[start:start + BATCH_SIZE]))
        return out


@dataclass(frozen=True)
class EmbeddingChoice:
    """What the configuration selects: ``embedder`` (None: no embedding model)."""

    embedder: Embedder | None

    @property
    def configured(self) -> dict[str, str] | None:
        """``{provider, modelName}`` of the selected model, or None (spec 004 ``configured``)."""
        if self.embedder is None:
            return None
        return {"provider": self.embedder.provider, "modelName": self.embedder.model_name}


def embedder_for(router: llm.ModelRouter) -> EmbeddingChoice:
    """The embedding model the router's ``memory`` slot selects (module docstring)."""
    slot = router.config.slots.get(llm.SLOT_MEMORY)
    if slot is None or slot.provider in (llm.PROVIDER_SCRIPTED, PROVIDER_LOCAL):
        return EmbeddingChoice(LocalEmbedder() if local_model_available() else None)
    if slot.provider == PROVIDER_NONE:
        return EmbeddingChoice(None)
    key = router.key_for(slot)
    return EmbeddingChoice(OpenAIEmbedder(provider=slot.provider, model_name=slot.model, base_url=slot.endpoint, key=key,
                                          is_request_supplied=slot.is_request_supplied,
                                          relay=router.relay if slot.is_request_supplied else None))
