"""psycopg adapter tuning for the hosted shape (PostgreSQL).

Django's PostgreSQL ``bulk_create`` inserts many rows as ``UNNEST(%s::jsonb[], %s::text[], ...)``:
one Python list per column, turned into an array literal by psycopg's text ``ListDumper``. That
dumper backslash-escapes every ``"`` and ``\\`` of every element with ``re.sub(rb'(["\\\\])',
rb'\\\\\\1', ...)``, and a replacement template with a group reference makes ``re`` call a Python
function per match. Trace rows and SSE frames are JSON (a quote every few bytes) and a full-game
turn writes hundreds of KB of them, so that escaping was the largest single CPU cost of a hosted
turn (issue 18 profile: 18% of the worker's CPU; 50x slower than ``bytes.replace`` on such data).

``install()`` registers ``ListDumper`` below: psycopg's own dumper with that one step done by
``bytes.replace`` — the same bytes out (tests/covel/test_pgadapt.py compares them with psycopg's).
Subclassing (not copying the dumper) keeps every other behaviour of the pinned psycopg version.
"""
from __future__ import annotations

from typing import Any

from psycopg import adapters
from psycopg.types.array import ListDumper as _PsycopgListDumper


class _ArrayElementEscape:
    """Stands in for ``ListDumper._re_esc`` (used as ``_re_esc.sub(template, value)``): a backslash
    before every ``\\`` and ``"`` of ``value`` (bytes-like), whatever the template."""

    @staticmethod
    def sub(_template: Any, value: Any) -> bytes:
        value = bytes(value)
        return value.replace(b"\\", b"\\\\").replace(b'"', b'\\"')


class ListDumper(_PsycopgListDumper):
    """psycopg's text list dumper with C-speed escaping of quoted array elements (module docstring)."""

    _re_esc = _ArrayElementEscape()


def install() -> None:
    """Register ListDumper for Python lists on psycopg's global adapters map (every connection made
    afterwards, Django's included, inherits it). Call before the first connection (an app's
    ``ready``); calling it again is harmless."""
    adapters.register_dumper(list, ListDumper)
