"""Argument JSON repair: each rule with the spec's own examples, and the spec's non-rules."""

import pytest

from plugins_app.toolkit.repair import ArgumentJsonError, parse_arguments_json


def test_valid_json_is_parsed_without_a_rule():
    assert parse_arguments_json('{"a": [1, 2]}').rule is None


def test_drops_up_to_four_trailing_extra_closers():
    repaired = parse_arguments_json('{"updates":[{"id":1}]}]}')
    assert repaired.value == {"updates": [{"id": 1}]}
    assert repaired.rule == "trailing-closers"


def test_more_than_four_trailing_closers_are_not_dropped():
    with pytest.raises(ArgumentJsonError):
        parse_arguments_json('{"a":1}]]]]]')


def test_escapes_paired_unescaped_quotes_inside_a_value():
    repaired = parse_arguments_json('{"note": "铭文把它叫作"锁"而不是灯。"}')
    assert repaired.value == {"note": '铭文把它叫作"锁"而不是灯。'}
    assert repaired.rule == "unescaped-quotes"


def test_one_quote_too_many_is_a_structural_error():
    with pytest.raises(ArgumentJsonError):
        parse_arguments_json('{"name": "Mira"", "age": 3}')


def test_quote_followed_by_comma_or_colon_inside_a_value_is_not_repaired():
    with pytest.raises(ArgumentJsonError):
        parse_arguments_json('{"note": "he said "stop", then left"}')
    with pytest.raises(ArgumentJsonError):
        parse_arguments_json('{"note": "the sign "gate": closed"}')


def test_closes_an_array_element_that_was_left_open():
    repaired = parse_arguments_json('[{"id":"a","attributes":{"kind":"lamp"}, {"id":"b"}]')
    assert repaired.value == [{"id": "a", "attributes": {"kind": "lamp"}}, {"id": "b"}]
    assert repaired.rule == "unclosed-element"


def test_missing_key_reading_is_not_turned_into_two_elements():
    # "summary":"…", {"role":"…"}}] — the other reading (a missing key) must still fail.
    with pytest.raises(ArgumentJsonError):
        parse_arguments_json('[{"summary":"x","attributes":{"kind":"lamp"}, {"role":"y"}}]')


def test_drops_an_object_closer_where_no_object_is_open():
    repaired = parse_arguments_json('[{"id":"a"},{"id":"b"}}]')
    assert repaired.value == [{"id": "a"}, {"id": "b"}]
    assert repaired.rule == "stray-closer"


def test_swaps_the_last_closer_of_the_wrong_kind():
    repaired = parse_arguments_json('[{"id":"a"},{"id":"b"}}')
    assert repaired.value == [{"id": "a"}, {"id": "b"}]
    assert repaired.rule == "wrong-last-closer"


def test_a_wrong_closer_in_the_middle_is_not_repaired():
    with pytest.raises(ArgumentJsonError):
        parse_arguments_json('{"a":[1,2},"b":3}')


def test_drops_a_doubled_object_opener():
    repaired = parse_arguments_json('[{"id":"a"},{"{"id":"b"}]')
    assert repaired.value == [{"id": "a"}, {"id": "b"}]
    assert repaired.rule == "doubled-opener"


def test_rules_are_never_combined():
    # Needs both the doubled-opener and the trailing-closer rule.
    with pytest.raises(ArgumentJsonError):
        parse_arguments_json('[{"id":"a"},{"{"id":"b"}]]}')


def test_truncated_output_is_not_completed_for_whole_arguments():
    with pytest.raises(ArgumentJsonError) as info:
        parse_arguments_json('[{"id":"a"},{"id":"b"}')
    assert info.value.position > 0


def test_missing_comma_between_two_strings_is_not_repaired():
    with pytest.raises(ArgumentJsonError):
        parse_arguments_json('["a" "b"]')


def test_inside_a_field_open_brackets_at_the_end_are_closed():
    repaired = parse_arguments_json('[{"id":"a"},{"id":"b"}', inside_field=True)
    assert repaired.value == [{"id": "a"}, {"id": "b"}]


def test_inside_a_field_an_unfinished_value_still_fails():
    with pytest.raises(ArgumentJsonError):
        parse_arguments_json('[{"id":"a"},{"id":', inside_field=True)


def test_error_reports_reason_and_position():
    with pytest.raises(ArgumentJsonError) as info:
        parse_arguments_json('{"a": }')
    assert info.value.reason == "Expecting value"
    assert (info.value.line, info.value.column, info.value.position) == (1, 7, 6)
