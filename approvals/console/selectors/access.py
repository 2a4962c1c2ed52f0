"""Who may use which part of the console: the action kinds a staff member reviews, the auditor."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib.auth.models import AnonymousUser
from django.db.models import QuerySet

from approvals.core.registry import (
    registry,
)
from approvals.models import (
    Preview,
)

if TYPE_CHECKING:
    from django.contrib.auth.models import User  # settings.AUTH_USER_MODEL, as django-stubs resolves it


# Permissions ---------------------------------------------------------------------------------


def reviewable_actions(*, user: User | AnonymousUser) -> list[str]:
    """Names of the registered action kinds this person may decide in the console."""
    if not (user.is_authenticated and user.is_active and user.is_staff):
        return []
    return sorted(name for name, action in registry.actions.items() if user.has_perm(action.review_permission))


# The auditor (or team lead): every audit record, those about no action included, every agent session,
# and the revocation of staff members' sessions. Declared on AuditRecord.Meta (migration 0015).
AUDIT_EVERYTHING_PERMISSION = "approvals.audit_everything"


def is_auditor(*, user: User | AnonymousUser) -> bool:
    return bool(
        user.is_authenticated and user.is_active and user.is_staff and user.has_perm(AUDIT_EVERYTHING_PERMISSION)
    )


def may_export_audit(*, user: User | AnonymousUser) -> bool:
    return bool(
        user.is_authenticated and user.is_active and user.is_staff and user.has_perm("approvals.export_auditrecord")
    )


def console_access(*, user: User | AnonymousUser) -> bool:
    """Whether this person works the review queue (where `/` sends them after logging in)."""
    return bool(reviewable_actions(user=user))


def may_see_agent_sessions(*, user: User | AnonymousUser) -> bool:
    """The agent-sessions page: reviewers (the sessions of their actions) and the auditor (all)."""
    return console_access(user=user) or is_auditor(user=user)


def reviewable_previews(*, user: User) -> QuerySet[Preview]:
    return Preview.objects.filter(action__in=reviewable_actions(user=user))


def reviewable_preview(*, user: User, preview_id: Any) -> Preview:
    """The preview, if this reviewer may see it; raises Preview.DoesNotExist otherwise."""
    return reviewable_previews(user=user).select_related("actor", "agent_session", "proposed_by").get(pk=preview_id)
