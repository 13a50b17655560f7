"""scene-prompts entry module: registers generate-scene-prompts. The ui.slot@1 `choices`
extension needs no provider: the host projects stage.choices@1 from the scene-prompts@1 output."""

from __future__ import annotations

from . import generate


def register(api) -> None:
    """Called once by the plugin loader with the host registration API."""
    api.register_tool(generate.build())
