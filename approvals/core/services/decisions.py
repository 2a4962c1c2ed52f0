"""Decisions on previews: the one decision path (`preview_decide`) that the customer's page, MCP's
elicitation, the console, bulk decisions and every later channel go through; expiry of an approval
window; and bringing a preview read for display up to date.

A decision is bound to the digest the person saw and to the subject version; who may decide comes from
approvals.core.services.rights (four eyes across the preview's chain, the review permission). An approval
at or above a step-up threshold (approvals.core.stepup) also needs a passkey assertion over the digest,
checked here after every other right (approvals.core.services.passkeys), and kept with the approval and in
its audit record; it adds to the other checks and replaces none. The last approval missing opens the
preview's execution and publishes it once the transaction commits.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.utils import timezone

from approvals.core import quorum
from approvals.core.errors import DecisionError, ErrorCode
from approvals.core.locks import preview_lock, previews_lock, subject_lock
from approvals.core.registry import registry
from approvals.core.rows import insert_rows, update_fields
from approvals.core.services.audit import audit_decision_refused, audit_record, audited_transaction
from approvals.core.services.execution.opening import execution_enqueue, execution_open, preview_end
from approvals.core.services.passkeys import (
    VerifiedStepUp,
    approval_signature_keep,
    signature_document,
    step_up_check,
    step_up_required_error,
)
from approvals.core.services.previews import approvals_of, status_awaiting
from approvals.core.services.rights import staff_approvals_standing, staff_right_error
from approvals.core.transitions import preview_effect_changed, preview_transitioned
from approvals.models import AWAITING_STATUSES, Approval, ApprovalRole, AuditEvent, Preview, PreviewStatus
from approvals.operations import metrics

if TYPE_CHECKING:
    from django.contrib.auth.models import User

EXPIRE_BATCH_SIZE = 100


# Expiry --------------------------------------------------------------------------------------


def preview_expire_if_due(preview: Preview, *, now: Any = None) -> bool:
    """Expire a preview still waiting for approval past its expiry. Call within a transaction."""
    now = now or timezone.now()
    if preview.status in AWAITING_STATUSES and preview.expires_at <= now:
        reason = "The preview expired before it was approved."
        preview_end(preview, PreviewStatus.EXPIRED, code=ErrorCode.EXPIRED, reason=reason)
        audit_record(event=AuditEvent.EXPIRED, preview=preview, result={"expires_at": preview.expires_at.isoformat()})
        return True
    return False


def previews_expire_stale(*, batch_size: int = EXPIRE_BATCH_SIZE) -> int:
    """Expire every preview whose approval window has passed (the periodic sweeper), a small batch per
    transaction, so that the previews are never held for the whole sweep."""
    count = 0
    while True:
        with audited_transaction():
            now = timezone.now()
            stale = Preview.objects.filter(status__in=AWAITING_STATUSES, expires_at__lte=now)
            batch = previews_lock(stale, skip_locked=True, limit=batch_size)
            expired = sum(preview_expire_if_due(preview, now=now) for preview in batch)
        count += expired
        if len(batch) < batch_size:
            return count


def preview_refresh(*, preview: Preview) -> Preview:
    """Bring a preview read for display up to date (an expired approval window)."""
    if preview.status in AWAITING_STATUSES and preview.expires_at <= timezone.now():
        with transaction.atomic():
            locked = preview_lock(preview.pk)
            if locked is None:
                raise Preview.DoesNotExist(f"No preview {preview.pk}")
            preview_expire_if_due(locked)
        preview.refresh_from_db()
    return preview


# Approvals -----------------------------------------------------------------------------------


def _quorum_facts(preview: Preview, role: str) -> dict[str, Any]:
    if role != ApprovalRole.STAFF or preview.staff_approvals_needed == 1:
        return {}
    have, need = quorum.progress(preview)
    return {"staff_approvals": have, "staff_approvals_needed": need}


def approval_add(
    preview: Preview,
    *,
    approver: User,
    role: str,
    basis: str,
    event: AuditEvent,
    passkey: VerifiedStepUp | None = None,
) -> None:
    """Record `approver`'s approval of the locked preview as it is now (its digest and subject version),
    with the passkey assertion it was given with, if any; move its status on, audit it (the assertion in
    the record's approval basis, so that the sealed log commits to it), and publish its execution once no
    approval is missing."""
    approval = Approval(
        preview=preview,
        approver=approver,
        role=role,
        basis=basis,
        digest=preview.digest,
        subject_version=preview.subject_version,
    )
    insert_rows([approval])
    if passkey is not None:
        approval_signature_keep(approval, passkey)
    if quorum.needs_counting(preview, role):
        standing, _lapsed = staff_approvals_standing(preview, approvals_of(preview))
        approved_roles = quorum.approved_roles(preview, standing)
    else:
        approved_roles = {role}
    previous = preview.status
    preview.status = status_awaiting(preview.required_approvals, approved_roles)
    update_fields(preview, ["status", "status_changed_at"])
    if preview.status == previous:
        preview_effect_changed(preview)  # one approval of several: the same status, another count
    else:
        preview_transitioned(preview, previous)
    audit_record(
        event=event,
        preview=preview,
        actor=approver,
        approval_basis={
            "role": role,
            "digest": preview.digest,
            "basis": basis,
            "subject_version": preview.subject_version,
            **({"passkey": signature_document(passkey)} if passkey is not None else {}),
        },
        result={"status": preview.status, **_quorum_facts(preview, role)},
    )
    metrics.decision(preview, role=role, decision=event)
    if preview.status == PreviewStatus.APPROVED:
        execution_open(preview)
        execution_enqueue(preview)


def _subject_current_error(preview: Preview, approver: User) -> DecisionError | None:
    """Lock the subject (after the preview); when it changed since the preview, supersede the preview."""
    action = registry.action(preview.action)
    subject = subject_lock(action, preview) if action else None
    if action is not None and subject is not None and action.subject_version(subject) == preview.subject_version:
        return None
    preview_end(
        preview,
        PreviewStatus.SUPERSEDED,
        code=ErrorCode.SUBJECT_CHANGED,
        reason="What this preview is about changed after it was made.",
    )
    audit_record(event=AuditEvent.SUPERSEDED, preview=preview, actor=approver)
    return DecisionError(
        "This preview is out of date: what it is about changed since it was made. Ask for a new one.",
        code=ErrorCode.SUPERSEDED,
    )


def _preview_say_no(
    preview: Preview, person: User, role: ApprovalRole, digest: str, note: str, channel: dict[str, str]
) -> None:
    if role == ApprovalRole.CUSTOMER:
        reason = "The customer declined."  # the note reaches the agent as customer_note, marked as theirs
        preview_end(preview, PreviewStatus.DECLINED, code=ErrorCode.DECLINED, reason=reason)
        event = AuditEvent.DECLINED
    else:
        preview_end(preview, PreviewStatus.REJECTED, code=ErrorCode.REJECTED, reason=note)
        event = AuditEvent.REJECTED
    audit_record(event=event, preview=preview, actor=person, result={"note": note, "digest": digest, **channel})
    metrics.decision(preview, role=role, decision=event)


class Decision(StrEnum):
    APPROVE = "approve"
    DECLINE = "decline"


def preview_decide(
    *,
    preview_id: Any,
    person: User,
    role: ApprovalRole,
    digest: str,
    decision: Decision,
    note: str = "",
    basis: str = "",
    channel: str = "",
    passkey_assertion: str = "",
) -> Preview:
    """The one decision path: `person`'s yes or no, in `role`, to exactly the preview they saw (its digest).

    The customer role must be the preview's actor (anyone else's preview is as if it did not exist); the
    staff role must hold the action's review permission and, to approve, have proposed no preview of its
    chain. An approval at or above the role's step-up threshold needs `passkey_assertion` (the JSON of the
    browser's navigator.credentials.get answer over a challenge committing to this digest); one given
    below it is checked all the same and kept.
    Raises Preview.DoesNotExist for a preview this person may not see, DecisionError (audited)
    when the decision cannot be taken. `channel` (e.g. "slack:U123") names where a decision taken outside
    the console came from, in the audit result of a rejection or a refusal (an approval says it in `basis`).
    """
    approving = decision == Decision.APPROVE
    came_from = {"channel": channel} if channel else {}
    with audited_transaction():
        owner = {"actor_id": person.pk} if role == ApprovalRole.CUSTOMER else {}
        preview = preview_lock(preview_id, **owner)
        if preview is None:
            raise Preview.DoesNotExist(f"No preview {preview_id} for {person}")
        error = decision_error(preview, approver=person, role=role, digest=digest, approving=approving)
        signed: VerifiedStepUp | None = None
        if error is None and approving:
            error, signed = _step_up(preview, person, role, passkey_assertion)
        if error is None and approving:
            error = _subject_current_error(preview, person)
        if error is not None:
            audit_decision_refused(preview, person, error, role=role, **came_from)
        elif approving:
            event = AuditEvent.CONFIRMED if role == ApprovalRole.CUSTOMER else AuditEvent.APPROVED
            approval_add(preview, approver=person, role=role, basis=basis, event=event, passkey=signed)
        else:
            _preview_say_no(preview, person, role, digest, note, came_from)
    if error is not None:
        raise error
    return preview


def _step_up(
    preview: Preview, person: User, role: ApprovalRole, assertion: str
) -> tuple[DecisionError | None, VerifiedStepUp | None]:
    """(why the passkey part of this approval fails, or None; the verified assertion, if one came)."""
    if not assertion:
        return step_up_required_error(preview, person, role), None
    try:
        return None, step_up_check(preview=preview, person=person, assertion=assertion)
    except DecisionError as error:
        return error, None


def preview_approve(
    *,
    preview_id: Any,
    approver: User,
    role: ApprovalRole,
    digest: str,
    basis: str = "",
    passkey_assertion: str = "",
) -> Preview:
    """`preview_decide` saying yes."""
    return preview_decide(
        preview_id=preview_id,
        person=approver,
        role=role,
        digest=digest,
        decision=Decision.APPROVE,
        basis=basis,
        passkey_assertion=passkey_assertion,
    )


def preview_decline(*, preview_id: Any, person: User, role: ApprovalRole, digest: str, note: str = "") -> Preview:
    """`preview_decide` saying no: the customer declines, or staff reject."""
    return preview_decide(
        preview_id=preview_id, person=person, role=role, digest=digest, decision=Decision.DECLINE, note=note
    )


# Who may decide ------------------------------------------------------------------------------


def _status_error(preview: Preview, role: ApprovalRole) -> DecisionError | None:
    """Why the preview is not waiting for this role's decision, or None."""
    if preview.status == f"awaiting_{role}":
        return None
    if preview.status in (PreviewStatus.APPROVED, PreviewStatus.EXECUTED) or (
        role == ApprovalRole.CUSTOMER and preview.status == PreviewStatus.AWAITING_STAFF
    ):
        return DecisionError("This preview was already approved.", code=ErrorCode.ALREADY_DECIDED)
    return DecisionError(
        f"This preview can no longer be decided: it is {preview.get_status_display().lower()}.",
        code=ErrorCode.NOT_AWAITING_DECISION,
    )


def _staff_error(preview: Preview, approver: User, *, approving: bool) -> DecisionError | None:
    """Why this staff member may not decide the preview (rights, then their own earlier approval)."""
    error = staff_right_error(preview, approver, approving=approving)
    if error is None and approving:
        mine = preview.approvals.filter(role=ApprovalRole.STAFF, approver=approver, lapsed_at__isnull=True)
        if mine.exists():
            have, need = quorum.progress(preview)
            return DecisionError(
                f"You already approved this preview ({have} of {need}); it needs another staff member's approval.",
                code=ErrorCode.ALREADY_APPROVED_BY_YOU,
            )
    return error


def decision_error(
    preview: Preview, *, approver: User, role: ApprovalRole, digest: str, approving: bool = True
) -> DecisionError | None:
    """Why this person cannot decide this preview now, or None. May expire the preview."""
    if preview_expire_if_due(preview):
        return DecisionError("This preview expired before it was approved.", code=ErrorCode.EXPIRED)
    error = _status_error(preview, role)
    if error is None and role == ApprovalRole.STAFF:
        error = _staff_error(preview, approver, approving=approving)
    if error is None and digest != preview.digest:
        error = DecisionError(
            "What you saw is not what this preview says now. Review it again before deciding.",
            code=ErrorCode.DIGEST_MISMATCH,
        )
    return error
