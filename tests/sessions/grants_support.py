"""Test helpers for community-plugin approvals: grants written the way an allow decision leaves them."""
from __future__ import annotations

from plugins_app.trust import SERVER_CODE_ACTION, runtime_action


def community_grants_allow(session, plugin_id: str, runtime_ids=(), actions=()) -> None:
    """Allow (scope session) ``covel:plugin-server-code``, ``runtime:<id>`` for each id and each RPC
    action name, under the session's current incarnation and generations (as POST
    /api/approvals/:id/decision would)."""
    from django.utils import timezone

    from sessions.grants import generations, payload_hash
    from sessions.models import Approval

    session_generation, plugin_generation = generations(session, plugin_id)
    for action in [SERVER_CODE_ACTION, *[runtime_action(r) for r in runtime_ids], *actions]:
        Approval.objects.create(session_id=session.pk, incarnation=session.incarnation, plugin_id=plugin_id,
                                session_generation=session_generation, plugin_generation=plugin_generation,
                                action=action, payload_hash=payload_hash({}), status=Approval.STATUS_ALLOWED,
                                scope=Approval.SCOPE_SESSION, decided_at=timezone.now())
