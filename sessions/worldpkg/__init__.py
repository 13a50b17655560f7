"""World package loading, split by concern (pure Python); the entry point is sessions/world_packages.py.

model (constants, dataclasses), files (parsing, overlays, paths), manifest (world.yaml rules beside
the published schema), sources (world data descriptor), content (files, dimensions, locales),
dimensions (dimension definitions, import/export).
"""
