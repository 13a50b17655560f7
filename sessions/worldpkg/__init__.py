"""World package helpers (pure Python): dimensions, overlays, zip checks. See sessions/world_packages.py."""
