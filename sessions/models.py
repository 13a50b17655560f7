"""Worlds (server-store), sessions and the session state the kernel owns.

Only ``sessions/services.py`` (and the commit chain's appliers, which call it) writes these tables.
JSON fields hold camelCase wire shapes exactly as the spec writes them.
"""
from __future__ import annotations

import uuid

from django.db import models
from django.utils import timezone


class World(models.Model):
    """A world created through the API (``metadata.source == "store"``). File worlds are not rows.

    ``package`` holds the loaded package dict (lore per locale, characters, lorebook, dimensions,
    character schema, world data) in the same shape the file loader produces.
    """

    STATE_ACTIVE = "active"
    STATE_DELETING = "deleting"

    id = models.CharField(primary_key=True, max_length=128)
    name = models.CharField(max_length=256)
    metadata = models.JSONField(default=dict)
    package = models.JSONField(default=dict)
    state = models.CharField(max_length=16, default=STATE_ACTIVE, db_index=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return self.id


class Session(models.Model):
    """One playthrough of a world. ``status``: active|paused|ended; ``phase``: setup|playing.

    ``owner_token_hash`` (SHA-256 hex of the owner token) and ``incarnation`` are private framework
    fields: they never appear in a response. ``deletion_state`` is set before a delete starts so
    concurrent writers see 409 session_deleting. ``event_epoch``/``event_seq`` number the session's
    append-only event log (SSE cursor ``<epoch>:<seq>``).
    """

    STATUS_ACTIVE = "active"
    DELETION_DELETING = "deleting"
    STATUS_PAUSED = "paused"
    STATUS_ENDED = "ended"
    PHASE_SETUP = "setup"
    PHASE_PLAYING = "playing"

    id = models.CharField(primary_key=True, max_length=160)
    world_id = models.CharField(max_length=128, db_index=True)
    title = models.CharField(max_length=256, blank=True, default="")
    status = models.CharField(max_length=16, default=STATUS_ACTIVE, db_index=True)
    phase = models.CharField(max_length=16, default=PHASE_SETUP)
    completed_player_turns = models.IntegerField(default=0)
    setup_runtimes = models.JSONField(default=dict)
    seats = models.JSONField(default=list)
    active_plugins = models.JSONField(default=list)
    locale = models.CharField(max_length=32, default="en-US")
    metadata = models.JSONField(default=dict)
    owner_token_hash = models.CharField(max_length=64, blank=True, default="")
    incarnation = models.CharField(max_length=64)
    deletion_state = models.CharField(max_length=16, blank=True, default="")
    deletion_started_at = models.DateTimeField(null=True, blank=True)
    event_epoch = models.CharField(max_length=32)
    event_seq = models.BigIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return self.id


class CharacterSchema(models.Model):
    """The session's character schema (JSON Schema of character ``fields``)."""

    session = models.OneToOneField(Session, on_delete=models.CASCADE, related_name="character_schema")
    schema = models.JSONField(default=dict)
    updated_at = models.DateTimeField(auto_now=True)


class Character(models.Model):
    """A character of a session; ``character_id`` unique per session, ``version`` bumps on each write."""

    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="characters")
    character_id = models.CharField(max_length=160)
    name = models.CharField(max_length=256)
    type = models.CharField(max_length=32, default="npc")
    aliases = models.JSONField(default=list)
    fields = models.JSONField(default=dict)
    description = models.TextField(blank=True, default="")
    version = models.IntegerField(default=1)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["session", "character_id"], name="uniq_character_per_session")]
        indexes = [models.Index(fields=["session", "name"])]

    def __str__(self) -> str:
        return f"{self.name} ({self.character_id})"


class ChatMessage(models.Model):
    """A visible chat message. ``message_id`` is the stable id (idempotent sync); the PK orders history."""

    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="messages")
    message_id = models.CharField(max_length=160)
    role = models.CharField(max_length=16)
    kind = models.CharField(max_length=32, default="text")
    content = models.TextField(blank=True, default="")
    seat_id = models.CharField(max_length=64, blank=True, default="")
    turn_id = models.CharField(max_length=64, blank=True, default="", db_index=True)
    metadata = models.JSONField(default=dict)
    # Settable: POST /messages/sync may carry the client's createdAt. History is ordered by
    # (created_at, id); the keyset cursor of GET /messages/page encodes that pair.
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["session", "message_id"], name="uniq_message_per_session")]
        indexes = [models.Index(fields=["session", "id"]), models.Index(fields=["session", "created_at", "id"])]


class TurnMessage(models.Model):
    """Prompt history (turn_messages): model-facing messages of a turn, per runtime, in order."""

    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="turn_messages")
    turn_id = models.CharField(max_length=64, db_index=True)
    runtime_id = models.CharField(max_length=160, blank=True, default="")
    role = models.CharField(max_length=16)
    content = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["session", "id"])]


class LorebookEntry(models.Model):
    """A lorebook entry of a session. ``owner``: world | player | plugin (``plugin_id`` set for plugin).

    Identity is (session, owner, plugin_id, entry_id) (spec 004 §Lorebook: 词条的身份键是
    (sessionId, owner, entryId)); different owners may reuse an entry id.
    ``strategy``: constant | selective; ``insertion_order`` orders the list and injection.
    """

    STRATEGY_CONSTANT = "constant"
    STRATEGY_SELECTIVE = "selective"

    OWNER_WORLD = "world"
    OWNER_PLAYER = "player"
    OWNER_PLUGIN = "plugin"

    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="lorebook")
    entry_id = models.CharField(max_length=160)
    owner = models.CharField(max_length=16, default=OWNER_PLAYER)
    plugin_id = models.CharField(max_length=128, blank=True, default="")
    title = models.CharField(max_length=256, blank=True, default="")
    keys = models.JSONField(default=list)
    content = models.TextField(blank=True, default="")
    enabled = models.BooleanField(default=True)
    priority = models.IntegerField(default=0)
    strategy = models.CharField(max_length=16, default=STRATEGY_SELECTIVE)
    position = models.CharField(max_length=32, blank=True, default="")
    insertion_order = models.IntegerField(default=0)
    metadata = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["session", "owner", "plugin_id", "entry_id"], name="uniq_lore_entry_per_owner")
        ]
        indexes = [models.Index(fields=["session", "insertion_order", "id"])]


class DimensionValue(models.Model):
    """A world dimension of a session: definition (incl. JSON Schema), current value, CAS ``version``."""

    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="dimensions")
    dimension_id = models.CharField(max_length=128)
    definition = models.JSONField(default=dict)
    value = models.JSONField(null=True)
    version = models.IntegerField(default=1)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["session", "dimension_id"], name="uniq_dimension_per_session")]


class Snapshot(models.Model):
    """A saved copy of a session's state (``data``), restorable or forkable."""

    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="snapshots")
    KIND_AUTO = "auto"
    KIND_MANUAL = "manual"
    KIND_FORK = "fork"

    snapshot_id = models.CharField(max_length=160, unique=True)
    label = models.CharField(max_length=256, blank=True, default="")
    completed_player_turns = models.IntegerField(default=0)
    data = models.JSONField(default=dict)
    # kind: auto | manual | fork; parent_snapshot_id: the source snapshot of a fork (spec 004 §Snapshot / Fork).
    kind = models.CharField(max_length=16, default=KIND_MANUAL)
    turn_id = models.CharField(max_length=64, blank=True, default="")
    parent_snapshot_id = models.CharField(max_length=160, blank=True, default="")
    # UTF-8 size of ``data`` as stored, so the list never loads payloads.
    payload_size_bytes = models.IntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["session", "created_at", "id"])]


class Approval(models.Model):
    """One approval of a session (spec 004 §RPC Approval 流程, §社区插件授权): a pending request for a
    community plugin to run code or an action, and then the player's decision on it.

    ``action``: ``covel:plugin-server-code``, ``runtime:<runtimeId>``, ``event:<topic>`` or an RPC
    action name. ``status``: pending → allowed (a grant; ``scope`` once|session) | denied; a once
    grant becomes consumed when one identical request (``payload_hash``, key order ignored) uses it
    within ``expires_at``; revoke and scope changes make pending rows stale. A grant holds only while
    ``incarnation`` and both generations equal the session's current ones (``sessions.approvals``).
    Stored in the database so every web process and worker honours the same decisions.
    ``session_id`` is not a foreign key: the row outlives a deleted session so a late decision on it
    answers 409 approval_scope_changed; rows of an old incarnation are never valid again and are
    pruned when the id asks again.
    """

    STATUS_PENDING = "pending"
    STATUS_ALLOWED = "allowed"
    STATUS_DENIED = "denied"
    STATUS_CONSUMED = "consumed"
    STATUS_STALE = "stale"
    SCOPE_ONCE = "once"
    SCOPE_SESSION = "session"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    session_id = models.CharField(max_length=160, db_index=True)
    incarnation = models.CharField(max_length=64)
    session_generation = models.IntegerField(default=0)
    plugin_generation = models.IntegerField(default=0)
    plugin_id = models.CharField(max_length=128)
    action = models.CharField(max_length=300)
    payload = models.JSONField(default=dict)
    payload_hash = models.CharField(max_length=64)
    status = models.CharField(max_length=16, default=STATUS_PENDING)
    scope = models.CharField(max_length=16, blank=True, default="")
    trust_level = models.CharField(max_length=16, default="community")
    description = models.TextField(blank=True, default="")
    requested_at = models.DateTimeField(default=timezone.now)
    decided_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["session_id", "plugin_id", "action", "status"])]


class ApprovalGeneration(models.Model):
    """The persisted grant generation of a session (``plugin_id`` "") or of one plugin in it.

    DELETE /api/sessions/:id/approvals and disabling a plugin increment it; an approval made under an
    older generation is no grant anywhere any more (spec 004 revoke 边界: 其他 Pod 即使内存里还有旧的
    grant，也会因为代次不匹配而拒绝). A missing row means generation 0.
    """

    SESSION_WIDE = ""

    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="approval_generations")
    plugin_id = models.CharField(max_length=128, blank=True, default=SESSION_WIDE)
    generation = models.IntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["session", "plugin_id"], name="uniq_approval_generation")]


class WorldDataLedgerRow(models.Model):
    """``world_data_import_ledger`` (spec 004 sync-data / sync-dimensions): one row per record the
    world-data importer wrote into a session. ``managed`` rows are the importer's: sync may replace
    or remove them while the target still holds ``value_hash`` (SHA-256 of the canonical JSON written).
    ``kind`` is "plugin-data" (target ``contract:<c>``, plugin_id/namespace/key of the PluginData row)
    or "dimension" (target ``world:metadata.dimensions``, key = dimension id, the protected
    ``_dimensions`` record; ``definition_hash`` is the definition it was imported with, ``version``
    the DimensionValue version written). Written only by sessions.world_data_sync."""

    KIND_PLUGIN_DATA = "plugin-data"
    KIND_DIMENSION = "dimension"

    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="world_data_ledger")
    world_id = models.CharField(max_length=128)
    kind = models.CharField(max_length=16)
    source_id = models.CharField(max_length=128)
    target = models.CharField(max_length=256)
    plugin_id = models.CharField(max_length=128, blank=True, default="")
    namespace = models.CharField(max_length=128, blank=True, default="")
    key = models.CharField(max_length=256)
    value_hash = models.CharField(max_length=64)
    definition_hash = models.CharField(max_length=64, blank=True, default="")
    version = models.IntegerField(default=0)
    managed = models.BooleanField(default=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "world_data_import_ledger"
        constraints = [models.UniqueConstraint(fields=["session", "kind", "plugin_id", "namespace", "key"],
                                               name="uniq_world_data_ledger_row")]
