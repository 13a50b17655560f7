"""tool(): construction errors, annotations, schema generation and argument validation."""

import pydantic
import pytest

from turns.engine.tools import ToolDefinitionError, ToolError, tool


def _noop(args, ctx):
    return None


@pytest.mark.parametrize(
    ("kwargs", "text"),
    [
        ({"annotations": {"readOnly": True, "stagesWrites": True}}, "stagesWrites"),
        ({"annotations": {"concurrencySafe": True}}, "concurrencySafe: true requires readOnly: true"),
        ({"timeout_ms": 0}, "timeoutMs"),
        ({"timeout_ms": 600_001}, "timeoutMs"),
        ({"timeout_ms": 1.5}, "timeoutMs"),
        ({"timeout_ms": True}, "timeoutMs"),
    ],
)
def test_invalid_definitions_raise_with_the_tool_name(kwargs, text):
    with pytest.raises(ToolDefinitionError) as info:
        tool(name="lookup-note", description="Read one note.", execute=_noop, **kwargs)
    assert str(info.value).startswith('Tool "lookup-note":')
    assert text in str(info.value)


def test_timeout_bounds_are_inclusive():
    assert tool(name="a", description="d", execute=_noop, timeout_ms=1).timeout_ms == 1
    assert tool(name="b", description="d", execute=_noop, timeout_ms=600_000).timeout_ms == 600_000


def test_annotations_default_to_writing_and_not_concurrency_safe():
    ann = tool(name="w", description="d", execute=_noop).annotations
    assert ann.to_json() == {"readOnly": False, "stagesWrites": True, "idempotent": False, "concurrencySafe": False}
    ro = tool(name="r", description="d", execute=_noop, annotations={"readOnly": True}).annotations
    assert ro.stages_writes is False


def test_unicode_property_patterns_are_hidden_from_the_model_but_enforced():
    t = tool(
        name="named",
        description="d",
        parameters={
            "type": "object",
            "required": ["name"],
            "properties": {"name": {"type": "string", "pattern": r"^\p{Letter}+$"}, "code": {"type": "string", "pattern": "^[a-z]+$"}},
        },
        execute=_noop,
    )
    assert "pattern" not in t.model_parameters["properties"]["name"]
    assert t.model_parameters["properties"]["code"]["pattern"] == "^[a-z]+$"
    assert t.parse_arguments({"name": "Mira"}).value == {"name": "Mira"}
    with pytest.raises(ToolError) as info:
        t.parse_arguments({"name": "Mira7"})
    assert info.value.code == "invalid-input"
    assert "name" in info.value.message


def test_pydantic_parameters_give_the_model_instance_to_execute():
    class Echo(pydantic.BaseModel):
        value: str = pydantic.Field(min_length=1, max_length=80, description="Value to echo")

    t = tool(name="echo-value", description="Echo one short value.", parameters=Echo, execute=_noop)
    assert t.definition()["parameters"]["properties"]["value"]["maxLength"] == 80
    parsed = t.parse_arguments('{"value": "hi"}')
    assert isinstance(parsed.value, Echo) and parsed.value.value == "hi"
    for bad in ('{}', '{"value": ""}', '{"value": "' + "x" * 81 + '"}'):
        with pytest.raises(ToolError) as info:
            t.parse_arguments(bad)
        assert info.value.code == "invalid-input"
        assert info.value.details["issues"][0]["path"] == "value"


def test_string_encoded_arrays_and_objects_are_parsed_and_validated_again():
    t = tool(
        name="batch",
        description="d",
        parameters={
            "type": "object",
            "properties": {"items": {"type": "array", "items": {"type": "object", "required": ["id"]}}},
        },
        execute=_noop,
    )
    parsed = t.parse_arguments({"items": '[{"id":"a"},{"id":"b"}'})
    assert parsed.value == {"items": [{"id": "a"}, {"id": "b"}]}
    assert parsed.repaired is True
    with pytest.raises(ToolError) as info:
        t.parse_arguments({"items": '[{"name":"a"}]'})
    assert "id" in info.value.message


def test_unparseable_field_text_reports_reason_position_and_asks_for_the_value_itself():
    t = tool(name="batch", description="d", parameters={"type": "object", "properties": {"items": {"type": "array"}}}, execute=_noop)
    with pytest.raises(ToolError) as info:
        t.parse_arguments({"items": '[{"id":"a"},{"id":'})
    assert info.value.code == "invalid-input"
    assert "items" in info.value.message and "char" in info.value.message
    assert "Pass the array or object itself" in info.value.message


def test_defaults_are_filled_for_json_schema_parameters():
    t = tool(name="d", description="d", parameters={"type": "object", "properties": {"n": {"type": "integer", "default": 5}}}, execute=_noop)
    assert t.parse_arguments("{}").value == {"n": 5}


def test_non_object_parameters_are_rejected():
    with pytest.raises(ToolDefinitionError):
        tool(name="x", description="d", parameters={"type": "string"}, execute=_noop)
    with pytest.raises(ToolDefinitionError):
        tool(name="x", description="d", parameters={"type": "object", "properties": {"a": {"type": 7}}}, execute=_noop)
