"""The execution's state: the table of allowed moves between outcomes, the preview status each outcome
shows as, and `execution_transition`, the one function that changes an execution (refusing a move the
table does not allow, or an answer from an attempt that lost its lease), auditing each move."""

from __future__ import annotations

import os
import socket
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.utils import timezone

from approvals.core.errors import (
    ApplicationError,
    ErrorCode,
)
from approvals.core.registry import registry
from approvals.core.rows import update_fields
from approvals.core.services.audit import audit_record
from approvals.core.transitions import preview_transitioned
from approvals.models import (
    AuditEvent,
    Execution,
    ExecutionOutcome,
    Preview,
    PreviewStatus,
)
from approvals.operations import metrics

if TYPE_CHECKING:
    from django.contrib.auth.models import User


Outcome = ExecutionOutcome

TRANSITIONS: dict[str, frozenset[str]] = {
    Outcome.PENDING: frozenset({Outcome.IN_PROGRESS, Outcome.REFUSED_BEFORE_EFFECT, Outcome.AWAITING_APPROVAL}),
    Outcome.IN_PROGRESS: frozenset(
        {
            Outcome.IN_PROGRESS,  # the next attempt of the same chain, or a takeover of an expired lease
            Outcome.SUCCEEDED,
            Outcome.FAILED_AFTER_CHECK,
            Outcome.REFUSED_BEFORE_EFFECT,
            Outcome.EFFECT_UNKNOWN,
            Outcome.EFFECT_UNRECORDED,
            Outcome.AWAITING_APPROVAL,  # the checks before a first effect found an approval lapsed
        }
    ),
    # Approved again (pending), or the preview went out of date meanwhile (a sibling executed).
    Outcome.AWAITING_APPROVAL: frozenset({Outcome.PENDING, Outcome.REFUSED_BEFORE_EFFECT}),
    # The resolver takes it (in_progress, looking up first); a person who checked the outside world
    # may say nothing happened (pending: every check runs again before a first effect).
    Outcome.EFFECT_UNKNOWN: frozenset({Outcome.IN_PROGRESS, Outcome.PENDING}),
    Outcome.EFFECT_UNRECORDED: frozenset({Outcome.IN_PROGRESS}),
    # Only a retryable refusal (nothing was asked: the gateway was not usable) may start again.
    Outcome.REFUSED_BEFORE_EFFECT: frozenset({Outcome.PENDING}),
    Outcome.SUCCEEDED: frozenset(),
    Outcome.FAILED_AFTER_CHECK: frozenset(),
}
EXECUTION_FIELDS = [
    "outcome",
    "attempt",
    "fencing_token",
    "lease_owner",
    "lease_expires_at",
    "effect_possible",
    "effect",
    "code",
    "detail",
    "updated_at",
]
# The events existing readers of the audit know; every record also carries from/to, attempt and token.
TRANSITION_EVENTS: dict[str, AuditEvent] = {
    Outcome.IN_PROGRESS: AuditEvent.EXECUTION_STARTED,
    Outcome.SUCCEEDED: AuditEvent.EXECUTED,
    Outcome.FAILED_AFTER_CHECK: AuditEvent.EXECUTION_FAILED,
    Outcome.REFUSED_BEFORE_EFFECT: AuditEvent.EXECUTION_FAILED,
}

AGENT_SESSION_REVOKED_REASON = (
    "The agent session that proposed this was revoked, so the proposal was withdrawn before anything was done."
)


class IllegalTransition(ApplicationError):
    code = ErrorCode.ILLEGAL_TRANSITION


class FencedOff(ApplicationError):
    """An answer from an attempt whose lease was taken over: a newer attempt owns the execution."""

    code = ErrorCode.FENCED_OFF


# Refusals that mean the preview itself is out of date (a new proposal is needed), not that it failed.
SUPERSEDING_CODES = frozenset({ErrorCode.SUBJECT_CHANGED, ErrorCode.AGENT_SESSION_REVOKED})


# An execution waiting for an approval again ends with its preview: rejected, expired, replaced by a
# counter-proposal, withdrawn by its agent (the superseding codes above cover a changed subject and a
# revoked session).
ENDED_BY_PEOPLE_OR_TIME: dict[str, PreviewStatus] = {
    ErrorCode.REJECTED: PreviewStatus.REJECTED,
    ErrorCode.EXPIRED: PreviewStatus.EXPIRED,
    ErrorCode.DECLINED: PreviewStatus.DECLINED,
    ErrorCode.COUNTER_PROPOSED: PreviewStatus.SUPERSEDED,
    ErrorCode.WITHDRAWN: PreviewStatus.WITHDRAWN,
}


# The engine's own failure that a staff retry may mend: the provider was unavailable on every attempt.
ENGINE_RETRYABLE_CODES = frozenset({"retries_exhausted"})


def is_retryable_refusal(outcome: str, code: str, action_name: str) -> bool:
    """Whether a refusal known to have come before any effect may be mended by a staff retry (with every
    check run again): the engine's own `retries_exhausted`, or a code the preview's action declares
    transient (Action.retryable_failure_codes). Every other refusal is final."""
    if outcome != Outcome.REFUSED_BEFORE_EFFECT:
        return False
    if code in ENGINE_RETRYABLE_CODES:
        return True
    action = registry.action(action_name)
    return action is not None and action.failure_is_retryable(code)


def preview_status_for(outcome: str, code: str = "", action_name: str = "") -> PreviewStatus:
    """The preview status an execution outcome shows as (the contract's statuses)."""
    if outcome in (Outcome.PENDING, Outcome.IN_PROGRESS):
        return PreviewStatus.APPROVED
    if outcome == Outcome.SUCCEEDED:
        return PreviewStatus.EXECUTED
    if outcome == Outcome.REFUSED_BEFORE_EFFECT:
        if code in SUPERSEDING_CODES:
            return PreviewStatus.SUPERSEDED
        if code in ENDED_BY_PEOPLE_OR_TIME:
            return ENDED_BY_PEOPLE_OR_TIME[code]
        retryable = is_retryable_refusal(outcome, code, action_name)
        return PreviewStatus.NEEDS_ATTENTION if retryable else PreviewStatus.FAILED
    if outcome == Outcome.FAILED_AFTER_CHECK:
        return PreviewStatus.FAILED
    if outcome == Outcome.AWAITING_APPROVAL:
        return PreviewStatus.AWAITING_STAFF
    return PreviewStatus.NEEDS_ATTENTION  # effect_unknown, effect_unrecorded


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


# The one transition function ----------------------------------------------------------------------


def _transition_refusal(execution: Execution, preview: Preview, to: str, token: int | None, actor: User | None) -> None:
    """Raise FencedOff for a stale token, IllegalTransition for a move the table does not allow."""
    before = execution.outcome
    if token is not None and token != execution.fencing_token:
        raise FencedOff(
            f"Attempt with token {token} lost its lease; token {execution.fencing_token} holds the execution.",
            current_token=execution.fencing_token,
        )
    if to not in TRANSITIONS[before]:
        raise IllegalTransition(f"An execution cannot go from {before} to {to}.", outcome=before, to=to)
    if before == Outcome.REFUSED_BEFORE_EFFECT and not is_retryable_refusal(before, execution.code, preview.action):
        raise IllegalTransition(f"The refusal {str(execution.code)!r} is final.", outcome=before, to=to)
    if before == Outcome.EFFECT_UNKNOWN and to == Outcome.PENDING and actor is None:
        raise IllegalTransition("Only a person who checked the outside world may say nothing happened.")


def _execution_move(
    execution: Execution,
    to: str,
    *,
    now: Any,
    code: str,
    detail: str,
    effect: dict[str, Any] | None,
    lease_owner: str,
    lease_seconds: float | None,
) -> None:
    """Write the execution's new outcome; to `in_progress` a new attempt takes the lease."""
    execution.outcome = to
    if to == Outcome.IN_PROGRESS:
        execution.attempt += 1
        execution.fencing_token += 1
        execution.lease_owner = lease_owner or worker_name()
        execution.lease_expires_at = now + timedelta(
            seconds=settings.EXECUTION_LEASE_SECONDS if lease_seconds is None else lease_seconds
        )
    else:
        execution.lease_owner, execution.lease_expires_at = "", None
    if to == Outcome.PENDING:
        execution.effect_possible = False
    if effect is not None:
        execution.effect = effect
    execution.code, execution.detail = code, detail
    update_fields(execution, EXECUTION_FIELDS)


def _preview_follow(
    preview: Preview, to: str, *, now: Any, code: str, detail: str, result: dict[str, Any] | None
) -> PreviewStatus:
    """Write the preview's status as the new outcome shows it; its result once executed."""
    status = preview_status_for(to, code, preview.action)
    previous = (preview.status, preview.failure_code, preview.failure_reason)
    preview.status = status
    preview.failure_code = code if status not in (PreviewStatus.APPROVED, PreviewStatus.EXECUTED) else ""
    preview.failure_reason = detail if preview.failure_code else ""
    if to != Outcome.SUCCEEDED and (preview.status, preview.failure_code, preview.failure_reason) == previous:
        return status  # an attempt that starts leaves an approved preview as it is (and its time in the state)
    previous_status = previous[0]
    fields = ["status", "failure_code", "failure_reason", "status_changed_at"]
    if to == Outcome.SUCCEEDED:
        preview.result, preview.executed_at = result, now
        fields += ["result", "executed_at"]
    update_fields(preview, fields)
    preview_transitioned(preview, previous_status)
    return status


def _transition_event(to: str, code: str) -> AuditEvent:
    if to == Outcome.REFUSED_BEFORE_EFFECT and code in SUPERSEDING_CODES:
        return AuditEvent.SUPERSEDED
    return TRANSITION_EVENTS.get(to, AuditEvent.EXECUTION_TRANSITION)


def _transition_facts(
    execution: Execution, before: str, to: str, status: str, *, code: str, detail: str, effect: dict[str, Any] | None
) -> dict[str, Any]:
    facts: dict[str, Any] = {
        "outcome_from": before,
        "outcome": to,
        "status": status,
        "attempt": execution.attempt,
        "fencing_token": execution.fencing_token,
    }
    if code:
        facts.update(code=code, reason=detail)
    if execution.lease_owner:
        facts["lease_owner"] = execution.lease_owner
    if effect is not None:
        facts["effect"] = effect
    return facts


def execution_transition(
    execution: Execution,
    preview: Preview,
    to: str,
    *,
    token: int | None,
    code: str = "",
    detail: str = "",
    effect: dict[str, Any] | None = None,
    result: dict[str, Any] | None = None,
    actor: User | None = None,
    approval_basis: dict[str, Any] | None = None,
    lease_owner: str = "",
    lease_seconds: float | None = None,
    event: AuditEvent | None = None,
    facts: dict[str, Any] | None = None,
) -> None:
    """Move the execution (and the preview's status with it) to `to`, under the preview's lock.

    `token` is the fencing token of the attempt that speaks, or None for a person or the sweeper
    (who may act only on an execution no attempt holds). To `in_progress` is a new attempt: it takes
    the lease for `lease_owner` with the next fencing token. Raises FencedOff for a stale token
    (attempts ask `_fenced` first, which audits the late answer) and IllegalTransition for a move the
    table does not allow.
    """
    before = execution.outcome
    _transition_refusal(execution, preview, to, token, actor)
    now = timezone.now()
    _execution_move(
        execution,
        to,
        now=now,
        code=code,
        detail=detail,
        effect=effect,
        lease_owner=lease_owner,
        lease_seconds=lease_seconds,
    )
    status = _preview_follow(preview, to, now=now, code=code, detail=detail, result=result)
    if to not in (Outcome.PENDING, Outcome.IN_PROGRESS, Outcome.SUCCEEDED):
        metrics.execution_outcome(preview, to, error_class=code)
    record = _transition_facts(execution, before, to, status, code=code, detail=detail, effect=effect)
    audit_record(
        event=event or _transition_event(to, code),
        preview=preview,
        actor=actor,
        approval_basis=approval_basis,
        result={**(result or {}), **(facts or {}), **record},
    )


def fenced(
    execution: Execution,
    preview: Preview,
    token: int | None,
    step: str,
    *,
    effect: dict[str, Any] | None = None,
    detail: str = "",
) -> bool:
    """Whether the attempt holding `token` lost the execution (a newer attempt took its lease over, or
    the execution moved on). Its late answer changes nothing; it is audited, with any effect it saw."""
    if token == execution.fencing_token and execution.outcome == Outcome.IN_PROGRESS:
        return False
    audit_fenced_off(
        preview, execution, token, step=step, outcome=execution.outcome, effect=effect, detail=detail[:500]
    )
    return True


def audit_fenced_off(preview: Preview, execution: Execution, token: int | None, **facts: Any) -> None:
    """The one record of a late answer from an attempt that lost its lease (or of one refused the lease
    with a stale token): it changed nothing, and any effect it saw is kept here."""
    audit_record(
        event=AuditEvent.EXECUTION_FENCED_OFF,
        preview=preview,
        result={"fencing_token": token, "current_token": execution.fencing_token, **facts},
    )
