"""Image generation for ``asset.generate`` proposals (spec 000 §Proposal 类型 asset.generate; spec 004
§图像/媒体生成输出): image providers and the one call that stores a generated image as a MediaRef.

Providers (``ImageProvider.generate(prompt, *, size) -> bytes``):

- ``ScriptedImageProvider``: offline and keyless, like the scripted chat model. It draws a real PNG
  (default 64×64) whose two colours come from the prompt's SHA-256, so one prompt always gives the
  same image and different prompts different ones. The encoder is ~20 lines of ``zlib`` + ``struct``
  (hand-rolled on purpose: the server does not depend on an imaging library for one flat picture).
- ``OpenAIImagesProvider``: an OpenAI-compatible images API, ``POST {baseUrl}/images/generations``
  with ``{model, prompt, n: 1, size, response_format: "b64_json"}``; the first ``data[]`` item's
  ``b64_json`` is decoded, or its ``url`` fetched. Requests go through ``covel.outbound`` (the SSRF
  and key rules of every model call); the key is the slot's.

``image_asset_generate(session_id=..., prompt=..., provider=...)`` stores the bytes with
``media_put`` (the MIME is sniffed, so a provider answering something that is not an image fails
``invalid_image``) and returns the MediaRef ``{id, mime, sha256, sizeBytes}``.
Errors: ``ImageGenerationFailed(code, message)`` (``provider_error``, ``bad_response``,
``unreachable``) and media_put's ``MediaInvalid``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import struct
import zlib
from dataclasses import dataclass
from typing import Any, Protocol

from covel import outbound
from media import services

DEFAULT_SIZE = "1024x1024"
SCRIPTED_PIXELS = 64
#: Largest image response body read from a provider (bytes).
MAX_RESPONSE_BYTES = 32 * 1024 * 1024
REQUEST_TIMEOUT_SECONDS = 120.0


class ImageGenerationFailed(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class ImageProvider(Protocol):
    name: str

    def generate(self, prompt: str, *, size: str = DEFAULT_SIZE) -> bytes: ...


def png_encode(width: int, height: int, pixels: bytes) -> bytes:
    """A PNG (8-bit RGB, no interlace) of ``pixels`` (``width*height*3`` bytes, rows top-down)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    stride = width * 3
    raw = b"".join(b"\x00" + pixels[row * stride:(row + 1) * stride] for row in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")


@dataclass
class ScriptedImageProvider:
    """Offline provider: a two-colour diagonal picture derived from the prompt (see module docstring)."""

    name: str = "scripted"
    pixels: int = SCRIPTED_PIXELS

    def generate(self, prompt: str, *, size: str = DEFAULT_SIZE) -> bytes:
        digest = hashlib.sha256(prompt.encode("utf-8")).digest()
        sky, sea = digest[0:3], digest[3:6]
        n = self.pixels
        pixels = b"".join((sky if x + y < n else sea) for y in range(n) for x in range(n))
        return png_encode(n, n, pixels)


@dataclass
class OpenAIImagesProvider:
    """OpenAI-compatible images API (see module docstring). ``key``: covel.outbound.ProviderKey or None."""

    base_url: str
    model: str
    key: Any = None
    is_request_supplied: bool = False
    name: str = "openai"

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        url = self.base_url.rstrip("/") + "/images/generations"
        try:
            with outbound.send("POST", url, is_request_supplied=self.is_request_supplied, key=self.key, json=body,
                               timeout=REQUEST_TIMEOUT_SECONDS) as response:
                raw = outbound.read_limited(response, MAX_RESPONSE_BYTES)
                status = response.status_code
        except outbound.OutboundError as exc:
            raise ImageGenerationFailed("unreachable", str(exc)) from None
        if status >= 400:
            raise ImageGenerationFailed("provider_error", f"the images API answered {status}")
        try:
            return json.loads(raw)
        except ValueError:
            raise ImageGenerationFailed("bad_response", "the images API answered something that is not JSON") from None

    def _fetch(self, url: str) -> bytes:
        try:
            with outbound.send("GET", url, is_request_supplied=True, timeout=REQUEST_TIMEOUT_SECONDS) as response:
                if response.status_code >= 400:
                    raise ImageGenerationFailed("provider_error", f"the image URL answered {response.status_code}")
                return outbound.read_limited(response, MAX_RESPONSE_BYTES)
        except outbound.OutboundError as exc:
            raise ImageGenerationFailed("unreachable", str(exc)) from None

    def generate(self, prompt: str, *, size: str = DEFAULT_SIZE) -> bytes:
        body = {"model": self.model, "prompt": prompt, "n": 1, "size": size, "response_format": "b64_json"}
        answer = self._post(body)
        items = answer.get("data") if isinstance(answer, dict) else None
        first = items[0] if isinstance(items, list) and items and isinstance(items[0], dict) else None
        if first is None:
            raise ImageGenerationFailed("bad_response", "the images API answered without data[0]")
        if isinstance(first.get("b64_json"), str):
            try:
                return base64.b64decode(first["b64_json"], validate=True)
            except (binascii.Error, ValueError):
                raise ImageGenerationFailed("bad_response", "data[0].b64_json is not base64") from None
        if isinstance(first.get("url"), str):
            return self._fetch(first["url"])
        raise ImageGenerationFailed("bad_response", "data[0] has neither b64_json nor url")


def image_asset_generate(*, session_id: str, prompt: str, provider: ImageProvider, size: str = DEFAULT_SIZE) -> dict[str, Any]:
    """Generate one image for ``prompt`` and store it in the session's media library.

    Returns the MediaRef ``{id, mime, sha256, sizeBytes}``. Raises ImageGenerationFailed or
    media.errors' MediaInvalid (``invalid_image`` when the provider's bytes are not an image).
    """
    data = provider.generate(prompt, size=size)
    return services.media_put(session_id=session_id, data=data, declared_type="image/png")
