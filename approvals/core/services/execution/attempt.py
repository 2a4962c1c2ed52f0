"""One attempt at an execution, in three steps (Brandur's recovery points): take the lease and check (or
plan a lookup), make the effect with no lock held, record it under locks; and what a failed attempt
leaves for the next one."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import DatabaseError
from django.utils import timezone

from approvals.core.errors import (
    ApplicationError,
    EffectLookupUnavailable,
    ErrorCode,
    ExecutionFailure,
    TransientExecutionError,
)
from approvals.core.locks import (
    execution_lock,
    subject_lock_to_record,
)
from approvals.core.registry import Action, registry
from approvals.core.rows import update_fields
from approvals.core.services.audit import audit_record, audited_transaction
from approvals.core.services.execution.gate import check_before_first_effect
from approvals.core.services.execution.siblings import supersede_siblings
from approvals.core.services.execution.state import (
    Outcome,
    audit_fenced_off,
    execution_transition,
    fenced,
    worker_name,
)
from approvals.core.services.previews import approvals_of
from approvals.models import (
    Approval,
    AuditEvent,
    Execution,
    Preview,
)
from approvals.operations import metrics

logger = logging.getLogger(__name__)

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
        audit_fenced_off(preview, execution, presented, attempt=execution.attempt, reason=refusal)


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


def attempt_begin(preview_id: Any, *, presented: int | None, worker: str) -> _Attempt | None:
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
            checked = check_before_first_effect(preview, execution, action, token=None)
            if checked is None:
                return None
            subject, approvals = checked
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
        if fenced(execution, preview, attempt.token, "recheck"):
            return False
        attempt.preview = preview
        checked = check_before_first_effect(preview, execution, attempt.action, token=attempt.token)
        if checked is None:
            return False
        attempt.subject, attempt.approvals = checked
        update_fields(execution, ["effect_possible", "updated_at"])
        return True


def _effect_record(attempt: _Attempt, preview: Preview, execution: Execution, made: dict[str, Any]) -> list[Approval]:
    """Record the made effect under the subject's lock and end the execution succeeded; the approvals
    it rested on."""
    action = attempt.action
    subject = subject_lock_to_record(action, preview)
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
    supersede_siblings(preview, action, subject)
    return approvals


def approvals_named(approvals: list[Approval]) -> dict[str, list[dict[str, Any]]]:
    """Every standing approval an execution rested on, by role (a quorum names each of its approvers)."""
    named: dict[str, list[dict[str, Any]]] = {}
    for approval in sorted(approvals, key=lambda a: a.created_at):
        if approval.lapsed_at is None:
            entry = {"approver": approval.approver_id, "digest": approval.digest, "basis": approval.basis}
            named.setdefault(approval.role, []).append(entry)
    return named


def attempt_finish(attempt: _Attempt, effect: dict[str, Any] | None) -> Preview:
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
            if fenced(execution, preview, attempt.token, "record", effect=effect):
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
        if fenced(execution, preview, attempt.token, "record", effect=effect):
            return preview
        reference = attempt.action.effect_reference(effect)
        execution_transition(
            execution,
            preview,
            Outcome.EFFECT_UNRECORDED,
            token=attempt.token,
            effect=effect,
            code=ErrorCode.RECORD_FAILED,
            detail=f"The effect was made ({reference}) but could not be recorded: {error}",
        )
        return preview


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
        if fenced(execution, preview, attempt.token, to, effect=effect):
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
    attempt = attempt_begin(preview_id, presented=fencing_token, worker=worker or worker_name())
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
        return attempt_finish(attempt, effect)
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
        if fenced(execution, preview, token, "attempt_failed", detail=str(error)):
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
