"""Read side of the staff console: who may review what, the queue, failures and the audit trail.

Every query here is scoped to the action kinds the reviewer holds the permission for
(`Action.review_permission`), so a new action kind plugs into the same console.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.contrib.auth.models import AnonymousUser
from django.core.paginator import Page, Paginator
from django.db import connection
from django.db.models import Case, Count, Q, QuerySet, When
from django.utils import timezone

from approvals.console.notifications import escalation_due_before, reviewers
from approvals.core.presentation import preview_execution, preview_state_words
from approvals.core.quorum import counting_staff_approvers
from approvals.core.registry import (
    Action,
    CounterField,
    DisplayRow,
    FactTable,
    ReviewDocument,
    RiskFlag,
    RuleResult,
    registry,
)
from approvals.core.selectors import execution_staff_step, executions_of
from approvals.models import (
    AgentSession,
    Approval,
    ApprovalRole,
    AuditEvent,
    AuditRecord,
    Execution,
    ExecutionOutcome,
    Preview,
    PreviewStatus,
    ReviewClaim,
    WebhookDelivery,
)

if TYPE_CHECKING:
    from django.contrib.auth.models import User  # settings.AUTH_USER_MODEL, as django-stubs resolves it

QUEUE_PAGE_SIZE = 50
# The tabs count a state that staff do not work on (the history, the customers' confirmations) only
# this far: the history grows for ever, and an exact count of it is a scan of every preview ever made.
STATE_COUNT_CAP = 1000
STAFF_WORK_STATES = (PreviewStatus.AWAITING_STAFF, PreviewStatus.NEEDS_ATTENTION)
DEFAULT_QUEUE_STATE = PreviewStatus.AWAITING_STAFF.value
ALL_STATES = "all"
AGE_LIMITS = {
    "5m": timedelta(minutes=5),
    "1h": timedelta(hours=1),
    "1d": timedelta(days=1),
    "7d": timedelta(days=7),
}
# Events that show how an execution went: each attempt, its outcome and each retry.
ATTEMPT_EVENTS = (
    AuditEvent.EXECUTION_STARTED,
    AuditEvent.EXECUTION_TRANSITION,
    AuditEvent.EXECUTION_FENCED_OFF,
    AuditEvent.EXECUTION_ATTEMPT_FAILED,
    AuditEvent.EXECUTION_FAILED,
    AuditEvent.RETRIED,
    AuditEvent.EXECUTED,
    AuditEvent.SUPERSEDED,
)


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


# The queue -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class QueueFilters:
    action: str = ""
    state: str = DEFAULT_QUEUE_STATE
    currency: str = ""
    age: str = ""
    query: str = ""
    mine: bool = False
    overdue: bool = False


@dataclass(frozen=True)
class QueueRow:
    preview: Preview
    summary: str
    flags: list[RiskFlag] = field(default_factory=list)
    overdue: bool = False
    staff_approvals: int = 0

    @property
    def quorum(self) -> str:
        """`1 of 2` while an M-of-N preview collects staff approvals; empty for a single approval."""
        needed = self.preview.staff_approvals_needed
        return f"{self.staff_approvals} of {needed}" if needed > 1 else ""


@dataclass(frozen=True)
class StateCount:
    state: str
    label: str
    count: int
    at_least: bool = False  # more than `count` (STATE_COUNT_CAP) are in this state


@dataclass
class Queue:
    page: Page
    rows: list[QueueRow]
    counts: list[StateCount]
    total: int
    total_all: int
    total_all_at_least: bool  # a state's count stopped at its cap: total_all is a floor
    filters: QueueFilters
    actions: list[str] = field(default_factory=list)
    #: Whether an action the queue lists proposes amounts: the amount column and the currency filter
    #: are shown only then.
    shows_amounts: bool = False


def _search(queryset: QuerySet[Preview], query: str) -> QuerySet[Preview]:
    """By subject id (an order or invoice number), the customer's username or email, a payload field an
    action makes searchable (an invoice's recipient: Action.searchable_payload_fields), or the id."""
    condition = Q(subject_id__icontains=query) | Q(actor__username__icontains=query) | Q(actor__email__icontains=query)
    for name in registry.searchable_payload_fields():
        condition |= Q(**{f"payload__{name}__icontains": query})
    try:
        condition |= Q(pk=uuid.UUID(query))
    except ValueError:
        pass
    return queryset.filter(condition)


def review_queue(*, user: User, filters: QueueFilters, page_number: Any = 1) -> Queue:
    """Previews of the kinds this reviewer decides, oldest first, with counts per state.

    A constant number of queries whatever the page size and however long the history: rows come
    with their actor, and the counts per state (`_state_counts`) cover the same filters (except the
    state) without counting past STATE_COUNT_CAP in a state that staff do not work on.
    """
    actions = reviewable_actions(user=user)
    scoped = Preview.objects.filter(action__in=actions)
    if filters.action:
        scoped = scoped.filter(action=filters.action)
    if filters.currency:
        scoped = scoped.filter(currency=filters.currency)
    if filters.age in AGE_LIMITS:
        scoped = scoped.filter(created_at__lte=timezone.now() - AGE_LIMITS[filters.age])
    if filters.query:
        scoped = _search(scoped, filters.query)
    if filters.mine:
        scoped = scoped.filter(claim__claimed_by=user)
    due = escalation_due_before()
    if filters.overdue:
        overdue = Q(status=PreviewStatus.AWAITING_STAFF, status_changed_at__lte=due)
        scoped = scoped.filter(overdue) if due else scoped.none()

    counts = _state_counts(scoped, listed_state=filters.state)
    total_all = sum(c.count for c in counts)
    total_all_at_least = any(c.at_least for c in counts)
    if filters.state != ALL_STATES:
        total = next((c.count for c in counts if c.state == filters.state), 0)
    else:
        if total_all_at_least:  # listed: the pages need the exact count
            total_all, total_all_at_least = scoped.count(), False
        total = total_all
    listed = scoped if filters.state == ALL_STATES else scoped.filter(status=filters.state)
    listed = listed.select_related("actor", "agent_session", "proposed_by", "claim__claimed_by").order_by(
        "created_at", "pk"
    )
    paginator = Paginator(listed, QUEUE_PAGE_SIZE)
    paginator.count = total  # known from the counts per state: no second COUNT over the queue
    page = paginator.get_page(page_number)
    rows = queue_rows(list(page.object_list), due=due)
    return Queue(
        page=page,
        rows=rows,
        counts=counts,
        total=total,
        total_all=total_all,
        total_all_at_least=total_all_at_least,
        filters=filters,
        actions=actions,
        shows_amounts=_proposes_amounts([filters.action] if filters.action else actions),
    )


def _proposes_amounts(action_names: list[str]) -> bool:
    return any((action := registry.action(name)) is not None and action.proposes_amount for name in action_names)


def _state_counts(scoped: QuerySet[Preview], *, listed_state: str) -> list[StateCount]:
    """Counts per state over the filtered previews, in PreviewStatus's order.

    The states staff act on (waiting for staff, needs attention) and the listed one, whose pages need
    the number, come exact from one grouped query; COUNT(*) rather than COUNT(id) is answered from the
    (action, status) index alone. Every other state (the customer's to confirm, the history) is
    counted up to STATE_COUNT_CAP, a query each that stops there.
    """
    exact_states = [s for s in PreviewStatus if s in STAFF_WORK_STATES or s.value == listed_state]
    exact = dict(scoped.filter(status__in=exact_states).order_by().values_list("status").annotate(n=Count("*")))
    counts = []
    for state in PreviewStatus:
        if state in exact_states:
            counts.append(StateCount(state.value, state.label, exact.get(state.value, 0)))
        else:
            found = scoped.filter(status=state).order_by()[: STATE_COUNT_CAP + 1].count()
            capped = found > STATE_COUNT_CAP
            counts.append(StateCount(state.value, state.label, min(found, STATE_COUNT_CAP), at_least=capped))
    return counts


def queue_rows(previews: list[Preview], *, due: datetime | None = None) -> list[QueueRow]:
    """Rows with their risk flags (a query per action kind) and staff approvals (one query)."""
    flags: dict[Any, list[RiskFlag]] = {}
    for name in {p.action for p in previews}:
        action = registry.action(name)
        if action is not None:
            flags.update(action.risk_flags_many([p for p in previews if p.action == name]))
    quorum_ids = [p.pk for p in previews if p.staff_approvals_needed > 1]
    approvals: dict[Any, list[Approval]] = {}
    if quorum_ids:
        for approval in Approval.objects.filter(
            preview_id__in=quorum_ids, role=ApprovalRole.STAFF, lapsed_at__isnull=True
        ).only("preview_id", "role", "approver_id", "lapsed_at"):
            approvals.setdefault(approval.preview_id, []).append(approval)
    return [
        QueueRow(
            preview=p,
            summary=_summary(p),
            flags=flags.get(p.pk, []),
            overdue=due is not None and p.status == PreviewStatus.AWAITING_STAFF and p.status_changed_at <= due,
            staff_approvals=len(counting_staff_approvers(p, approvals.get(p.pk, []))),
        )
        for p in previews
    ]


def next_to_review(*, user: User, after: Preview) -> Preview | None:
    """Approve-and-next: the oldest preview after this one (else the oldest) that this reviewer can
    decide now: waiting for staff, not theirs, not approved by them, not claimed by someone else."""
    candidates = (
        reviewable_previews(user=user)
        .filter(status=PreviewStatus.AWAITING_STAFF)
        .exclude(pk=after.pk)
        .exclude(actor=user)
        .exclude(proposed_by=user)
        .exclude(approvals__role=ApprovalRole.STAFF, approvals__approver=user, approvals__lapsed_at__isnull=True)
        .filter(Q(claim__isnull=True) | Q(claim__claimed_by=user))
        .order_by("created_at", "pk")
    )
    return candidates.filter(created_at__gte=after.created_at).first() or candidates.first()


def claim_of(preview: Preview) -> Any:
    """The preview's claim, or None (without a query when it was selected with the preview)."""
    try:
        return preview.claim
    except Preview.claim.RelatedObjectDoesNotExist:
        return None


def _summary(preview: Preview) -> str:
    action = registry.action(preview.action)
    return action.review_summary(preview) if action else f"{preview.action} on {preview.subject_id}"


# The detail page -----------------------------------------------------------------------------


@dataclass
class ReviewContext:
    """What a reviewer sees, separated by trust."""

    preview: Preview
    action: Action | None
    summary: str
    consequence: str
    outcome: str
    payload_rows: list[DisplayRow]
    facts: list[DisplayRow]
    policy: list[RuleResult]
    tables: list[FactTable]
    document: ReviewDocument | None
    approvals: list[Any]
    siblings: list[QueueRow]
    proposal: AuditRecord | None
    execution: Execution | None
    staff_step: str
    state_title: str
    state_text: str
    effect_reference: str
    effect_performer: str
    execution_outcome_words: str
    flags: list[RiskFlag] = field(default_factory=list)
    counter_fields: list[CounterField] = field(default_factory=list)
    quorum: str = ""
    overdue: bool = False
    claim: Any = None
    replaced_by: Preview | None = None


def _outcome_words(execution: Execution | None, performer: str) -> str:
    """The execution's outcome in lower case, naming who refused a refused effect."""
    if execution is None:
        return ""
    if execution.outcome == ExecutionOutcome.FAILED_AFTER_CHECK:
        return f"refused by {performer}"
    return execution.get_outcome_display().lower()


def preview_review(*, preview: Preview) -> ReviewContext:
    action = registry.action(preview.action)
    performer = action.effect_performer if action else Action.effect_performer
    execution = preview_execution(preview)
    state_title, state_text = preview_state_words(preview, "staff", execution)
    siblings = (
        Preview.objects.filter(subject_type=preview.subject_type, subject_id=preview.subject_id)
        .exclude(pk=preview.pk)
        .select_related("actor")
        .order_by("-created_at")[:50]
    )
    # The proposal as the agent sent it: the raw arguments are exactly what was received.
    proposal = (
        preview.audit_records.filter(event=AuditEvent.PROPOSED).select_related("agent_session").order_by("id").first()
    )
    row = queue_rows([preview], due=escalation_due_before())[0]
    return ReviewContext(
        preview=preview,
        action=action,
        summary=_summary(preview),
        consequence=action.consequence(preview) if action else "",
        outcome=action.outcome_text(preview) if action and preview.executed else "",
        payload_rows=action.display_rows(preview) if action else [],
        facts=action.review_facts(preview) if action else [],
        policy=action.policy_evaluation(preview) if action else [],
        tables=action.review_tables(preview) if action else [],
        document=action.review_document(preview) if action else None,
        approvals=list(preview.approvals.select_related("approver").order_by("created_at")),
        siblings=[QueueRow(preview=p, summary=_summary(p)) for p in siblings],
        proposal=proposal,
        execution=execution,
        staff_step=execution_staff_step(preview, execution),
        state_title=state_title,
        state_text=state_text,
        effect_reference=action.effect_reference(execution.effect) if action and execution and execution.effect else "",
        effect_performer=performer,
        execution_outcome_words=_outcome_words(execution, performer),
        flags=row.flags,
        counter_fields=(
            action.counter_fields(preview) if action and preview.status == PreviewStatus.AWAITING_STAFF else []
        ),
        quorum=row.quorum,
        overdue=row.overdue,
        claim=ReviewClaim.objects.select_related("claimed_by", "assigned_by").filter(preview=preview).first(),
        replaced_by=Preview.objects.filter(supersedes=preview).first(),
    )


# Failures ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Attempt:
    """One step of an execution's history, in words."""

    record: AuditRecord
    detail: str


def _attempt(record: AuditRecord) -> Attempt:
    result = record.result or {}
    error = result.get("error")
    if not isinstance(error, dict):
        error = {}
    if record.event == AuditEvent.EXECUTION_ATTEMPT_FAILED:
        then = "the worker retries" if result.get("will_retry") else "the worker gave up"
        detail = f"attempt {result.get('attempt')}: {result.get('error')} ({then})"
    elif record.event == AuditEvent.EXECUTION_FAILED:
        detail = f"{result.get('code') or error.get('code')}: {result.get('reason') or error.get('message')}"
    elif record.event == AuditEvent.RETRIED:
        previous = result.get("previous") or {}
        detail = f"asked to go on after {previous.get('outcome')} ({previous.get('code')})"
    elif record.event == AuditEvent.EXECUTION_STARTED:
        how = "took over an expired lease" if result.get("took_over") else "started"
        looks = ", looking the effect up first" if result.get("look_up_first") else ""
        detail = f"attempt {result.get('attempt')} {how} (token {result.get('fencing_token')}){looks}"
    elif record.event == AuditEvent.EXECUTION_TRANSITION:
        detail = f"{result.get('outcome')}: {result.get('reason') or ''}".strip()
    elif record.event == AuditEvent.EXECUTION_FENCED_OFF:
        detail = (
            f"a late answer from token {result.get('fencing_token')} was refused "
            f"(token {result.get('current_token')} holds the execution)"
        )
    elif record.event == AuditEvent.EXECUTED:
        detail = ", ".join(f"{key} {value}" for key, value in result.items() if key.endswith("_id"))
    else:
        detail = ""
    return Attempt(record=record, detail=detail)


@dataclass(frozen=True)
class FailureRow:
    preview: Preview
    summary: str
    staff_step: str
    state_text: str
    attempts: list[Attempt]


def failed_executions(*, user: User, page_number: Any = 1) -> tuple[Page, list[FailureRow]]:
    """Executions that need attention (first) and failed ones, most recent first, each with its
    attempts from the audit log."""
    failed = (
        reviewable_previews(user=user)
        .filter(status__in=[PreviewStatus.NEEDS_ATTENTION, PreviewStatus.FAILED])
        .select_related("actor")
        .order_by(Case(When(status=PreviewStatus.NEEDS_ATTENTION, then=0), default=1), "-status_changed_at", "pk")
    )
    page = Paginator(failed, QUEUE_PAGE_SIZE).get_page(page_number)
    previews = list(page.object_list)
    executions = executions_of(previews)
    attempts: dict[Any, list[Attempt]] = {p.pk: [] for p in previews}
    records = AuditRecord.objects.filter(preview__in=previews, event__in=ATTEMPT_EVENTS).select_related("actor")
    for record in records.order_by("id"):
        attempts[record.preview_id].append(_attempt(record))
    rows = [
        FailureRow(
            preview=p,
            summary=_summary(p),
            staff_step=execution_staff_step(p, executions.get(p.pk)),
            state_text=preview_state_words(p, "staff", executions.get(p.pk))[1],
            attempts=attempts[p.pk],
        )
        for p in previews
    ]
    return page, rows


def preview_attempts(*, preview: Preview) -> list[Attempt]:
    records = preview.audit_records.filter(event__in=ATTEMPT_EVENTS).select_related("actor").order_by("id")
    return [_attempt(record) for record in records]


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
