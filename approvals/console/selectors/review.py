"""One preview as a reviewer sees it, and the executions that failed."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.core.paginator import Page, Paginator
from django.db.models import Case, When

from approvals.console.notifications import escalation_due_before
from approvals.console.selectors.access import reviewable_previews
from approvals.console.selectors.queue import QUEUE_PAGE_SIZE, QueueRow, queue_rows, queue_summary
from approvals.core.presentation import preview_execution, preview_state_words
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
    AuditEvent,
    AuditRecord,
    Execution,
    ExecutionOutcome,
    Preview,
    PreviewStatus,
    ReviewClaim,
)

if TYPE_CHECKING:
    from django.contrib.auth.models import User  # settings.AUTH_USER_MODEL, as django-stubs resolves it


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
        summary=queue_summary(preview),
        consequence=action.consequence(preview) if action else "",
        outcome=action.outcome_text(preview) if action and preview.executed else "",
        payload_rows=action.display_rows(preview) if action else [],
        facts=action.review_facts(preview) if action else [],
        policy=action.policy_evaluation(preview) if action else [],
        tables=action.review_tables(preview) if action else [],
        document=action.review_document(preview) if action else None,
        approvals=list(preview.approvals.select_related("approver", "signature").order_by("created_at")),
        siblings=[QueueRow(preview=p, summary=queue_summary(p)) for p in siblings],
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
            summary=queue_summary(p),
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
