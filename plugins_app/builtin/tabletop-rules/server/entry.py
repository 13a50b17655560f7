"""tabletop-rules entry module: the `point-buy` form validator."""

from __future__ import annotations

from . import rules


def register(api) -> None:
    """Called once by the plugin loader with the host registration API."""
    api.register_form_validator(rules.VALIDATOR, rules.validate_point_buy)
