"""Property: for every builtin schema and any arguments it accepts, the executor returns an
envelope of the documented shape and never raises."""

import json

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tests.turns.engine.tools.support import REGISTRY, make_context
from plugins_app.toolkit.definition import RuntimeValidator
from turns.engine.tools import (
    TOOL_ERROR_CODES,
    CharacterRecord,
    EventTopic,
    InMemoryStateView,
    LorebookEntry,
    MemoryMessage,
    ToolCall,
    ToolExecutor,
    WorldDimension,
)

STATE = InMemoryStateView(
    characters=[CharacterRecord(id="npc-a", name="Mira", aliases=("the smith",), fields={"hp": 3}, version=2)],
    character_schema={"types": ["npc"], "attributes": [{"id": "hp", "type": "number", "min": 0, "max": 10}]},
    world_dimensions=[WorldDimension("a", {"b": [1, 2]}, 1)],
    messages=[MemoryMessage("user", "Mira forged a key")],
    lorebook=[LorebookEntry("smithy", ("smithy",), "The smithy by the pier.")],
    event_topics=[EventTopic("x.y", "p", {"type": "object"})],
    form_validators={"demo": {"v"}},
)
EXECUTOR = ToolExecutor(REGISTRY)

JSON_SCALARS = st.none() | st.booleans() | st.integers(-1000, 1000) | st.text(max_size=8)
ANY_JSON = st.recursive(JSON_SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=6)


def from_schema(schema):
    """Instances of the JSON Schema subset the builtin tools use (hypothesis-jsonschema does
    not work with our pinned hypothesis)."""
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if "anyOf" in schema:
        return st.one_of([from_schema(s) for s in schema["anyOf"]])
    kind = schema.get("type")
    if isinstance(kind, list):
        return st.one_of([from_schema(dict(schema, type=k)) for k in kind])
    if kind == "string":
        return st.text(min_size=schema.get("minLength", 0), max_size=max(schema.get("minLength", 0), 12))
    if kind == "integer":
        return st.integers(schema.get("minimum", -1000), schema.get("maximum", 1000))
    if kind == "number":
        low = schema.get("minimum", schema.get("exclusiveMinimum", -1000))
        excl = "exclusiveMinimum" in schema
        return st.floats(low, schema.get("maximum", 1000), exclude_min=excl, allow_nan=False) | st.integers(
            int(low) + (1 if excl else 0), int(schema.get("maximum", 1000)))
    if kind == "boolean":
        return st.booleans()
    if kind == "array":
        items = from_schema(schema.get("items", {}))
        return st.lists(items, min_size=schema.get("minItems", 0), max_size=min(schema.get("maxItems", 4), 4) if schema.get("minItems", 0) <= 4 else schema["minItems"])
    if kind == "object":
        props = schema.get("properties", {})
        required = set(schema.get("required", []))
        optional = [k for k in props if k not in required]

        @st.composite
        def objects(draw):
            out = {k: draw(from_schema(props[k])) for k in props if k in required}
            for k in optional:
                if draw(st.booleans()):
                    out[k] = draw(from_schema(props[k]))
            if schema.get("additionalProperties") is not False and not props:
                out.update(draw(st.dictionaries(st.text(min_size=1, max_size=5), JSON_SCALARS, max_size=3)))
            return out

        return objects()
    return ANY_JSON
TOOL_NAMES = sorted(REGISTRY.builtin_names())


def assert_envelope_shape(envelope):
    json.dumps(envelope)
    if "error" in envelope:
        assert set(envelope) == {"error"}
        error = envelope["error"]
        assert set(error) <= {"code", "message", "hint"}
        assert error["code"] in TOOL_ERROR_CODES
        assert isinstance(error["message"], str) and error["message"]
        return
    assert envelope and list(envelope) == [k for k in ("summary", "data", "staged") if k in envelope]
    if "summary" in envelope:
        assert isinstance(envelope["summary"], str)
    if "staged" in envelope:
        staged = envelope["staged"]
        assert set(staged) == {"count", "kinds", "notice"} and staged["count"] >= len(staged["kinds"]) >= 1


@pytest.mark.parametrize("name", TOOL_NAMES)
def test_accepted_arguments_always_give_a_documented_envelope(name):
    schema = REGISTRY.resolve(name, None).tool.parameters_schema
    validator = RuntimeValidator(schema)

    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
    @given(args=from_schema(schema), locale=st.sampled_from(["en-US", "zh-CN"]))
    def check(args, locale):
        assume(validator.is_valid(args))
        outcome = EXECUTOR.execute_one(ToolCall("p1", name, json.dumps(args)), make_context(STATE, locale=locale))
        assert outcome.status in ("success", "failed")
        assert_envelope_shape(outcome.envelope)
        # Arguments the schema accepts never crash a builtin.
        assert outcome.envelope.get("error", {}).get("code") != "internal", outcome.envelope

    check()
