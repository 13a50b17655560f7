"""Where the shared reference material lives: ``../shared`` beside the checkout (the layout every
machine of this project has), overridable with COVEL_SHARED_DIR. Tests read fixtures and the spec
from here; nothing of it is copied into the project."""
from __future__ import annotations

import os
from pathlib import Path


def _shared_root() -> Path:
    candidates = []
    if os.environ.get("COVEL_SHARED_DIR"):
        candidates.append(Path(os.environ["COVEL_SHARED_DIR"]))
    candidates += [Path(__file__).resolve().parents[2] / "shared", Path("/work/shared")]
    for candidate in candidates:
        if (candidate / "fixtures").is_dir():
            return candidate
    raise RuntimeError(
        "shared fixtures not found: expected ../shared/fixtures beside the checkout "
        "(or set COVEL_SHARED_DIR); looked in " + ", ".join(str(c) for c in candidates)
    )


SHARED_DIR = _shared_root()
FIXTURES_DIR = SHARED_DIR / "fixtures"
SPEC_DIR = SHARED_DIR / "spec"
