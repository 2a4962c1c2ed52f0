"""The execution of approved previews: an explicit, leased state machine.

Every approved preview has one Execution. Its outcome says what is known about the effect, and the
preview's status is derived from it (`preview_status_for`):

    pending ──► in_progress ──► succeeded                      (executed)
       │            │  ▲ ╲───► failed_after_check             (failed: the provider said no)
       │            │  │  ╲──► effect_unrecorded ──► succeeded (needs_attention: made, not recorded)
       │            │  │   ╲─► effect_unknown ──┐              (needs_attention: may have been made)
       ▼            ▼  └────────────────────────┘  (the resolver looks the effect up first)
    refused_before_effect                          (failed / superseded; needs_attention if retryable)
       ▲
    awaiting_approval ◄── pending, in_progress     (awaiting_staff: an approval lapsed before any effect;
                     ──► pending                    a new approval makes it pending again)

One function, `execution_transition`, makes every change: it refuses a transition the table does not
allow and an answer from an attempt that lost its lease (an older fencing token), and audits each.

An attempt runs in three steps (Brandur's recovery points): (1) under locks, take the lease and
either run every check (nothing can have happened yet) or, when an earlier attempt may have acted,
look the effect up first; (2) with no lock held, make the effect through the action, idempotently
per preview; (3) under locks, record it in a savepoint and mark the execution succeeded. A recording
that hits a constraint leaves the effect on the execution (`effect_unrecorded`), never lost.

Only an expired lease can be taken over (`executions_dispatch_stalled`), and the taker gets a new
fencing token. A lease must outlast one provider call (EXECUTION_LEASE_SECONDS > the provider's time-out).
Rows are locked through approvals.services.locks, in its order.
"""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import DatabaseError, transaction
from django.utils import timezone

from .. import metrics
from ..errors import (
    ApplicationError,
    DecisionError,
    EffectLookupUnavailable,
    ErrorCode,
    ExecutionFailure,
    PolicyRefusal,
    TransientExecutionError,
)
from ..limits import spend_limits_recheck
from ..models import (
    OPEN_STATUSES,
    Approval,
    AuditEvent,
    Execution,
    ExecutionOutcome,
    Preview,
    PreviewStatus,
)
from ..publish import EXECUTE_PREVIEW, task_publish
from ..quorum import quorum_refusal
from ..registry import Action, registry
from ..rows import insert_rows, update_fields
from ..transitions import preview_transitioned
from .audit import audit_decision_refused, audit_record, audited_transaction
from .locks import (
    execution_lock,
    execution_row_lock,
    executions_lock,
    preview_lock,
    sibling_previews_lock,
    subject_lock,
)
from .previews import approvals_of, preview_digest
from .rights import staff_approvals_standing

if TYPE_CHECKING:
    from django.contrib.auth.models import User

logger = logging.getLogger(__name__)

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
        retryable = is_retryable_refusal(outcome, code, action_name)
        return PreviewStatus.NEEDS_ATTENTION if retryable else PreviewStatus.FAILED
    if outcome == Outcome.FAILED_AFTER_CHECK:
        return PreviewStatus.FAILED
    if outcome == Outcome.AWAITING_APPROVAL:
        return PreviewStatus.AWAITING_STAFF
    return PreviewStatus.NEEDS_ATTENTION  # effect_unknown, effect_unrecorded


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


# Opening and publishing --------------------------------------------------------------------------


def execution_open(preview: Preview) -> None:
    """Every approved preview gets its execution, pending until a worker takes its lease. One that waited
    for an approval again (an approval lapsed) is pending again, with a new deadline."""
    deadline = timezone.now() + timedelta(seconds=settings.EXECUTION_DEADLINE_SECONDS)
    if insert_rows([Execution(preview=preview, deadline=deadline)], skip_conflicts=True):
        return
    execution = execution_row_lock(preview)
    assert execution is not None, "the insert skipped a conflict with this preview's execution"
    execution.deadline = deadline
    update_fields(execution, ["deadline", "updated_at"])
    preview.failure_code, preview.failure_reason = "", ""  # the lapse it waited after is mended
    update_fields(preview, ["failure_code", "failure_reason"])
    execution_transition(execution, preview, Outcome.PENDING, token=None, facts={"approved_again": True})


def execution_dispatch(preview_id: Any) -> bool:
    """Publish an attempt at the preview's execution. A broker that is down must not undo or hide a
    recorded approval: the approved preview stays in the database and the sweeper dispatches it later."""
    try:
        task_publish(EXECUTE_PREVIEW, str(preview_id))
    except Exception:  # noqa: BLE001 - any broker failure; the sweeper is the fallback
        logger.warning("Could not publish execution of preview %s; the sweeper will retry", preview_id, exc_info=True)
        return False
    return True


def execution_enqueue(preview: Preview) -> None:
    """Publish the preview's execution once the transaction that approved it commits."""
    preview_id = str(preview.pk)
    transaction.on_commit(lambda: execution_dispatch(preview_id))


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


def _fenced(
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
    _audit_fenced_off(
        preview, execution, token, step=step, outcome=execution.outcome, effect=effect, detail=detail[:500]
    )
    return True


def _audit_fenced_off(preview: Preview, execution: Execution, token: int | None, **facts: Any) -> None:
    """The one record of a late answer from an attempt that lost its lease (or of one refused the lease
    with a stale token): it changed nothing, and any effect it saw is kept here."""
    audit_record(
        event=AuditEvent.EXECUTION_FENCED_OFF,
        preview=preview,
        result={"fencing_token": token, "current_token": execution.fencing_token, **facts},
    )


# Attempts ------------------------------------------------------------------------------------


@dataclass
class _Attempt:
    """What step 1 leaves for steps 2 and 3."""

    preview: Preview
    action: Action
    token: int
    look_up_first: bool  # an earlier attempt may have acted: look the effect up before making one
    effect: dict[str, Any] | None = None  # known already (effect_unrecorded)
    subject: Any = None  # as checked under lock, when the checks ran
    approvals: list[Approval] | None = None


@dataclass(frozen=True)
class _Refusal:
    """Why the checks before a first effect said no, and where the execution goes: refused before any
    effect, or back to waiting for an approval (one it rested on lapsed)."""

    code: str
    reason: str
    facts: dict[str, Any]
    to: str = Outcome.REFUSED_BEFORE_EFFECT


def _approvals_refusal(preview: Preview, approvals: list[Approval]) -> str | None:
    """Why the standing approvals do not cover the preview as it is (each role, and the quorum), or None."""
    by_role = {a.role: a for a in approvals}
    for role in preview.required_approvals:
        approval = by_role.get(role)
        if (
            approval is None
            or approval.digest != preview.digest
            or approval.subject_version != preview.subject_version
            or approval.created_at > preview.expires_at
        ):
            return f"The {role} approval is missing or does not match."
    return quorum_refusal(preview, approvals)


def _lapsed_refusal(preview: Preview, lapsed: list[Approval], missing: str) -> _Refusal:
    why = "; ".join(a.lapsed_reason for a in lapsed)
    names = " and ".join(f"{a.approver.get_username()}'s" for a in lapsed)
    reason = (
        f"{names} approval no longer counts ({why}). {missing} Nothing was done; the preview waits for "
        "another staff member's approval."
    )
    facts = {"lapsed": [a.approver.get_username() for a in lapsed]}
    return _Refusal(ErrorCode.APPROVAL_LAPSED, reason, facts, to=Outcome.AWAITING_APPROVAL)


def _checks_refusal(
    preview: Preview, execution: Execution, action: Action, subject: Any, approvals: list[Approval]
) -> _Refusal | None:
    """Every check before a first effect, under the subject's lock, of everything the decisions relied
    on: the digest, each approval and its approver's right now, the session, the subject version, the
    deadline, the action's policy and the spending limits. Returns the refusal, or None."""
    if subject is None:
        return _Refusal(ErrorCode.SUBJECT_UNAVAILABLE, "What this preview is about no longer exists.", {})
    if preview_digest(preview) != preview.digest:
        return _Refusal(ErrorCode.DIGEST_MISMATCH, "The preview does not match what was approved.", {})
    standing, lapsed = staff_approvals_standing(preview, approvals)
    missing = _approvals_refusal(preview, standing)
    if missing is not None:
        return (
            _lapsed_refusal(preview, lapsed, missing) if lapsed else _Refusal(ErrorCode.APPROVAL_MISSING, missing, {})
        )
    approvals[:] = standing  # what the executed record names
    if getattr(preview, "agent_session_revoked", False):
        return _Refusal(ErrorCode.AGENT_SESSION_REVOKED, AGENT_SESSION_REVOKED_REASON, {})
    if action.subject_version(subject) != preview.subject_version:
        changed = "What this preview is about changed after it was approved; ask for a new one."
        return _Refusal(ErrorCode.SUBJECT_CHANGED, changed, {})
    if timezone.now() > execution.deadline:
        hours = settings.EXECUTION_DEADLINE_SECONDS // 3600
        return _Refusal(
            ErrorCode.EXECUTION_DEADLINE_PASSED,
            f"The approval is older than {hours} hours; a new proposal is needed before anything is done.",
            {},
        )
    try:
        action.revalidate(preview=preview, subject=subject)
    except PolicyRefusal as refusal:
        return _Refusal(refusal.code, refusal.message, {"error": refusal.as_dict()})
    over_limit = spend_limits_recheck(preview=preview, action=action)
    if over_limit is not None:
        return _Refusal(over_limit.code, over_limit.message, {"error": over_limit.as_dict()})
    return None


def _refuse(execution: Execution, preview: Preview, refusal: _Refusal, token: int | None) -> None:
    execution_transition(
        execution, preview, refusal.to, token=token, code=refusal.code, detail=refusal.reason, facts=refusal.facts
    )


def _check_and_reserve(preview: Preview, execution: Execution, action: Action, token: int) -> Any | None:
    """After a lookup found no effect: run every check under the subject's lock. On a refusal the
    execution ends before any effect (returns None); on a pass the effect is reserved (its amount
    counts as in flight) and the subject is returned."""
    subject = subject_lock(action, preview)
    refusal = _checks_refusal(preview, execution, action, subject, approvals_of(preview))
    if refusal is not None:
        _refuse(execution, preview, refusal, token)
        return None
    execution.effect_possible = True
    update_fields(execution, ["effect_possible", "updated_at"])
    return subject


def _lease_refusal(execution: Execution, presented: int | None, now: Any) -> str | None:
    """Why this attempt may not take the execution now, or None."""
    if execution.outcome in (Outcome.PENDING, Outcome.EFFECT_UNKNOWN, Outcome.EFFECT_UNRECORDED):
        return None
    if execution.outcome != Outcome.IN_PROGRESS:
        return f"the execution is {execution.outcome}"
    if presented is not None and presented == execution.fencing_token:
        return None  # the next attempt of the chain that holds the lease
    if execution.lease_expires_at is not None and execution.lease_expires_at <= now:
        return None  # a takeover: the holder is gone or too slow
    return "another attempt holds the lease"


def _lease_refused(preview: Preview, execution: Execution, presented: int | None, refusal: str) -> None:
    """An attempt that may not take the lease does nothing; one carrying a stale token is audited."""
    if presented is not None and presented != execution.fencing_token:
        _audit_fenced_off(preview, execution, presented, attempt=execution.attempt, reason=refusal)


def _unknown_action_end(preview: Preview, execution: Execution, worker: str) -> None:
    """No action is registered under the preview's name: the attempt starts and ends before any effect."""
    execution_transition(execution, preview, Outcome.IN_PROGRESS, token=None, lease_owner=worker)
    execution_transition(
        execution,
        preview,
        Outcome.REFUSED_BEFORE_EFFECT,
        token=execution.fencing_token,
        code=ErrorCode.UNKNOWN_ACTION,
        detail=f"No action {preview.action!r} is registered.",
    )


def _attempt_begin(preview_id: Any, *, presented: int | None, worker: str) -> _Attempt | None:
    """Step 1: take the lease, then check (nothing can have happened) or plan a lookup."""
    with audited_transaction():
        locked = execution_lock(preview_id)
        if locked is None:
            logger.warning("execute_preview: no execution for preview %s", preview_id)
            return None
        preview, execution = locked
        refusal = _lease_refusal(execution, presented, timezone.now())
        if refusal is not None:
            _lease_refused(preview, execution, presented, refusal)
            return None
        action = registry.action(preview.action)
        if action is None:
            _unknown_action_end(preview, execution, worker)
            return None
        known_effect = execution.effect if execution.outcome == Outcome.EFFECT_UNRECORDED else None
        look_up_first = execution.effect_possible and known_effect is None
        took_over = execution.outcome == Outcome.IN_PROGRESS and presented != execution.fencing_token
        subject, approvals = None, None
        if not look_up_first and known_effect is None:
            # Nothing can have happened yet: every check runs before the lease is taken.
            subject, approvals = subject_lock(action, preview), approvals_of(preview)
            checks = _checks_refusal(preview, execution, action, subject, approvals)
            if checks is not None:
                _refuse(execution, preview, checks, None)
                return None
            execution.effect_possible = True  # from here on the effect may be underway: it counts as in flight
        execution_transition(
            execution,
            preview,
            Outcome.IN_PROGRESS,
            token=None,
            lease_owner=worker,
            facts={"took_over": took_over, "look_up_first": look_up_first},
            result={"subject_version": action.subject_version(subject)} if subject is not None else None,
        )
        return _Attempt(preview, action, execution.fencing_token, look_up_first, known_effect, subject, approvals)


def _attempt_recheck(attempt: _Attempt) -> bool:
    """After a lookup found no effect: the earlier attempts made none, so this is a first effect,
    and every check runs again. False when they refuse (the execution has ended)."""
    with audited_transaction():
        locked = execution_lock(attempt.preview.pk)
        if locked is None:
            return False
        preview, execution = locked
        if _fenced(execution, preview, attempt.token, "recheck"):
            return False
        attempt.subject = _check_and_reserve(preview, execution, attempt.action, attempt.token)
        attempt.preview = preview
        return attempt.subject is not None


def _effect_record(attempt: _Attempt, preview: Preview, execution: Execution, made: dict[str, Any]) -> list[Approval]:
    """Record the made effect under the subject's lock and end the execution succeeded; the approvals
    it rested on."""
    action = attempt.action
    subject = subject_lock(action, preview)
    if subject is None:
        raise ExecutionFailure(
            "What this preview is about disappeared during execution.", code=ErrorCode.SUBJECT_UNAVAILABLE
        )
    result = action.record(preview=preview, subject=subject, effect=made)
    approvals = attempt.approvals if attempt.approvals is not None else approvals_of(preview)
    execution_transition(
        execution,
        preview,
        Outcome.SUCCEEDED,
        token=attempt.token,
        effect=made,
        result=result,
        approval_basis=approvals_named(approvals),
    )
    _supersede_siblings(preview, action, subject)
    return approvals


def approvals_named(approvals: list[Approval]) -> dict[str, list[dict[str, Any]]]:
    """Every standing approval an execution rested on, by role (a quorum names each of its approvers)."""
    named: dict[str, list[dict[str, Any]]] = {}
    for approval in sorted(approvals, key=lambda a: a.created_at):
        if approval.lapsed_at is None:
            entry = {"approver": approval.approver_id, "digest": approval.digest, "basis": approval.basis}
            named.setdefault(approval.role, []).append(entry)
    return named


def _attempt_finish(attempt: _Attempt, effect: dict[str, Any] | None) -> Preview:
    """Step 3: record the effect and end the execution succeeded.

    The recording runs in this step's transaction, with no savepoint of its own: should it fail (a
    constraint, here or at the COMMIT), the whole step rolls back and `_effect_unrecorded` keeps the
    effect on the execution in a transaction of its own, so that a made effect is never lost.
    """
    made: dict[str, Any] | None = effect
    try:
        with audited_transaction():
            locked = execution_lock(attempt.preview.pk)
            if locked is None:
                raise Preview.DoesNotExist(f"No preview {attempt.preview.pk}")
            preview, execution = locked
            if _fenced(execution, preview, attempt.token, "record", effect=effect):
                return preview
            if made is None:
                # An effect that is not idempotent is made here, under the preview's lock (one run at a time).
                made = attempt.action.perform(preview=preview)
            approvals = _effect_record(attempt, preview, execution, made)
    except (DatabaseError, ApplicationError) as error:
        if made is None:
            raise  # nothing was made (a non-idempotent effect refused): the caller ends the attempt
        return _effect_unrecorded(attempt, made, error)
    metrics.execution_succeeded(preview, approvals)
    return preview


def _effect_unrecorded(attempt: _Attempt, effect: dict[str, Any], error: Exception) -> Preview:
    logger.error("Preview %s: the effect was made but could not be recorded: %s", attempt.preview.pk, error)
    with audited_transaction():
        locked = execution_lock(attempt.preview.pk)
        if locked is None:
            raise Preview.DoesNotExist(f"No preview {attempt.preview.pk}")
        preview, execution = locked
        if _fenced(execution, preview, attempt.token, "record", effect=effect):
            return preview
        execution_transition(
            execution,
            preview,
            Outcome.EFFECT_UNRECORDED,
            token=attempt.token,
            effect=effect,
            code=ErrorCode.RECORD_FAILED,
            detail=f"The effect was made ({effect_reference(effect)}) but could not be recorded: {error}",
        )
        return preview


def effect_reference(effect: dict[str, Any] | None) -> str:
    if not effect:
        return "no reference"
    for key in ("refund_id", "message_id", "reference", "id"):
        if effect.get(key):
            return f"reference {effect[key]}"
    return "no reference"


def _attempt_end(
    attempt: _Attempt,
    to: str,
    *,
    code: str,
    detail: str,
    effect: dict[str, Any] | None = None,
    facts: dict[str, Any] | None = None,
) -> Preview | None:
    with audited_transaction():
        locked = execution_lock(attempt.preview.pk)
        if locked is None:
            return None
        preview, execution = locked
        if _fenced(execution, preview, attempt.token, to, effect=effect):
            return preview
        execution_transition(
            execution, preview, to, token=attempt.token, code=code, detail=detail, effect=effect, facts=facts
        )
        return preview


def _attempt_refused(attempt: _Attempt, failure: ExecutionFailure) -> Preview | None:
    if failure.effect_made:
        to = Outcome.EFFECT_UNRECORDED
    elif failure.before_effect:
        to = Outcome.REFUSED_BEFORE_EFFECT
    else:
        to = Outcome.FAILED_AFTER_CHECK
    effect = failure.facts if failure.effect_made else None
    return _attempt_end(attempt, to, code=failure.code, detail=failure.message, effect=effect, facts=failure.facts)


def _effect_look_up(attempt: _Attempt) -> tuple[bool, dict[str, Any] | None, Preview | None]:
    """An earlier attempt may have acted: look its effect up before making one. Returns (go on, the
    effect found, the preview when the attempt ended here)."""
    try:
        effect = attempt.action.find_effect(preview=attempt.preview)
    except TransientExecutionError as error:
        error.effect_possible = True  # nothing learned: the earlier attempt's effect is still unknown
        raise
    except EffectLookupUnavailable as error:
        detail = f"An earlier attempt may have acted and {error} A person must check."
        return False, None, _attempt_end(attempt, Outcome.EFFECT_UNKNOWN, code=ErrorCode.EFFECT_UNKNOWN, detail=detail)
    if effect is None and not _attempt_recheck(attempt):
        return False, None, Preview.objects.filter(pk=attempt.preview.pk).first()
    return True, effect, None


def preview_execute(*, preview_id: Any, fencing_token: int | None = None, worker: str = "") -> Preview | None:
    """Run one attempt at executing an approved preview. Safe to run twice, concurrently, after a
    crash or after a lost lease: the lease admits one attempt at a time, the fencing token refuses a
    late one, and an attempt that follows an unknown outcome looks the effect up before making one.

    Returns the preview as the attempt left it (None if there is none). Raises TransientExecutionError,
    carrying this attempt's fencing token, when a retry may succeed: the caller retries with that token
    (`execution_attempt_failed` first), or gives up.
    """
    attempt = _attempt_begin(preview_id, presented=fencing_token, worker=worker or worker_name())
    if attempt is None:
        return Preview.objects.filter(pk=preview_id).first()
    try:
        effect = attempt.effect
        if attempt.look_up_first:
            go_on, effect, ended = _effect_look_up(attempt)
            if not go_on:
                return ended
        if effect is None and attempt.action.idempotent_effect:
            effect = attempt.action.perform(preview=attempt.preview, subject=attempt.subject)
        return _attempt_finish(attempt, effect)
    except TransientExecutionError as error:
        error.fencing_token = attempt.token
        raise
    except ExecutionFailure as failure:
        return _attempt_refused(attempt, failure)


def _attempt_give_up(execution: Execution, preview: Preview, error: TransientExecutionError) -> None:
    """No retry comes: the effect may have been made (unknown), or it is known not to (retryable refusal)."""
    attempts = f"Gave up after {execution.attempt} attempts: {error}"
    token = error.fencing_token
    if error.effect_possible:
        execution_transition(
            execution, preview, Outcome.EFFECT_UNKNOWN, token=token, code=ErrorCode.EFFECT_UNKNOWN, detail=attempts
        )
    else:
        execution_transition(
            execution,
            preview,
            Outcome.REFUSED_BEFORE_EFFECT,
            token=token,
            code=ErrorCode.RETRIES_EXHAUSTED,
            detail=attempts,
        )


def execution_attempt_failed(
    *, preview_id: Any, error: TransientExecutionError, will_retry: bool, retry_in: float = 0.0
) -> None:
    """An attempt failed in a way a retry may mend. With a retry coming, the chain keeps its lease
    through the back-off; giving up ends the execution in `effect_unknown` when the effect may have
    been made, else in a retryable `refused_before_effect` (nothing moved)."""
    with audited_transaction():
        locked = execution_lock(preview_id)
        if locked is None:
            return
        preview, execution = locked
        token = error.fencing_token
        if _fenced(execution, preview, token, "attempt_failed", detail=str(error)):
            return
        execution.effect_possible = error.effect_possible
        metrics.execution_attempt_failed(
            preview, error_class="effect_possible" if error.effect_possible else "no_effect", will_retry=will_retry
        )
        facts = {
            "attempt": execution.attempt,
            "fencing_token": token,
            "error": str(error)[:500],
            "will_retry": will_retry,
            "effect_possible": error.effect_possible,
        }
        if will_retry:
            execution.lease_expires_at = timezone.now() + timedelta(seconds=retry_in + settings.EXECUTION_LEASE_SECONDS)
            execution.detail = str(error)[:500]
            update_fields(execution, ["effect_possible", "lease_expires_at", "detail", "updated_at"])
        audit_record(event=AuditEvent.EXECUTION_ATTEMPT_FAILED, preview=preview, result=facts)
        if not will_retry:
            _attempt_give_up(execution, preview, error)


# The sweeper, the resolver and people ----------------------------------------------------------


def executions_dispatch_stalled(*, older_than_seconds: int | None = None) -> int:
    """Publish again what no worker is doing: a pending execution whose task was lost (broker down,
    web process killed), and an attempt whose lease expired (its worker died). The attempt that
    takes over gets a new fencing token and looks the effect up before making one."""
    wait = settings.EXECUTION_STALL_SECONDS if older_than_seconds is None else older_than_seconds
    now = timezone.now()
    pending = Execution.objects.filter(outcome=Outcome.PENDING, updated_at__lte=now - timedelta(seconds=wait))
    expired = Execution.objects.filter(outcome=Outcome.IN_PROGRESS, lease_expires_at__lte=now)
    ids = [
        *pending.order_by("updated_at").values_list("pk", flat=True),
        *expired.order_by("lease_expires_at").values_list("pk", flat=True),
    ]
    return sum(execution_dispatch(pk) for pk in ids)


def executions_resolve_unknown(*, older_than_seconds: int | None = None) -> int:
    """The resolver's sweep: publish an attempt for each execution whose effect is unknown and whose
    action can look effects up; the attempt looks first and never makes a second effect."""
    wait = settings.EXECUTION_RESOLVE_INTERVAL_SECONDS if older_than_seconds is None else older_than_seconds
    cutoff = timezone.now() - timedelta(seconds=wait)
    unknown = (
        Execution.objects.filter(outcome=Outcome.EFFECT_UNKNOWN, updated_at__lte=cutoff)
        .select_related("preview")
        .order_by("updated_at")
    )
    count = 0
    for execution in unknown:
        action = registry.action(execution.preview.action)
        if action is not None and action.can_look_up_effect:
            count += execution_dispatch(execution.pk)
    return count


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


def execution_staff_step(preview: Preview, execution: Execution | None) -> str:
    """What staff can do for this execution: "retry" (nothing was done; start again with every
    check), "resolve" (look the effect up now), "verdict" (the action cannot look up: a person says
    whether it happened), "record" (record a made effect again), or "" (nothing)."""
    if preview.status != PreviewStatus.NEEDS_ATTENTION or execution is None:
        return ""
    if execution.outcome == Outcome.REFUSED_BEFORE_EFFECT:
        return "retry"
    if execution.outcome == Outcome.EFFECT_UNKNOWN:
        action = registry.action(preview.action)
        return "resolve" if action is not None and action.can_look_up_effect else "verdict"
    if execution.outcome == Outcome.EFFECT_UNRECORDED:
        return "record"
    return ""


def executions_of(previews: list[Preview]) -> dict[Any, Execution]:
    return {e.pk: e for e in Execution.objects.filter(pk__in=[p.pk for p in previews])}


# Siblings ------------------------------------------------------------------------------------


def _supersede_siblings(preview: Preview, action: Action, subject: Any) -> None:
    """Open previews on the same subject were made against a version that no longer exists.

    Siblings locked by another transaction are skipped (locks.sibling_previews_lock says why); an
    approved sibling whose execution started is left to finish: its money may be out already.
    """
    sibling_ids = sibling_previews_lock(preview, new_version=action.subject_version(subject))
    if not sibling_ids:  # the usual case: one statement, its SQL built once per process
        return
    reason = f"Another action on {preview.subject_id} was completed first; a new preview is needed."
    executions = executions_lock(sibling_ids)
    for sibling in Preview.objects.filter(pk__in=sibling_ids).order_by("pk"):  # locked by us already
        execution = executions.get(sibling.pk)
        if execution is not None:
            execution_transition(
                execution,
                sibling,
                Outcome.REFUSED_BEFORE_EFFECT,
                token=None,
                code=ErrorCode.SUBJECT_CHANGED,
                detail=reason,
                facts={"by_preview": str(preview.pk)},
            )
            continue
        previous_status = sibling.status
        sibling.status, sibling.failure_code = PreviewStatus.SUPERSEDED, ErrorCode.SUBJECT_CHANGED
        sibling.failure_reason = reason
        update_fields(sibling, ["status", "failure_code", "failure_reason", "status_changed_at"])
        preview_transitioned(sibling, previous_status)
        audit_record(event=AuditEvent.SUPERSEDED, preview=sibling, result={"by_preview": str(preview.pk)})
