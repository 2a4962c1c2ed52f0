"""What staff can do for an execution that needs attention: retry, resolve, say nothing happened."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from approvals.core.errors import (
    DecisionError,
    ErrorCode,
)
from approvals.core.locks import (
    execution_row_lock,
    preview_lock,
)
from approvals.core.registry import registry
from approvals.core.services.audit import audit_decision_refused, audit_record, audited_transaction
from approvals.models import (
    OPEN_STATUSES,
    AuditEvent,
    Execution,
    Preview,
    PreviewStatus,
)
from approvals.operations import metrics

if TYPE_CHECKING:
    from django.contrib.auth.models import User

from approvals.core.services.execution.opening import execution_enqueue
from approvals.core.services.execution.state import (
    Outcome,
    execution_transition,
)


def execution_retry_refusal(preview: Preview, execution: Execution | None) -> DecisionError | None:
    """Why staff cannot ask for this execution to go on, or None."""
    if preview.status != PreviewStatus.NEEDS_ATTENTION or execution is None:
        return DecisionError(
            "Only an execution that needs attention can be retried or resolved; this preview is "
            f"{preview.get_status_display().lower()}.",
            code=ErrorCode.NOT_NEEDING_ATTENTION,
        )
    if execution.outcome == Outcome.REFUSED_BEFORE_EFFECT:
        # The agent may have proposed the same thing again after the failure; running both could pay twice.
        if Preview.objects.filter(proposal_key=preview.proposal_key, status__in=OPEN_STATUSES).exists():
            return DecisionError(
                "A newer preview of the same proposal is open; decide that one instead of retrying this one.",
                code=ErrorCode.NEWER_PREVIEW_OPEN,
            )
    return None


def _retry_refusal(preview: Preview, execution: Execution | None, *, nothing_happened: bool) -> DecisionError | None:
    """Why staff cannot retry now, including an unknown effect the action cannot look up (a person must
    say what they found)."""
    error = execution_retry_refusal(preview, execution)
    if error is not None:
        return error
    assert execution is not None, "execution_retry_refusal refuses a missing execution"
    if execution.outcome == Outcome.EFFECT_UNKNOWN and not nothing_happened:
        action = registry.action(preview.action)
        if action is None or not action.can_look_up_effect:
            return DecisionError(
                "This action cannot look up whether the earlier attempt acted. Check the outside world "
                "(the mail server's log) and say what you found.",
                code=ErrorCode.LOOKUP_UNAVAILABLE,
            )
    return None


def _retry_go_on(preview: Preview, execution: Execution, staff: User, *, nothing_happened: bool) -> None:
    """Start again (with every check) or let the resolver / a new recording run, and publish an attempt."""
    metrics.execution_retried(preview, trigger="staff")
    facts = {
        "previous": {"outcome": execution.outcome, "code": execution.code, "reason": execution.detail},
        "nothing_happened": nothing_happened,
    }
    if execution.outcome == Outcome.REFUSED_BEFORE_EFFECT or nothing_happened:
        execution_transition(
            execution, preview, Outcome.PENDING, token=None, actor=staff, event=AuditEvent.RETRIED, facts=facts
        )
    else:
        audit_record(event=AuditEvent.RETRIED, preview=preview, actor=staff, result={**facts, "status": preview.status})
    execution_enqueue(preview)


def execution_retry(*, preview_id: Any, staff: User, nothing_happened: bool = False) -> Preview:
    """Staff ask an execution that needs attention to go on, with the same preview and idempotency key:

    * refused before any effect (the gateway was not usable): it starts again, and every check runs;
    * effect unknown: the resolver runs now (look up first; a first effect only if none exists and
      every check passes). With `nothing_happened`, a person who checked the outside world (an action
      that cannot look up, like SMTP) says no effect exists: it starts again with every check;
    * effect made but not recorded: it is recorded again (after the data was mended).

    Raises Preview.DoesNotExist, or DecisionError (audited) when it cannot go on.
    """
    with audited_transaction():
        preview = preview_lock(preview_id)
        if preview is None:
            raise Preview.DoesNotExist(f"No preview {preview_id}")
        execution = execution_row_lock(preview)
        error = _retry_refusal(preview, execution, nothing_happened=nothing_happened)
        if error is None:
            assert execution is not None, "_retry_refusal refuses a missing execution"
            _retry_go_on(preview, execution, staff, nothing_happened=nothing_happened)
        else:
            audit_decision_refused(preview, staff, error, operation="retry")
    if error is not None:
        raise error
    return preview
