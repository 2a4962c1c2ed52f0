"""The audit trail (per preview, per subject, the export) and the agent sessions in a staff member's scope."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db import connection
from django.db.models import F, Q, QuerySet, Window
from django.db.models.functions import RowNumber
from django.utils import timezone

from approvals.console.review_messages import reviewers
from approvals.console.selectors.access import is_auditor, reviewable_actions, reviewable_previews
from approvals.models import (
    AgentSession,
    AuditRecord,
    Preview,
    WebhookDelivery,
)

if TYPE_CHECKING:
    from django.contrib.auth.models import User  # settings.AUTH_USER_MODEL, as django-stubs resolves it


# The audit trail -----------------------------------------------------------------------------


def preview_timeline(*, preview: Preview) -> QuerySet[AuditRecord]:
    return preview.audit_records.select_related("actor", "agent_session").order_by("id")


def subject_timeline(*, user: User, subject_type: str, subject_id: str) -> QuerySet[AuditRecord]:
    """Every audit record about one order or invoice, including refused proposals that named it
    (those have no subject type: the subject was never verified), for the kinds this reviewer decides."""
    return (
        AuditRecord.objects.filter(
            subject_id=subject_id,
            subject_type__in=[subject_type, ""],
            action__in=reviewable_actions(user=user),
        )
        .select_related("actor", "agent_session")
        .order_by("id")
    )


AUDIT_EXPORT_FIELDS = (
    "id",
    "created_at",
    "event",
    "action",
    "preview_id",
    "actor",
    "agent_session_id",
    "subject_type",
    "subject_id",
    "raw_arguments",
    "approval_basis",
    "result",
)


def auditable_records(*, user: User) -> QuerySet[AuditRecord]:
    """The audit records this staff member may read in bulk: every one for the auditor; otherwise those
    about an action they decide (the preview's action when the record is about a preview, else the
    record's own). A record about no action (a login pause, a shop-data change, a session minted)
    is the auditor's alone."""
    if is_auditor(user=user):
        return AuditRecord.objects.all()
    actions = reviewable_actions(user=user)
    return AuditRecord.objects.filter(
        Q(preview__isnull=False, preview__action__in=actions) | Q(preview__isnull=True, action__in=actions)
    )


def audit_export_rows(*, user: User, start: datetime, end: datetime) -> Iterator[dict[str, Any]]:
    """The audit records `user` may read (auditable_records) created in [start, end), oldest first,
    streamed from the database in chunks."""
    records = (
        auditable_records(user=user)
        .filter(created_at__gte=start, created_at__lt=end)
        .select_related("actor")
        .order_by("id")
    )
    for record in records.iterator(chunk_size=2000):
        yield {
            "id": record.pk,
            "created_at": record.created_at.isoformat(),
            "event": record.event,
            "action": record.action,
            "preview_id": str(record.preview_id) if record.preview_id else None,
            "actor": record.actor.get_username() if record.actor else None,
            "agent_session_id": record.agent_session_id,
            "subject_type": record.subject_type,
            "subject_id": record.subject_id,
            "raw_arguments": record.raw_arguments,
            "approval_basis": record.approval_basis,
            "result": record.result,
        }


def live_agent_sessions() -> QuerySet[AgentSession]:
    """Agent sessions that can still act: not revoked, not expired. Newest first."""
    return (
        AgentSession.objects.filter(revoked_at__isnull=True, expires_at__gt=timezone.now())
        .select_related("user")
        .order_by("-created_at")
    )


def _has_a_tool(tools: list[str]) -> Q:
    """Sessions whose tools include one of `tools`: on the JSON text of the list, which stores each
    tool name between double quotes (a name is an action's, `[a-z_]+`), on PostgreSQL and SQLite alike."""
    condition = Q(pk__in=[])
    for name in tools:
        condition |= (
            Q(tools__contains=[name])
            if connection.features.supports_json_field_contains
            else Q(tools__icontains=json.dumps(name))
        )
    return condition


def agent_sessions_in_scope(*, user: User) -> QuerySet[AgentSession]:
    """The live agent sessions this staff member sees on the console's page: every one for the
    auditor; otherwise those with a tool of an action they decide."""
    sessions = live_agent_sessions()
    if is_auditor(user=user):
        return sessions
    return sessions.filter(_has_a_tool(reviewable_actions(user=user)))


def may_revoke_agent_session(*, user: User, session: AgentSession) -> bool:
    """A session in scope (agent_sessions_in_scope) may be revoked by any of its reviewers, unless it
    is a staff member's: those only by the auditor."""
    return is_auditor(user=user) or not session.user.is_staff


SESSION_PREVIEWS_SHOWN = 5  # per session on the sessions page; its own page lists them all


def agent_session_previews(*, user: User, sessions: Sequence[AgentSession]) -> dict[Any, list[Preview]]:
    """The latest previews (SESSION_PREVIEWS_SHOWN) each session proposed that this staff member may
    review, by session id, newest first, in one query (a row number per session)."""
    latest = Window(
        RowNumber(), partition_by=[F("agent_session_id")], order_by=[F("created_at").desc(), F("pk").desc()]
    )
    previews = (
        reviewable_previews(user=user)
        .filter(agent_session__in=[s.pk for s in sessions])
        .annotate(place=latest)
        .filter(place__lte=SESSION_PREVIEWS_SHOWN)
        .select_related("actor")
        .order_by("agent_session_id", "place")
    )
    found: dict[Any, list[Preview]] = {s.pk: [] for s in sessions}
    for preview in previews:
        found[preview.agent_session_id].append(preview)
    return found


def webhook_deliveries_in_scope(*, user: User, limit: int = 50) -> list[WebhookDelivery]:
    """The latest webhook deliveries of the sessions this staff member sees, newest first."""
    return list(
        WebhookDelivery.objects.filter(agent_session__in=agent_sessions_in_scope(user=user))
        .select_related("agent_session__user")
        .order_by("-created_at", "-pk")[:limit]
    )


def assignable_reviewers(*, preview: Preview) -> QuerySet[Any]:
    """Active staff who may decide this preview (never its proposer), for the assign menu."""
    return reviewers(preview.action).exclude(pk=preview.actor_id)


# The event log -------------------------------------------------------------------------------

EVENT_LOG_PAGE_SIZE = 50


@dataclass(frozen=True)
class EventFilters:
    action: str = ""
    event: str = ""
    preview_id: Any = None
    actor: str = ""  # a username, exactly
    start: datetime | None = None
    end: datetime | None = None  # not included


@dataclass(frozen=True)
class EventPage:
    records: list[AuditRecord]
    older_than: int | None  # the keyset of the next (older) page, None on the last one


def event_log(*, user: User, filters: EventFilters, before: int | None = None, size: int | None = None) -> EventPage:
    """The audit records `user` may read (auditable_records), newest first, filtered, one page at a time.
    Pages are keyset (`id < before`), not OFFSET: a page deep in a long log costs what the first does,
    and records appended meanwhile do not shift the pages being read."""
    size = size or EVENT_LOG_PAGE_SIZE
    records = auditable_records(user=user)
    if filters.action:
        records = records.filter(Q(action=filters.action) | Q(preview__action=filters.action))
    if filters.event:
        records = records.filter(event=filters.event)
    if filters.preview_id is not None:
        records = records.filter(preview_id=filters.preview_id)
    if filters.actor:
        records = records.filter(actor__username=filters.actor)
    if filters.start is not None:
        records = records.filter(created_at__gte=filters.start)
    if filters.end is not None:
        records = records.filter(created_at__lt=filters.end)
    if before is not None:
        records = records.filter(id__lt=before)
    page = list(records.select_related("actor", "agent_session", "preview").order_by("-id")[: size + 1])
    older = page[size - 1].pk if len(page) > size else None
    return EventPage(records=page[:size], older_than=older)
