"""Request/response shapes of the browser-private workspace routes (spec 004 §浏览器私有工作区;
turns/browser_workspace.py). The checkpoint itself is described by browser_checkpoint.schema.json."""
from __future__ import annotations

from typing import Any

from pydantic import Field

from covel.openapi import Wire, WireIn


class BrowserCheckpointIn(WireIn):
    """PUT /api/sessions/:id/browser-checkpoint: ``{checkpoint}`` (at most 64 MiB of JSON in all)."""

    checkpoint: dict[str, Any]


class BrowserCheckpointOut(Wire):
    """The accepted revision and head; ``reconcileRequired: true`` when a background job kept its
    results and the browser must download and apply the next commit before it executes again."""

    ok: bool
    session_id: str
    revision: int
    head: str | None
    reconcile_required: bool | None = None


class BrowserCommitIn(WireIn):
    """POST /api/sessions/:id/browser-commit."""

    action_id: str = Field(min_length=1, max_length=256)
    base_revision: int = Field(ge=0)


class SessionCommitOut(Wire):
    """SessionCommit ``{baseRevision, revision, actionId, checkpoint}`` (checkpoint.head: the new head)."""

    base_revision: int
    revision: int
    action_id: str
    checkpoint: dict[str, Any]
