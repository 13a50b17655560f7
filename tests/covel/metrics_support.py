"""Reading Prometheus exposition text in tests (no tests here)."""
from __future__ import annotations

import re


def sample(text: str, name: str, **labels: str) -> float:
    """The sum of the samples ``name{labels...}`` in exposition ``text`` (``labels`` matched as a
    subset, in any order; 0 when none)."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        head, _, value = line.rpartition(" ")
        if head.split("{", 1)[0] != name:
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', head))
        if all(found.get(k) == v for k, v in labels.items()):
            total += float(value)
    return total
