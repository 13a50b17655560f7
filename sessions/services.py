"""Every way a session changes (spec 004 §会话管理 and the sections it links).

Each public function runs in one database transaction: on any error nothing is written. Writes to
an existing session take the session row lock (``select_for_update``), which serializes them with
each other and with the commit chain (which updates the same row). Client-visible session events are
appended with ``turns.events.session_events_append`` inside the same transaction.
"""
from __future__ import annotations

import re
import secrets
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from covel.errors import SessionBusy, SessionNotFound
from sessions import auth, lifecycle
from plugins_app.errors import PluginNotFound
from plugins_app.registry import plugin_registry
from sessions.catalog import ResolvedWorld, world_resolve
from sessions.errors import (
    CharacterRejected,
    DimensionProviderConflict,
    DimensionProviderRequired,
    InvalidRequest,
    PluginLocked,
    LorebookEntryExists,
    LorebookEntryNotFound,
    SeatCharacterUnbound,
    SeatNotFound,
    SeatNotHuman,
    SessionAlreadyExists,
    SessionDeleting,
    SessionEnded,
    SessionNotActive,
    WorldDeleting,
    WorldNotFound,
)
from sessions.models import Character, CharacterSchema, ChatMessage, DimensionValue, LorebookEntry, Session
from sessions.plugin_selection import dimension_providers, plugins_resolve, setup_runtimes_initial
from sessions.world_data_contracts import world_dimensions_for
from sessions.world_data_import import contract_data_deliver, world_data_late_import

WORLD_ID_RE = re.compile(r"^[a-z0-9_-]{1,64}$", re.IGNORECASE)
SESSION_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,159}$")
LOCALE_RE = re.compile(r"^[A-Za-z]{2,3}(-[A-Za-z0-9]{2,8})*$")
RUNTIME_ID_RE = re.compile(r"^[a-z][a-z0-9-]*(?:/[a-z][a-z0-9-]*)?$")
DEFAULT_LOCALE = "zh-CN"
SEAT_ROLES = ("player", "host", "spectator")
STATUSES = (Session.STATUS_ACTIVE, Session.STATUS_PAUSED, Session.STATUS_ENDED)
RUNTIME_MODEL_OVERRIDES_MAX = 64
AUTO_ADVANCE_MIN, AUTO_ADVANCE_MAX = 0, 10
DELETE_LEASE = timedelta(minutes=10)
MESSAGE_ROLES = ("user", "assistant", "system", "tool")
CHARACTER_ID_MAX, CHARACTER_NAME_MAX, CHARACTER_DESCRIPTION_MAX, CHARACTER_ALIASES_MAX = 160, 256, 65536, 32
LORE_OVERRIDE_MAX = 500_000  # characters (spec 004 loreOverride: 最多 500000 字符)
# Integer columns (version, priority, insertion order) are 32-bit on PostgreSQL: values outside are a
# 400, never a database error.
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
# Column widths of ChatMessage.turn_id and LorebookEntry.title / position.
MESSAGE_TURN_ID_MAX, LORE_TITLE_MAX, LORE_POSITION_MAX = 64, 256, 32
# Traditional-script regions: zh-TW must not fall back to a zh-CN (Hans) version (spec: 同语言、同文字).
_HANT_REGIONS = {"TW", "HK", "MO"}


# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------


def _script(tag: str) -> tuple[str, str]:
    parts = tag.split("-")
    language = parts[0].lower()
    script = next((p.title() for p in parts[1:] if len(p) == 4 and p.isalpha()), "")
    if not script and language == "zh":
        script = "Hant" if any(p.upper() in _HANT_REGIONS for p in parts[1:]) else "Hans"
    return language, script


def locale_resolve(requested: str, supported: list[str], default_locale: str) -> str:
    """The world's version for ``requested``: exact, else same language and script, else the
    world's own locale (spec 004 §会话管理 内容语言)."""
    if requested in supported:
        return requested
    wanted = _script(requested)
    for tag in supported:
        if _script(tag) == wanted:
            return tag
    return default_locale


def session_locked(session_id: str) -> Session:
    session = Session.objects.select_for_update().filter(pk=session_id).first()
    if session is None:
        raise SessionNotFound(session_id)
    return session


def _check_not_deleting(session: Session) -> None:
    if session.deletion_state == Session.DELETION_DELETING:
        raise SessionDeleting()


def session_check_active(session: Session) -> None:
    """Raise 409 session_not_active unless the session is active and not being deleted."""
    if session.deletion_state == Session.DELETION_DELETING or session.status != Session.STATUS_ACTIVE:
        raise SessionNotActive(session.status)


def _auto_advance_check(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not AUTO_ADVANCE_MIN <= value <= AUTO_ADVANCE_MAX:
        raise InvalidRequest(code="invalid_auto_advance_limit", message="autoAdvanceLimit must be an integer 0-10")
    return value


def _characters_import(session: Session, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    notices = []
    rows = []
    seen: set[str] = set()
    for record in records:
        character_id, name = record.get("id"), record.get("name")
        if not isinstance(character_id, str) or not isinstance(name, str) or character_id in seen:
            notices.append({"level": "warning", "sourceId": "characters", "code": "character-skipped",
                            "message": f"character record {character_id!r} skipped (needs a unique string id and name)"})
            continue
        seen.add(character_id)
        rows.append(Character(
            session=session, character_id=character_id[:CHARACTER_ID_MAX], name=name[:CHARACTER_NAME_MAX],
            type=record.get("type") if isinstance(record.get("type"), str) else "npc",
            aliases=[a for a in record.get("aliases") or [] if isinstance(a, str)][:CHARACTER_ALIASES_MAX],
            fields=record.get("fields") if isinstance(record.get("fields"), dict) else {},
            description=record.get("description") if isinstance(record.get("description"), str) else "",
        ))
    Character.objects.bulk_create(rows)
    return notices


_LORE_KNOWN = {"id", "keys", "content", "title", "enabled", "priority", "strategy", "position", "insertionOrder", "constant"}


def _lorebook_import(session: Session, entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    notices = []
    rows = []
    seen: set[str] = set()
    for index, entry in enumerate(entries):
        entry_id, content = entry.get("id"), entry.get("content")
        if not isinstance(entry_id, str) or not isinstance(content, str) or entry_id in seen:
            notices.append({"level": "warning", "sourceId": entry.get("sourceId") or "lorebook", "code": "lore-entry-skipped",
                            "message": f"lorebook entry {entry_id!r} skipped (needs a unique string id and content)"})
            continue
        seen.add(entry_id)
        keys = [k for k in entry.get("keys") or [] if isinstance(k, str)]
        strategy = entry.get("strategy") if entry.get("strategy") in ("constant", "selective") else (
            "constant" if entry.get("constant") is True or not keys else "selective")
        rows.append(LorebookEntry(
            session=session, entry_id=entry_id, owner=LorebookEntry.OWNER_WORLD, keys=keys, content=content,
            title=entry.get("title") if isinstance(entry.get("title"), str) else "",
            enabled=entry.get("enabled") is not False, strategy=strategy,
            priority=entry.get("priority") if isinstance(entry.get("priority"), int) else 0,
            position=entry.get("position") if isinstance(entry.get("position"), str) else "",
            insertion_order=entry.get("insertionOrder") if isinstance(entry.get("insertionOrder"), int) else index,
            metadata={k: v for k, v in entry.items() if k not in _LORE_KNOWN},
        ))
    LorebookEntry.objects.bulk_create(rows)
    return notices


# ---------------------------------------------------------------------------------------------
# Create
# ---------------------------------------------------------------------------------------------


@dataclass
class SessionCreated:
    """session_create's result: the row, the one-time owner token and the creation-only extras
    (requestedLocale, unmetRequirements, ignoredDimensions, worldDataNotices, pluginsWithoutLocale)."""

    session: Session
    owner_token: str
    extras: dict[str, Any] = field(default_factory=dict)


def session_create(
    *,
    world_id: str | None = None,
    locale: str | None = None,
    plugins: list[str] | None = None,
    session_id: str | None = None,
    lore_override: str | None = None,
    auto_advance_limit: int | None = None,
    seat_role: str | None = None,
) -> SessionCreated:
    """Create a session (spec 004 POST /api/sessions).

    Resolves the world (404 world_not_found, 409 world_deleting — checked before preparing and again
    when committing), the locale against the world's versions, the plugin set (400 plugin_rejected,
    409 dimension_provider_conflict), and imports the world's characters, lorebook (owner world),
    character schema and — when an enabled plugin provides world.dimensions@1 — dimensions.
    The owner token is returned once; only its SHA-256 is stored. ``incarnation`` is a fresh private
    nonce, ``event_epoch`` a fresh random string. Phase is ``setup`` when any runnable plugin has a
    ``stage: setup`` runtime, else ``playing``. 409 session_already_exists for a taken client id
    (a session still being deleted keeps its id until the delete finishes).
    Plugin ids: ``plugins`` when given; otherwise the world's pluginPolicy defaults (preset pack's
    requested + ``plus``); builtin core plugins and ``pluginPolicy.requires`` are always resolved.
    """
    if world_id is not None and (not isinstance(world_id, str) or not WORLD_ID_RE.match(world_id)):
        raise InvalidRequest(code="invalid_world_id", message="worldId must match /^[a-z0-9_-]{1,64}$/i")
    if session_id is not None and (not isinstance(session_id, str) or not SESSION_ID_RE.match(session_id)):
        raise InvalidRequest(code="invalid_session_id", message="id must be 1-160 letters, digits, '_', '-' or '.'")
    requested_locale = locale if locale is not None else DEFAULT_LOCALE
    if not isinstance(requested_locale, str) or not LOCALE_RE.match(requested_locale):
        raise InvalidRequest(code="invalid_locale", message="locale must be a BCP 47 language tag")
    if seat_role is not None and seat_role not in SEAT_ROLES:
        raise InvalidRequest(code="invalid_seat_role", message="seatRole must be player, host or spectator")
    if auto_advance_limit is not None:
        _auto_advance_check(auto_advance_limit)
    if lore_override is not None and (not isinstance(lore_override, str) or len(lore_override) > LORE_OVERRIDE_MAX):
        raise InvalidRequest(code="invalid_lore_override", message="loreOverride must be a string of at most 500000 characters")

    world: ResolvedWorld | None = None
    if world_id:
        world = world_resolve(world_id)
        if world is None:
            raise WorldNotFound(world_id)
        if world.is_deleting:
            raise WorldDeleting(world_id)

    extras: dict[str, Any] = {}
    session_locale = requested_locale
    if world is not None:
        session_locale = locale_resolve(requested_locale, world.supported_locales, world.default_locale)
        if session_locale != requested_locale:
            extras["requestedLocale"] = requested_locale

    policy = world.plugin_policy if world else {}
    registry = plugin_registry()
    unknown_world_plugins: list[str] = []
    if plugins is None:
        # The world's own defaults may name plugins this server does not have (packages written for
        # another host): they are reported as unmet requirements, not a failed creation (issue 7).
        defaults = _policy_defaults(policy)
        unknown_world_plugins = [pid for pid in defaults if registry.get(pid) is None]
        plugins = [pid for pid in defaults if registry.get(pid) is not None]
    required_contracts = [c for c in policy.get("requires") or [] if isinstance(c, str)]
    resolution = plugins_resolve(registry, requested=list(plugins), required_contracts=required_contracts, strict=True)
    providers = dimension_providers(registry, resolution.runnable)
    if len(providers) > 1:
        raise DimensionProviderConflict(providers)
    unmet = list(resolution.unmet_requirements) + [
        {"pluginId": pid, "code": CODE_UNKNOWN_PLUGIN} for pid in unknown_world_plugins
    ]
    if unmet:
        extras["unmetRequirements"] = unmet
    without_locale = [pid for pid in resolution.runnable if not _has_locale_text(registry.get(pid), session_locale)]
    if without_locale:
        extras["pluginsWithoutLocale"] = without_locale

    setup = setup_runtimes_initial(registry, resolution.runnable)
    owner_token = auth.new_owner_token()
    new_id = session_id or f"{world_id or 'session'}-{uuid.uuid4().hex[:8]}"
    metadata: dict[str, Any] = {
        "pluginSelection": {
            "requested": list(dict.fromkeys(plugins)), "excluded": [], "requiredContracts": required_contracts,
            "autoAdded": resolution.auto_added, "rejections": resolution.rejections,
        },
        "autoAdvanceLimit": auto_advance_limit if auto_advance_limit is not None else 3,
    }
    if lore_override is not None:
        metadata["loreOverride"] = lore_override
    if providers:
        metadata["dimensionProviderPluginId"] = providers[0]
    has_start_hooks = lifecycle.session_start_pending(registry, resolution.runnable)
    if has_start_hooks:
        # Written with the session: a DELETE / status change meanwhile is 409 session_lifecycle_busy.
        metadata[lifecycle.LIFECYCLE_KEY] = lifecycle.lifecycle_marker(lifecycle.SESSION_START)
    if seat_role in ("host", "spectator"):
        seats = [{"id": "main", "controller": "human", "role": seat_role, "characters": []}]
    else:
        seats = [{"id": "main", "controller": "human", "role": "player", "characters": "auto"}]

    notices: list[dict[str, Any]] = []
    try:
        with transaction.atomic():
            if world is not None:
                # Second world check at commit time (spec: 在准备资源之前和提交会话时各检查一次世界).
                again = world_resolve(world.id)
                if again is None:
                    raise WorldNotFound(world.id)
                if again.is_deleting:
                    raise WorldDeleting(world.id)
            if Session.objects.filter(pk=new_id).exists():
                raise SessionAlreadyExists(new_id)
            session = Session.objects.create(
                id=new_id, world_id=world_id or "", status=Session.STATUS_ACTIVE,
                phase=Session.PHASE_SETUP if setup else Session.PHASE_PLAYING, setup_runtimes=setup,
                seats=seats, active_plugins=resolution.active_plugins, locale=session_locale, metadata=metadata,
                owner_token_hash=auth.token_hash(owner_token), incarnation=secrets.token_hex(16),
                event_epoch=secrets.token_hex(8), title=(world.content(session_locale)["name"] if world else ""),
            )
            if world is not None:
                content = world.content(session_locale)
                notices += _characters_import(session, content["characters"])
                notices += _lorebook_import(session, content["lorebook"])
                if world.character_schema:
                    CharacterSchema.objects.create(session=session, schema=world.character_schema)
                if world.dimensions:
                    if providers:
                        DimensionValue.objects.bulk_create([
                            DimensionValue(session=session, dimension_id=dim_id, definition=definition,
                                           value=definition.get("initialValue"), version=1)
                            # the session locale's definitions (world_data_contracts.world_dimensions_for)
                            for dim_id, definition in world_dimensions_for(world, session_locale).items() if isinstance(definition, dict)
                        ])
                    else:
                        extras["ignoredDimensions"] = list(world.dimensions)
                        notices.append({"level": "warning", "code": "dimension-provider-missing", "sourceId": "dimensions",
                                        "message": "no enabled plugin provides world.dimensions@1; dimensions were not imported"})
                notices += _contract_data_deliver(session, world, content, registry, resolution.runnable)
    except IntegrityError:
        # A concurrent create with the same client id won the race.
        raise SessionAlreadyExists(new_id) from None
    if notices:
        extras["worldDataNotices"] = notices
    if has_start_hooks:
        lifecycle.session_start_run(session.pk)  # SessionStart hooks, after the session committed
        session.refresh_from_db()
    return SessionCreated(session=session, owner_token=owner_token, extras=extras)


def _contract_data_deliver(session: Session, world: ResolvedWorld, content: dict[str, Any], registry, plugin_ids: list[str]) -> list[dict[str, Any]]:
    """World data sources with ``to: contract:<c>`` (e.g. ``world.time-definition@1``) become plugin
    data of every enabled plugin declaring a ``contributes.data`` namespace that ``accepts`` <c>
    (sessions.world_data_import). Called inside the creating transaction; kernel write, no event
    (the session has no subscribers yet); the receivers are remembered in the session's metadata."""
    delivered = contract_data_deliver(session, world, content, registry, plugin_ids)
    if delivered.receivers:
        Session.objects.filter(pk=session.pk).update(metadata=session.metadata)
    return delivered.notices  # sources no enabled plugin receives (worldDataNotices)


CODE_UNKNOWN_PLUGIN = "unknown-plugin"


def _policy_defaults(policy: dict[str, Any]) -> list[str]:
    """World default plugin ids: the preset pack's ``requested`` + ``plus``/``requested``. The preset
    (``preset`` or ``presetId``) is the world's own pack of that id, else the builtin pack of that id
    (plugins_app/packs/builtin.yaml) — the same pack GET /api/worlds/:id/plugin-plan selects."""
    out: list[str] = []
    preset = policy.get("preset") or policy.get("presetId")
    own = [pack for pack in policy.get("packs") or [] if isinstance(pack, dict) and pack.get("id") == preset]
    for pack in own or _builtin_packs(preset):
        out += [p for p in pack.get("requested") or [] if isinstance(p, str)]
    out += [p for p in policy.get("plus") or policy.get("requested") or [] if isinstance(p, str)]
    excluded = set(policy.get("excluded") or [])
    return [p for p in dict.fromkeys(out) if p not in excluded]


BUILTIN_PACKS_FILE = Path(__file__).resolve().parent.parent / "plugins_app" / "packs" / "builtin.yaml"


def _builtin_packs(preset: Any) -> list[dict[str, Any]]:
    """The builtin pack named ``preset`` as ``[{id, requested, ...}]`` ([] when there is none)."""
    if not isinstance(preset, str) or not preset:
        return []
    from sessions.world_packages import packs_catalog_load

    catalog, _issues = packs_catalog_load(BUILTIN_PACKS_FILE)
    return [pack.as_dict() for pack in catalog if pack.id == preset]


def _has_locale_text(record, locale: str) -> bool:
    value = record.manifest.display_name if record else None
    if not isinstance(value, dict):
        return True
    language = locale.split("-", 1)[0]
    return any(str(k) == locale or str(k).split("-", 1)[0] == language for k in value)


# ---------------------------------------------------------------------------------------------
# Update / delete
# ---------------------------------------------------------------------------------------------

_UNSET = object()


def session_update(session_id: str, *, status: Any = _UNSET, runtime_model_overrides: Any = _UNSET,
                   auto_advance_limit: Any = _UNSET) -> Session:
    """PATCH /api/sessions/:id. status: active|paused|ended (400 otherwise; 409 session_ended once
    ended). runtimeModelOverrides: object (400 otherwise), ≤64 entries kept, invalid entries dropped
    silently, ``{}`` clears; absent leaves it. autoAdvanceLimit: integer 0-10.
    409 session_deleting while a delete runs; 409 session_lifecycle_busy for a status change while a
    SessionStart / SessionEnd hook runs. Ending the session runs its SessionEnd hooks (once) after
    the commit. Returns the updated session."""
    if status is not _UNSET and status not in STATUSES:
        raise InvalidRequest(code="invalid_status", message="status must be active, paused or ended")
    overrides = None
    if runtime_model_overrides is not _UNSET:
        if not isinstance(runtime_model_overrides, dict):
            raise InvalidRequest(code="invalid_runtime_model_overrides", message="runtimeModelOverrides must be an object")
        overrides = {}
        for key, value in runtime_model_overrides.items():
            if len(overrides) >= RUNTIME_MODEL_OVERRIDES_MAX:
                break
            if isinstance(key, str) and key and isinstance(value, str) and RUNTIME_ID_RE.match(key):
                overrides[key] = value
    if auto_advance_limit is not _UNSET:
        _auto_advance_check(auto_advance_limit)
    ends = False
    with transaction.atomic():
        session = session_locked(session_id)
        _check_not_deleting(session)
        if status is not _UNSET:
            lifecycle.lifecycle_busy_check(session)
        if session.status == Session.STATUS_ENDED and (status is not _UNSET and status != Session.STATUS_ENDED):
            raise SessionEnded()
        if session.status == Session.STATUS_ENDED and (overrides is not None or auto_advance_limit is not _UNSET):
            raise SessionEnded()
        meta = dict(session.metadata or {})
        if status is not _UNSET:
            session.status = status
        if overrides is not None:
            meta["runtimeModelOverrides"] = overrides
        if auto_advance_limit is not _UNSET:
            meta["autoAdvanceLimit"] = auto_advance_limit
        session.metadata = meta
        if status == Session.STATUS_ENDED:
            ends = lifecycle.session_end_claim(session)  # SessionEnd runs once per session
        session.save()
    if ends:
        lifecycle.session_end_run(session.pk, reason="ended")
        session.refresh_from_db()
    return session


def session_delete(session_id: str) -> None:
    """DELETE /api/sessions/:id with the spec's ordering (§会话管理 删除按这个顺序进行):

    1. Under the session row lock: stop accepting operations (deletion mark + lease, status paused)
       and rotate the authorization scope (new incarnation nonce), committed on its own.
    2. Drain: the session's queued runtime jobs become stale and the delete waits (at most
       COVEL_SESSION_DELETE_DRAIN_SECONDS) until none of its running jobs holds its runtime lease
       (``sessions.ports.session_jobs_drain``, installed by jobs).
    3. The one SessionEnd of the session is claimed (row lock), then its observe-only hooks run
       without any lock — once per session: a retry after a failed drain still runs them.
    4. Holding the session's execution lock (so a turn still running finishes first, bounded by
       COVEL_SESSION_LOCK_TIMEOUT_SECONDS), cascade-delete every row of the session in one
       transaction: runtime jobs, plugin data, approvals' generations and media references
       (``MediaAsset`` rows) go with it; unreferenced media bytes are left to the media GC.

    409 session_lifecycle_busy while a SessionStart / SessionEnd hook runs; 409 session_deleting
    while another delete runs (unless its 10 min lease expired). A failure after step 1 — a drain or
    lock that timed out (503 session_busy, retryable), a database error — leaves the mark (writes keep
    getting 409, the session stays paused, the scope rotated) plus a retry mark: the next DELETE
    takes over at once and never runs SessionEnd again.
    """
    from sessions.locks import session_lock
    from sessions.ports import session_deleted, session_jobs_drain

    now = timezone.now()
    with transaction.atomic():
        session = session_locked(session_id)
        if session.deletion_state == Session.DELETION_DELETING and session.deletion_started_at and \
                now - session.deletion_started_at < DELETE_LEASE and not _is_retry_mark(session):
            raise SessionDeleting()
        if not (_is_retry_mark(session) and lifecycle.session_end_marked(session)):
            lifecycle.lifecycle_busy_check(session)  # (a failed delete's own SessionEnd marker does not block its retry)
        session.deletion_state = Session.DELETION_DELETING
        session.deletion_started_at = now
        if session.status == Session.STATUS_ACTIVE:
            session.status = Session.STATUS_PAUSED
        session.incarnation = secrets.token_hex(16)
        session.save(update_fields=["deletion_state", "deletion_started_at", "status", "incarnation", "updated_at"])
    try:
        # Running jobs of the session find it marked deleting and commit nothing; wait for them
        # to let go of their runtime locks so none is still working when the rows go.
        if not session_jobs_drain(session_id, float(settings.COVEL_SESSION_DELETE_DRAIN_SECONDS)):
            raise SessionBusy()
        with transaction.atomic():
            session = session_locked(session_id)
            ends = lifecycle.session_end_claim(session)  # a retried DELETE never runs SessionEnd twice
            if ends:
                session.save(update_fields=["metadata", "updated_at"])
        if ends:
            # Without the session lock; observe-only hooks (spec 004 删除按这个顺序进行, step 3).
            lifecycle.session_end_run(session_id, reason="deleted", clear_marker=False)
        with session_lock(session_id):
            with transaction.atomic():
                Session.objects.filter(pk=session_id).delete()
                transaction.on_commit(lambda: session_deleted(session_id))
    except Exception:
        # Leave a retry mark: the next DELETE takes over without waiting for the lease.
        Session.objects.filter(pk=session_id).update(deletion_started_at=datetime(2000, 1, 1, tzinfo=dt_timezone.utc))
        raise


def _is_retry_mark(session: Session) -> bool:
    return session.deletion_started_at is not None and session.deletion_started_at.year == 2000


# ---------------------------------------------------------------------------------------------
# Seats
# ---------------------------------------------------------------------------------------------


def seat_update(session_id: str, seat_id: str, *, current_character_id: str) -> list[dict[str, Any]]:
    """PATCH /api/sessions/:id/seats/:seatId: switch the seat's current character (spec 004 §会话座位).

    Needs status active or paused (409 session_not_active), a seat (404 seat_not_found) controlled by a
    human (409 seat_not_human), and a character bound to it (409 seat_character_unbound).
    No event; takes effect from the next turn. Returns every seat after the write.
    """
    from sessions.selectors import seat_bound_character_ids

    with transaction.atomic():
        session = session_locked(session_id)
        _check_not_deleting(session)
        if session.status not in (Session.STATUS_ACTIVE, Session.STATUS_PAUSED):
            raise SessionNotActive(session.status)
        seats = [dict(s) for s in session.seats or []]
        seat = next((s for s in seats if s.get("id") == seat_id), None)
        if seat is None:
            raise SeatNotFound(seat_id)
        if seat.get("controller") != "human":
            raise SeatNotHuman(seat_id)
        if current_character_id not in seat_bound_character_ids(session, seat):
            raise SeatCharacterUnbound(current_character_id)
        seat["currentCharacterId"] = current_character_id
        session.seats = seats
        session.save(update_fields=["seats", "updated_at"])
    return seats


# ---------------------------------------------------------------------------------------------
# Messages
# ---------------------------------------------------------------------------------------------


def messages_sync(session_id: str, messages: Any) -> int:
    """POST /api/sessions/:id/messages/sync: append messages idempotently by stable id.

    messages: ``[{role, content, id? (≤160), createdAt?, turnId? (≤64), runtimeId?, block?}]``; role in
    user/assistant/system/tool (400 otherwise). Ids already stored are skipped; a message without an
    id gets a new one every time. All in one transaction under the session lock; the session must be
    active (409 session_not_active). Returns how many were appended.
    """
    if not isinstance(messages, list):
        raise InvalidRequest(code="invalid_request_body", message="messages must be an array")
    parsed = []
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            raise InvalidRequest(code="invalid_message", message=f"messages[{index}] must be an object")
        role, content = message.get("role"), message.get("content")
        if role not in MESSAGE_ROLES or not isinstance(content, str):
            raise InvalidRequest(code="invalid_message", message=f"messages[{index}] needs role (user|assistant|system|tool) and string content")
        message_id = message.get("id")
        if message_id is not None and (not isinstance(message_id, str) or not 0 < len(message_id) <= 160):
            raise InvalidRequest(code="invalid_message", message=f"messages[{index}].id must be a string of 1-160 characters")
        created_at = timezone.now()
        if message.get("createdAt") is not None:
            try:
                created_at = datetime.fromisoformat(str(message["createdAt"]).replace("Z", "+00:00"))
            except ValueError:
                raise InvalidRequest(code="invalid_message", message=f"messages[{index}].createdAt is not an ISO timestamp") from None
            if created_at.tzinfo is None:
                created_at = created_at.replace(tzinfo=dt_timezone.utc)
        metadata = {k: message[k] for k in ("runtimeId", "block") if k in message}
        turn_id = message.get("turnId")
        if isinstance(turn_id, str) and len(turn_id) > MESSAGE_TURN_ID_MAX:
            raise InvalidRequest(code="invalid_message", message=f"messages[{index}].turnId must be a string of at most 64 characters")
        parsed.append((message_id or f"msg-{uuid.uuid4()}", role, content, created_at,
                       turn_id if isinstance(turn_id, str) else "", metadata))
    with transaction.atomic():
        session = session_locked(session_id)
        session_check_active(session)
        wanted = [p[0] for p in parsed]
        existing = set(ChatMessage.objects.filter(session=session, message_id__in=wanted).values_list("message_id", flat=True))
        rows, seen = [], set()
        for message_id, role, content, created_at, turn_id, metadata in parsed:
            if message_id in existing or message_id in seen:
                continue
            seen.add(message_id)
            rows.append(ChatMessage(session=session, message_id=message_id, role=role, content=content,
                                    created_at=created_at, turn_id=turn_id, metadata=metadata))
        ChatMessage.objects.bulk_create(rows)
    return len(rows)


# ---------------------------------------------------------------------------------------------
# Characters
# ---------------------------------------------------------------------------------------------


def character_payload_validate(payload: Any) -> dict[str, Any]:
    """Validate a ``character.upsert`` payload (spec 004 POST /characters field table).

    Returns the normalized payload ``{id, name, aliases?, type, description, fields, version?,
    createdAt?}``. Raises CharacterRejected (400) with the reason.
    """
    if not isinstance(payload, dict):
        raise CharacterRejected(message="character must be an object")
    character_id, name = payload.get("id"), payload.get("name")
    if not isinstance(character_id, str) or not 0 < len(character_id) <= CHARACTER_ID_MAX:
        raise CharacterRejected(message="id is required: a string of at most 160 characters")
    if not isinstance(name, str) or not 0 < len(name.strip()) or len(name) > CHARACTER_NAME_MAX:
        raise CharacterRejected(message="name is required: a string of at most 256 characters")
    out: dict[str, Any] = {"id": character_id, "name": name}
    if "aliases" in payload:
        aliases = payload["aliases"]
        if not isinstance(aliases, list) or len(aliases) > CHARACTER_ALIASES_MAX or \
                not all(isinstance(a, str) and a.strip() for a in aliases):
            raise CharacterRejected(message="aliases must be a list of at most 32 non-empty strings")
        out["aliases"] = list(dict.fromkeys(a.strip() for a in aliases))
    kind = payload.get("type", "npc")
    if not isinstance(kind, str) or not 0 < len(kind) <= 32:
        raise CharacterRejected(message="type must be a string of at most 32 characters")
    out["type"] = kind
    description = payload.get("description", "")
    if not isinstance(description, str) or len(description) > CHARACTER_DESCRIPTION_MAX:
        raise CharacterRejected(message="description must be a string of at most 65536 characters")
    out["description"] = description
    fields = payload.get("fields", {})
    if not isinstance(fields, dict):
        raise CharacterRejected(message="fields must be an object")
    out["fields"] = fields
    if "version" in payload:
        version = payload["version"]
        if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version <= INT32_MAX:
            raise CharacterRejected(message="version must be a positive 32-bit integer")
        out["version"] = version
    if payload.get("createdAt") is not None:
        try:
            created_at = datetime.fromisoformat(str(payload["createdAt"]).replace("Z", "+00:00"))
        except ValueError:
            raise CharacterRejected(message="createdAt must be an ISO timestamp") from None
        out["createdAt"] = created_at if created_at.tzinfo else created_at.replace(tzinfo=dt_timezone.utc)
    return out


def character_aliases_check(session: Session, data: dict[str, Any]) -> None:
    """Raise CharacterRejected (400) when an alias equals another character's name or alias
    (case-insensitive; spec 004 §角色数据 别名)."""
    names: dict[str, str] = {}
    for other in Character.objects.filter(session=session).exclude(character_id=data["id"]):
        for label in [other.name, *(other.aliases or [])]:
            names.setdefault(label.casefold(), other.character_id)
    for alias in data.get("aliases", []):
        if alias.casefold() in names:
            raise CharacterRejected(message=f"alias {alias!r} is already the name or an alias of {names[alias.casefold()]}")


# ---------------------------------------------------------------------------------------------
# Lorebook (player-owned writes; spec 004 §Lorebook)
# ---------------------------------------------------------------------------------------------

_LORE_ENTRY_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,159}$")


def lorebook_payload_validate(payload: Any, *, entry_id: str | None = None) -> dict[str, Any]:
    """``{id?, title? (≤256), keys?, content, enabled?, priority? (int32), strategy?, position? (≤32),
    insertionOrder? (int32), extra?}`` → normalized fields. Raises InvalidRequest (400)."""
    if not isinstance(payload, dict):
        raise InvalidRequest(code="invalid_request_body", message="body must be an object")
    entry = payload.get("id", entry_id) if entry_id is None else entry_id
    if entry is None:
        entry = f"lore-{uuid.uuid4().hex[:12]}"
    if not isinstance(entry, str) or not _LORE_ENTRY_ID_RE.match(entry):
        raise InvalidRequest(code="invalid_lorebook_entry", message="id must be 1-160 letters, digits, '_', '.', ':' or '-'")
    content = payload.get("content")
    if not isinstance(content, str):
        raise InvalidRequest(code="invalid_lorebook_entry", message="content is required (string)")
    keys = payload.get("keys", [])
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        raise InvalidRequest(code="invalid_lorebook_entry", message="keys must be a list of strings")
    strategy = payload.get("strategy", "selective" if keys else "constant")
    if strategy not in ("constant", "selective"):
        raise InvalidRequest(code="invalid_lorebook_entry", message="strategy must be constant or selective")
    for name, limit in (("title", LORE_TITLE_MAX), ("position", LORE_POSITION_MAX)):
        if name in payload and (not isinstance(payload[name], str) or len(payload[name]) > limit):
            raise InvalidRequest(code="invalid_lorebook_entry", message=f"{name} must be a string of at most {limit} characters")
    for name in ("priority", "insertionOrder"):
        if name in payload and (isinstance(payload[name], bool) or not isinstance(payload[name], int)
                                or not INT32_MIN <= payload[name] <= INT32_MAX):
            raise InvalidRequest(code="invalid_lorebook_entry", message=f"{name} must be a 32-bit integer")
    if "enabled" in payload and not isinstance(payload["enabled"], bool):
        raise InvalidRequest(code="invalid_lorebook_entry", message="enabled must be a boolean")
    if "extra" in payload and not isinstance(payload["extra"], dict):
        raise InvalidRequest(code="invalid_lorebook_entry", message="extra must be an object")
    return {"entry_id": entry, "content": content, "keys": keys, "strategy": strategy,
            "title": payload.get("title", ""), "position": payload.get("position", ""),
            "priority": payload.get("priority", 0), "insertion_order": payload.get("insertionOrder"),
            "enabled": payload.get("enabled", True), "metadata": payload.get("extra", {})}


def _next_insertion_order(session: Session) -> int:
    last = LorebookEntry.objects.filter(session=session).order_by("-insertion_order").values_list("insertion_order", flat=True).first()
    return (last + 1) if last is not None else 0


def lorebook_create(session_id: str, payload: Any) -> LorebookEntry:
    """POST /lorebook: a new player-owned entry (409 lorebook_entry_exists when the player already has the id)."""
    data = lorebook_payload_validate(payload)
    with transaction.atomic():
        session = session_locked(session_id)
        _check_not_deleting(session)
        if LorebookEntry.objects.filter(session=session, owner=LorebookEntry.OWNER_PLAYER, plugin_id="",
                                        entry_id=data["entry_id"]).exists():
            raise LorebookEntryExists(data["entry_id"])
        if data["insertion_order"] is None:
            data["insertion_order"] = _next_insertion_order(session)
        return LorebookEntry.objects.create(session=session, owner=LorebookEntry.OWNER_PLAYER, **data)


def lorebook_replace(session_id: str, entry_id: str, payload: Any) -> LorebookEntry:
    """PUT /lorebook/:entryId: replace the player's entry or create it with this id."""
    data = lorebook_payload_validate(payload, entry_id=entry_id)
    with transaction.atomic():
        session = session_locked(session_id)
        _check_not_deleting(session)
        entry = LorebookEntry.objects.filter(session=session, owner=LorebookEntry.OWNER_PLAYER, plugin_id="",
                                             entry_id=entry_id).first()
        if data["insertion_order"] is None:
            data["insertion_order"] = entry.insertion_order if entry else _next_insertion_order(session)
        if entry is None:
            return LorebookEntry.objects.create(session=session, owner=LorebookEntry.OWNER_PLAYER, **data)
        for name, value in data.items():
            setattr(entry, name, value)
        entry.save()
        return entry


def lorebook_set_enabled(session_id: str, entry_id: str, enabled: Any) -> int:
    """PATCH /lorebook/:entryId ``{enabled}``: toggle every entry with this id (any owner — a world or
    plugin entry can be switched off without changing its ownership). 404 when none; returns count."""
    if not isinstance(enabled, bool):
        raise InvalidRequest(code="invalid_request_body", message="body must be { enabled: boolean }")
    with transaction.atomic():
        session = session_locked(session_id)
        _check_not_deleting(session)
        count = LorebookEntry.objects.filter(session=session, entry_id=entry_id).update(enabled=enabled, updated_at=timezone.now())
        if not count:
            raise LorebookEntryNotFound(entry_id)
    return count


def lorebook_delete(session_id: str, entry_id: str) -> None:
    """DELETE /lorebook/:entryId: delete the player's entry (404 when the player has none)."""
    with transaction.atomic():
        session = session_locked(session_id)
        _check_not_deleting(session)
        deleted, _ = LorebookEntry.objects.filter(session=session, owner=LorebookEntry.OWNER_PLAYER, plugin_id="",
                                                  entry_id=entry_id).delete()
        if not deleted:
            raise LorebookEntryNotFound(entry_id)


# ---------------------------------------------------------------------------------------------
# Session plugins (spec 004 §会话插件管理)
# ---------------------------------------------------------------------------------------------


def _plugins_resolve_saved(session: Session, registry, *, requested: list[str], excluded: list[str]):
    selection = dict((session.metadata or {}).get("pluginSelection") or {})
    keep = [p for p in session.active_plugins or [] if p not in excluded]
    return selection, plugins_resolve(registry, requested=requested, excluded=excluded,
                                      required_contracts=selection.get("requiredContracts") or [], keep=keep)


def _dimension_guard(session: Session, registry, runnable: list[str]) -> None:
    bound = (session.metadata or {}).get("dimensionProviderPluginId")
    providers = dimension_providers(registry, runnable)
    record = registry.get(bound) if bound else None
    if bound and record is not None and record.is_loaded and bound not in runnable:
        name = record.manifest.display_name
        raise DimensionProviderRequired(bound, name if isinstance(name, str) else str((name or {}).get("en-US") or bound))
    previous = dimension_providers(registry, [p for p in session.active_plugins or []])
    if len(providers) > 1 and set(providers) != set(previous):
        raise DimensionProviderConflict(providers)


def session_plugin_set(session_id: str, plugin_id: str, *, is_enabled: bool) -> dict[str, Any]:
    """PUT (enable) / DELETE (disable) /api/sessions/:id/plugins/:pluginId under the session lock.

    Re-solves the selection (requested ± plugin, excluded ∓ plugin). 404 plugin_not_found for an
    unknown id; 403 plugin_locked when disabling a builtin core plugin; disabling revokes the
    plugin's approvals (its grant generation rotates); 409 session_not_active unless active; 409 dimension_provider_required /
    dimension_provider_conflict per the spec. Nothing changes on error. A newly enabled setup
    runtime is added to ``setupRuntimes`` as pending. Returns ``{ok, activePluginIds, resolution}``,
    plus ``worldData {receivers, imported, conflicts, notices}`` when the session has a world and
    plugins joined the enabled set: they get the world's data once, in the same transaction
    (sessions.world_data_import; spec 004 开局后加入的接收插件).
    """
    from sessions.approvals import plugin_grants_revoke
    from sessions.selectors import plugin_is_locked, runnable_plugins

    registry = plugin_registry()
    record = registry.get(plugin_id)
    if record is None:
        raise PluginNotFound(plugin_id)
    if not is_enabled and plugin_is_locked(record):
        raise PluginLocked(plugin_id)
    with transaction.atomic():
        session = session_locked(session_id)
        session_check_active(session)
        was_runnable, _ = runnable_plugins(session, registry)
        if not is_enabled:
            # Disabling revokes the plugin's grants (spec 004 §会话插件管理): its generation rotates.
            plugin_grants_revoke(session, plugin_id)
        selection = dict((session.metadata or {}).get("pluginSelection") or {})
        requested = [p for p in selection.get("requested") or [] if p != plugin_id]
        excluded = [p for p in selection.get("excluded") or [] if p != plugin_id]
        if is_enabled:
            requested.append(plugin_id)
        else:
            excluded.append(plugin_id)
        _, resolution = _plugins_resolve_saved(session, registry, requested=requested, excluded=excluded)
        _dimension_guard(session, registry, resolution.runnable)
        selection.update({"requested": requested, "excluded": excluded,
                          "autoAdded": sorted(set(selection.get("autoAdded") or []) | set(resolution.auto_added)),
                          "rejections": resolution.rejections})
        meta = dict(session.metadata or {})
        meta["pluginSelection"] = selection
        setup = dict(session.setup_runtimes or {})
        for runtime_id, state in setup_runtimes_initial(registry, resolution.runnable).items():
            setup.setdefault(runtime_id, state)
        session.metadata = meta
        session.active_plugins = resolution.active_plugins
        session.setup_runtimes = setup
        joined = [p for p in resolution.runnable if p not in was_runnable]
        world_data = world_data_late_import(session, registry, joined=joined, runnable=resolution.runnable) if is_enabled else None
        session.save(update_fields=["metadata", "active_plugins", "setup_runtimes", "updated_at"])
    out = {"ok": True, "activePluginIds": resolution.runnable, "resolution": resolution.as_dict()}
    if world_data is not None:
        out["worldData"] = world_data.as_dict()
    return out
