"""The emitted event types are the spec's tables plus documented additions (spec 004 §SSE 协议)."""
from __future__ import annotations

from pathlib import Path

import pytest
from django.test import override_settings

from turns import event_types
from turns.engine import trace as T

README = Path(__file__).resolve().parents[2] / "README.md"


def test_every_forwarded_type_is_a_known_type():
    assert T.FORWARDED_EVENT_TYPES <= event_types.KNOWN_EVENT_TYPES
    assert not (event_types.SPEC_EVENT_TYPES & event_types.SERVER_EVENT_TYPES)


def test_every_server_addition_is_documented_in_the_readme():
    text = README.read_text(encoding="utf-8")
    section = text[text.index("- **Event types.**"):]
    missing = [t for t in sorted(event_types.SERVER_EVENT_TYPES) if f"`{t}`" not in section]
    assert missing == []


def test_an_unknown_type_is_refused_in_strict_mode_and_tolerated_otherwise():
    with override_settings(COVEL_STRICT_EVENT_TYPES=True):
        with pytest.raises(ValueError, match="turn.finished"):
            event_types.event_type_check("turn.finished")
        event_types.event_type_check("execution.completed")
    with override_settings(COVEL_STRICT_EVENT_TYPES=False):
        event_types.event_type_check("turn.finished")
