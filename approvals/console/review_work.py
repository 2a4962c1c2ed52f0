"""Working the staff queue: claims and assignments (so that two reviewers do not work one preview), and
bulk decisions (each preview decided on its own through the one decision path, bound to its own digest,
audited on its own). A claim is changed (released, taken over, given to someone else) only by the one
who holds it or a lead (`approvals.manage_review_claims`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.db import transaction

from approvals.core.digests import digest_of
from approvals.core.errors import DecisionError, ErrorCode
from approvals.core.locks import preview_lock
from approvals.core.services import Decision, audit_record, may_manage_claims, may_review, preview_decide
from approvals.models import ApprovalRole, AuditEvent, InternalNote, Preview, PreviewStatus, ReviewClaim

if TYPE_CHECKING:
    from django.contrib.auth.models import User

# Claims ------------------------------------------------------------------------------------------


def preview_claim(*, preview: Preview, reviewer: User, by: User | None = None, take_over: bool = False) -> ReviewClaim:
    """`reviewer` works this preview (assigned to them when `by` is someone else). A preview another
    reviewer claimed is only taken over when asked for (`take_over`), and that is audited."""
    by = by or reviewer
    if preview.status != PreviewStatus.AWAITING_STAFF:
        raise DecisionError("Only a preview waiting for staff can be claimed.", code=ErrorCode.NOT_AWAITING_DECISION)
    if not may_review(reviewer, preview):
        raise DecisionError(
            f"{reviewer.get_username()} may not review this kind of action.", code=ErrorCode.NOT_A_REVIEWER
        )
    if reviewer.pk == preview.actor_id:
        raise DecisionError(
            f"{reviewer.get_username()} proposed this; another reviewer must.", code=ErrorCode.FOUR_EYES
        )
    with transaction.atomic():
        locked = preview_lock(preview.pk)
        if locked is None:
            raise Preview.DoesNotExist(f"No preview {preview.pk}")
        claim = ReviewClaim.objects.select_related("claimed_by").filter(preview=locked).first()
        previous = claim.claimed_by.get_username() if claim else None
        if claim is not None and claim.claimed_by_id == reviewer.pk:
            return claim
        if claim is not None and not take_over and by.pk == reviewer.pk:
            raise DecisionError(
                f"{previous} is already working on this preview; a lead can take it over if you agreed with them.",
                code=ErrorCode.CLAIMED_BY_ANOTHER,
            )
        if claim is not None and claim.claimed_by_id != by.pk and not may_manage_claims(by):
            raise DecisionError(
                f"{previous} is working on this preview; only they or a lead can hand it on.",
                code=ErrorCode.CLAIMED_BY_ANOTHER,
            )
        claim, _ = ReviewClaim.objects.update_or_create(
            preview=locked,
            defaults={"claimed_by": reviewer, "assigned_by": None if by.pk == reviewer.pk else by},
        )
        audit_record(
            event=AuditEvent.REVIEW_CLAIMED,
            preview=locked,
            actor=by,
            result={"claimed_by": reviewer.get_username(), "previous": previous, "assigned": by.pk != reviewer.pk},
        )
    return claim


def preview_release(*, preview: Preview, reviewer: User) -> bool:
    """Give a claimed preview back to the queue (the claimer, or a lead); False when there was no claim.
    Raises DecisionError when someone else holds it and `reviewer` is no lead."""
    with transaction.atomic():
        if preview_lock(preview.pk) is None:
            return False
        claim = ReviewClaim.objects.select_related("claimed_by").filter(preview=preview).first()
        if claim is None:
            return False
        holder = claim.claimed_by.get_username()
        if claim.claimed_by_id != reviewer.pk and not may_manage_claims(reviewer):
            raise DecisionError(
                f"{holder} is working on this preview; only they or a lead can give it back.",
                code=ErrorCode.CLAIMED_BY_ANOTHER,
            )
        claim.delete()
        audit_record(
            event=AuditEvent.REVIEW_RELEASED, preview=preview, actor=reviewer, result={"was_claimed_by": holder}
        )
    return True


# Internal notes ----------------------------------------------------------------------------------


def preview_note_add(*, preview: Preview, author: User, body: str) -> InternalNote:
    """Staff write a note on a preview for each other, in any state. The audit records who wrote it
    and the digest of its words, not the words: the audit trail goes into receipts and evidence
    bundles that leave the company, and the note is for staff only."""
    body = body.strip()
    if not body:
        raise ValueError("An internal note needs words.")
    if not may_review(author, preview):
        raise DecisionError(
            f"{author.get_username()} may not review this kind of action.", code=ErrorCode.NOT_A_REVIEWER
        )
    with transaction.atomic():
        note = InternalNote.objects.create(preview=preview, author=author, body=body)
        audit_record(
            event=AuditEvent.INTERNAL_NOTE_ADDED,
            preview=preview,
            actor=author,
            result={"note_id": note.pk, "body_digest": digest_of(body), "length": len(body)},
        )
    return note


# Bulk decisions ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class BulkItem:
    """One preview as the page showed it: its id, digest and subject version."""

    preview_id: str
    digest: str
    subject_version: int


@dataclass(frozen=True)
class BulkResult:
    preview_id: str
    ok: bool
    code: str = ""
    message: str = ""


def previews_decide_many(
    *,
    reviewer: User,
    items: list[BulkItem],
    decision: str,
    note: str = "",
    allowed: Any = None,
    passkey_assertion: str = "",
) -> list[BulkResult]:
    """Approve (`decision="approve"`) or reject every item, one at a time: each in its own transaction
    with its own audit record, each bound to the digest the page carried. One that changed since the
    page was drawn (another version of its subject, or another digest or status) is refused alone, with
    the reason, and the rest proceed. `allowed` (a queryset) limits the previews this reviewer may see.
    An approval carries `passkey_assertion`: one assertion over a challenge committing to the list of the
    items' digests, which the decision service accepts once for each digest of that list."""
    results = []
    for item in items:
        try:
            visible = (allowed if allowed is not None else Preview.objects).filter(pk=item.preview_id).first()
            if visible is None:
                raise Preview.DoesNotExist(item.preview_id)
            if visible.subject_version != item.subject_version:
                raise DecisionError(
                    "This preview is not the version the page showed; open it and review it again.",
                    code=ErrorCode.VERSION_MISMATCH,
                )
            preview_decide(
                preview_id=item.preview_id,
                person=reviewer,
                role=ApprovalRole.STAFF,
                digest=item.digest,
                decision=Decision.APPROVE if decision == "approve" else Decision.DECLINE,
                note=note,
                basis="staff console bulk review",
                passkey_assertion=passkey_assertion if decision == "approve" else "",
            )
            results.append(BulkResult(item.preview_id, True))
        except DecisionError as error:
            results.append(BulkResult(item.preview_id, False, error.code, error.message))
        except Preview.DoesNotExist:
            results.append(BulkResult(item.preview_id, False, "not_found", "No such preview for you."))
    return results
