"""YAML reading with YAML 1.2 booleans.

Upstream packages are written for a YAML 1.2 parser, where `off`, `on`, `yes`, `no` are plain
strings (e.g. an enum `[off, low, full]`). PyYAML's SafeLoader follows YAML 1.1 and would turn
them into booleans, so only true/false (any case) resolve to bool here.
"""

from __future__ import annotations

import re
from typing import Any

import frontmatter
import yaml
from frontmatter.default_handlers import YAMLHandler


class Yaml12SafeLoader(yaml.SafeLoader):
    """SafeLoader whose bool resolver accepts only true/false."""


Yaml12SafeLoader.yaml_implicit_resolvers = {
    key: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:bool"]
    for key, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
Yaml12SafeLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)

if getattr(yaml, "__with_libyaml__", False):
    class Yaml12CSafeLoader(yaml.CSafeLoader):
        """The same resolvers on libyaml's parser (PyYAML's C extension: ~8× faster on world
        packages and manifests, issue 18). Resolution stays in Python (yaml.resolver.Resolver), so
        the YAML 1.2 booleans are the same."""

    Yaml12CSafeLoader.yaml_implicit_resolvers = Yaml12SafeLoader.yaml_implicit_resolvers
    _FAST_LOADER: type | None = Yaml12CSafeLoader
else:  # a PyYAML built without libyaml: the pure-Python parser only
    _FAST_LOADER = None


def yaml_load(text: str) -> Any:
    """Parse one YAML document with YAML 1.2 booleans. Raises yaml.YAMLError.

    Parsed with libyaml when PyYAML has it; a document it refuses is parsed again with the
    pure-Python parser, so errors (message, line, the quoted snippet) read the same either way."""
    if _FAST_LOADER is not None:
        try:
            return yaml.load(text, Loader=_FAST_LOADER)  # noqa: S506 - a CSafeLoader subclass
        except yaml.YAMLError:
            pass
    return yaml.load(text, Loader=Yaml12SafeLoader)  # noqa: S506 - a SafeLoader subclass


class Yaml12Handler(YAMLHandler):
    """python-frontmatter handler that parses frontmatter with Yaml12SafeLoader."""

    def load(self, fm: str, **kwargs: Any) -> Any:
        return yaml_load(fm)


def frontmatter_parse(text: str) -> tuple[dict[str, Any], str]:
    """(metadata, body) of a markdown file with YAML frontmatter. Raises yaml.YAMLError."""
    metadata, body = frontmatter.parse(text, handler=Yaml12Handler())
    return metadata, body
