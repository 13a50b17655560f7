"""Request shapes of the sessions endpoints (wire names in camelCase, as the spec writes them).

Endpoints parse bodies after authorization (see sessions/api_scope.py), so these models are applied
in the endpoint rather than as ninja body parameters. The ``Wire`` / ``WireIn`` models below only
describe routes in the OpenAPI document (covel/openapi.py); the endpoints' own checks decide.
"""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from covel.openapi import Nullable, Wire, WireIn


class SeatPatch(BaseModel):
    """PATCH /api/sessions/:id/seats/:seatId — exactly ``{currentCharacterId}``."""

    model_config = ConfigDict(extra="forbid")
    current_character_id: str = Field(alias="currentCharacterId", min_length=1, max_length=160)


class LorebookEnabledPatch(BaseModel):
    """PATCH /api/sessions/:id/lorebook/:entryId — ``{enabled}``."""

    model_config = ConfigDict(extra="forbid")
    enabled: bool


def seat_patch_parse(data: dict) -> SeatPatch | None:
    try:
        return SeatPatch.model_validate(data)
    except Exception:
        return None


# --- documented shapes (covel/openapi.py): what the routes answer and accept ---------------------


class UiSpecsQuery(WireIn):
    """GET /api/ui-specs query."""

    session_id: str | None = Field(None, description="Only the plugins active in this session (404 session_not_found).")


class UiSlotGroup(Wire):
    """One plugin's checked specs in one slot."""

    plugin_id: str
    specs: list[dict[str, Any]]


class UiSpecIssue(Wire):
    path: str
    message: str
    code: str


class UiSpecDiagnostic(Wire):
    """Why a declared spec was left out of its slot."""

    plugin_id: str
    runtime_id: str | None = Field(description="The runtime the declaration belongs to; null for package-level UI.")
    slot: str
    spec_index: int
    declared_path: str | None = None
    spec_id: str | None = None
    issues: list[UiSpecIssue]


class UiSpecsOut(Wire):
    """GET /api/ui-specs: every slot is a list of ``{pluginId, specs}``, registry order."""

    right: list[UiSlotGroup]
    message: list[UiSlotGroup]
    view: list[UiSlotGroup]
    segment: list[UiSlotGroup]
    left: list[UiSlotGroup]
    diagnostics: list[UiSpecDiagnostic]


class TurnPolicyRef(WireIn):
    """A turn-policy service: the plugin and the service name."""

    plugin_id: str = Field(min_length=1)
    name: str = Field(min_length=1)


class OrchestrationSettings(Wire):
    turn_policy: TurnPolicyRef | None = None
    max_actors: int = Field(ge=0, le=16)
    max_subagent_calls: int = Field(ge=0, le=64)


class TurnPolicyOut(Wire):
    plugin_id: str
    name: str
    label: str | dict[str, str]
    status: Literal["available", "paused", "unavailable"]


class OrchestrationOut(Wire):
    """GET|PATCH /api/sessions/:id/orchestration."""

    settings: OrchestrationSettings
    policies: list[TurnPolicyOut]
    status: Literal["selected", "unique", "missing", "ambiguous", "paused"]


class OrchestrationPatch(WireIn):
    """Only these three fields; absent ones stay unchanged, ``turnPolicy: null`` clears the choice."""

    turn_policy: Nullable[TurnPolicyRef] = None
    max_actors: int | None = Field(None, ge=0, le=16)
    max_subagent_calls: int | None = Field(None, ge=0, le=64)


# Sessions ------------------------------------------------------------------------------------


class SessionIn(WireIn):
    """POST /api/sessions."""

    world_id: str | None = Field(None, description="The world to play (404 world_not_found); absent: a session "
                                                   "without a world (spec 004 §POST /api/sessions)")
    locale: str | None = Field(None, description="Content language; the world's nearest version is used")
    plugins: list[str] | None = Field(None, description="Plugin ids to request; the world's plan when absent")
    id: str | None = Field(None, description="A session id of your own (409 session_already_exists when taken)")
    lore_override: str | None = Field(None, max_length=500_000)
    auto_advance_limit: int | None = Field(None, ge=0, le=10)
    seat_role: Literal["player", "host", "spectator"] | None = None


class SessionPatch(WireIn):
    """PATCH /api/sessions/:id: absent fields stay unchanged."""

    status: Literal["active", "paused", "ended"] | None = None
    runtime_model_overrides: dict[str, str] | None = Field(None, description="runtimeId → model; {} clears")
    auto_advance_limit: int | None = Field(None, ge=0, le=10)


class SessionListQuery(WireIn):
    world_id: str | None = Field(None, description="Only sessions of this world")


class SeatOut(Wire):
    id: str
    controller: str
    role: str


class SessionBriefOut(Wire):
    """A GET /api/sessions item."""

    id: str
    world_id: str | None
    status: Literal["active", "paused", "ended"]
    phase: str
    completed_player_turns: int
    setup_runtimes: dict[str, dict[str, Any]]
    locale: str
    active_plugins: list[str]
    incarnation: str
    created_at: str
    updated_at: str
    title: str | None = None


class SessionOut(SessionBriefOut):
    """The session record (spec 004 GET /api/sessions/:id)."""

    seats: list[SeatOut]
    metadata: dict[str, Any]
    runtime_model_overrides: dict[str, str]
    auto_advance_limit: int


class SessionCreatedOut(SessionOut):
    """201 of POST /api/sessions: the record plus what creating it did."""

    owner_token: str = Field(description="Shown only here; send it as Bearer or X-Session-Token")


class SessionsOut(Wire):
    items: list[SessionBriefOut]


class StateTableSchema(Wire):
    name: str
    fields: list[dict[str, str]]


class StateTable(Wire):
    schema_: StateTableSchema = Field(alias="schema")
    data: Any


class SessionStateOut(Wire):
    """``{tables}``: session, characters (when any) and public plugin data as virtual tables."""

    tables: dict[str, StateTable]


class SeatsOut(Wire):
    seats: list[SeatOut]


class ActionKindOut(Wire):
    kind: str
    source: str
    roles: list[str]
    text: Literal["required", "optional", "none"]
    actor: bool
    display: dict[str, Any]
    plugin_id: str | None = None
    fields_schema: dict[str, Any] | None = None


class SeatPermissionsOut(Wire):
    seat_id: str | None
    role: str
    controller: str | None
    allowed: list[str]


class ActionKindsOut(Wire):
    kinds: list[ActionKindOut]
    seats: list[SeatPermissionsOut]


class CommandOut(Wire):
    id: str
    plugin_id: str
    source: str
    name: str


class SessionPluginListOut(Wire):
    """GET /api/sessions/:id/plugins: PluginSummary items with the session's state of each."""

    items: list[dict[str, Any]]
    commands: list[CommandOut]
    unavailable: list[dict[str, Any]]


class SessionPluginSetOut(Wire):
    ok: bool
    active_plugin_ids: list[str]
    resolution: dict[str, Any]


class MessageOut(Wire):
    """A history message (spec 004 §消息历史)."""

    id: str
    session_id: str
    role: Literal["user", "assistant", "system", "tool"]
    content: str
    created_at: str
    kind: str | None = Field(None, description="story, ui, ...; absent for plain text")
    turn_id: str | None = None
    seat_id: str | None = None
    runtime_id: str | None = None
    block: dict[str, Any] | None = Field(None, description="The UI block of a `ui` message")
    segments: list[dict[str, Any]] | None = Field(None, description="Story segments with speaker attribution")
    actions: list[dict[str, Any]] | None = Field(None, description="The actions of a player message")


class MessagesOut(Wire):
    items: list[MessageOut]


class MessagesPageQuery(WireIn):
    limit: int | None = Field(None, ge=1, description="Messages per page (default 80, at most 500)")
    cursor: str | None = Field(None, description="`nextCursor` of the previous page (400 invalid_cursor otherwise)")


class MessagesPageOut(Wire):
    items: list[MessageOut]
    next_cursor: str | None = Field(description="Older messages; null on the oldest page")


class MessagesSyncIn(WireIn):
    messages: list[dict[str, Any]]


class MessagesSyncOut(Wire):
    ok: bool
    appended: int


class CharacterIn(WireIn):
    """POST /api/sessions/:id/characters: create or update by id."""

    id: str = Field(min_length=1, max_length=160)
    name: str = Field(min_length=1, max_length=256)
    aliases: list[str] | None = Field(None, max_length=32)
    type: str | None = Field(None, max_length=32, description="npc when absent")
    description: str | None = Field(None, max_length=65536)
    fields: dict[str, Any] | None = None
    version: int | None = Field(None, ge=1)
    created_at: str | None = None


class CharacterOut(Wire):
    id: str
    session_id: str
    name: str
    type: str
    description: str
    fields: dict[str, Any]
    version: int
    created_at: str
    updated_at: str
    aliases: list[str] | None = None


class CharactersOut(Wire):
    items: list[CharacterOut]


class LorebookOwner(Wire):
    kind: Literal["world", "player", "plugin"]
    plugin_id: str | None = None


class LorebookEntryIn(WireIn):
    """POST (create) / PUT (replace) a player lorebook entry."""

    id: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,159}$", description="Generated when absent")
    title: str | None = Field(None, max_length=256)
    keys: list[str] | None = None
    content: str
    enabled: bool | None = None
    priority: int | None = Field(None, ge=-(2**31), le=2**31 - 1)
    strategy: Literal["constant", "selective"] | None = None
    position: str | None = Field(None, max_length=32)
    insertion_order: int | None = Field(None, ge=-(2**31), le=2**31 - 1)
    extra: dict[str, Any] | None = None


class LorebookEntryOut(Wire):
    id: str
    session_id: str
    owner: LorebookOwner
    keys: list[str]
    content: str
    strategy: str
    position: str
    insertion_order: int
    priority: int
    enabled: bool
    created_at: str
    updated_at: str
    plugin_id: str | None = None
    title: str | None = None
    extra: dict[str, Any] | None = None


class LorebookOut(Wire):
    items: list[LorebookEntryOut]


class LorebookToggleOut(Wire):
    ok: bool
    entry_id: str
    enabled: bool


# Worlds --------------------------------------------------------------------------------------


class WorldSummaryOut(Wire):
    id: str
    name: str
    description: str
    locale: str | None
    metadata: dict[str, Any]
    created_at: str | None
    updated_at: str | None


class WorldsOut(Wire):
    items: list[WorldSummaryOut]


class WorldOut(Wire):
    """WorldRecord."""

    id: str
    name: str
    description: str
    locale: str
    lore: str
    metadata: dict[str, Any]
    created_at: str | None
    updated_at: str | None


class WorldDeleteOut(Wire):
    ok: bool
    id: str
    deleted_sessions: int


class WorldDimensionsIn(Wire):
    """POST /api/worlds/:id/dimensions/import: every definition, replacing the world's."""

    dimensions: dict[str, dict[str, Any]]


class WorldPluginPlanOut(Wire):
    world_id: str
    policy: dict[str, Any]
    packs: list[dict[str, Any]]
    selected_pack_id: str | None
    default_plugin_ids: list[str]
    missing: list[dict[str, Any]]


class WorldGalleryOut(Wire):
    items: list[dict[str, Any]]
    theme_music: dict[str, Any] | None = None


class DimensionsExportQuery(WireIn):
    format: Literal["yaml", "json"] | None = None


class GalleryFileQuery(WireIn):
    v: str | None = Field(None, description="The file's version: with it the answer is cacheable for a year")


# Installs ------------------------------------------------------------------------------------


class StImportUpload(WireIn):
    """multipart/form-data of POST /api/install/st-import."""

    file: list[bytes] = Field(json_schema_extra={"items": {"type": "string", "format": "binary"}},
                              description="SillyTavern cards / World Info files (repeat the field)")
    locale: str | None = None
    name: str | None = None
    preview: str | None = Field(None, description="true / 1: report only, write nothing (200)")


class AuthoringQuery(WireIn):
    locale: str | None = None


class AuthoringOut(Wire):
    files: list[dict[str, Any]]
    destinations: list[dict[str, Any]]
    contracts: list[dict[str, Any]]
    plugins: list[dict[str, Any]]
    packs: list[dict[str, Any]]


# Approvals -----------------------------------------------------------------------------------


class ApprovalOut(Wire):
    approval_id: str
    session_id: str
    plugin_id: str
    action: str
    payload: Any
    trust_level: str | None
    requested_at: str | None
    description: Any


class ApprovalsOut(Wire):
    items: list[ApprovalOut]


class ApprovalsRevokeQuery(WireIn):
    plugin_id: str | None = Field(None, description="Only this plugin's grants and requests")


class ApprovalsRevokeOut(Wire):
    ok: bool
    cleared: int


class ApprovalDecisionIn(WireIn):
    decision: Literal["allow", "deny"]
    scope: Literal["once", "session"] | None = None


class ApprovalDecisionOut(Wire):
    ok: bool
    decision: Literal["allow", "deny"]
    scope: str | None = None
    pending: list[dict[str, Any]] | dict[str, Any] | None = None
    runtime_load_errors: list[dict[str, Any]] | None = None
