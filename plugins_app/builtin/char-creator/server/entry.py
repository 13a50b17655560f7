"""char-creator entry module: create-character-form and the player-name form validator."""

from __future__ import annotations

from . import character_form, player_name


def register(api) -> None:
    """Called once by the plugin loader with the host registration API."""
    api.register_tool(character_form.build())
    api.register_form_validator(player_name.VALIDATOR_NAME, player_name.validate_player_name)
