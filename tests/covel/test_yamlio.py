"""covel.yamlio: YAML 1.2 booleans, parsed with libyaml when PyYAML has it (issue 18), and errors that
read exactly as the pure-Python parser's."""
from __future__ import annotations

import pytest
import yaml

from covel import yamlio
from covel.yamlio import frontmatter_parse, yaml_load

DOCUMENT = """
mode: [off, low, full]
flags: {a: yes, b: no, c: on, d: true, e: FALSE}
count: 3
ratio: 0.5
when: 2024-01-02
empty: ~
text: |
  two
  lines
nested: [{id: x, tags: [a, b]}]
"""


def test_yaml_1_2_booleans_and_the_same_values_as_the_pure_python_parser():
    value = yaml_load(DOCUMENT)
    assert value["mode"] == ["off", "low", "full"]
    assert value["flags"] == {"a": "yes", "b": "no", "c": "on", "d": True, "e": False}
    assert value == yaml.load(DOCUMENT, Loader=yamlio.Yaml12SafeLoader)  # noqa: S506 - SafeLoader subclass
    meta, body = frontmatter_parse("---\nenabled: off\nid: probe\n---\nBody.\n")
    assert meta == {"enabled": "off", "id": "probe"} and body == "Body."


def test_the_fast_parser_is_libyaml_when_pyyaml_has_it():
    if yaml.__with_libyaml__:
        assert issubclass(yamlio._FAST_LOADER, yaml.CSafeLoader)
    else:
        assert yamlio._FAST_LOADER is None


@pytest.mark.parametrize("text", ["a: [1, 2\nb: 3\n", "key: value\n  bad indent: x\n", "- a\nb: c\n"])
def test_an_error_reads_as_the_pure_python_parsers(text):
    with pytest.raises(yaml.YAMLError) as expected:
        yaml.load(text, Loader=yamlio.Yaml12SafeLoader)  # noqa: S506 - SafeLoader subclass
    with pytest.raises(yaml.YAMLError) as raised:
        yaml_load(text)
    assert str(raised.value) == str(expected.value)
    assert "line" in str(raised.value) and "^" in str(raised.value)  # the quoted snippet of the Python parser
