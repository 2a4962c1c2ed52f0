"""Who may do what to a preview, now: the one place the admission, the decisions and the execution gate
ask (as Django's auth backends answer `has_perm` at every entry).

A staff member decides a preview when they are active staff holding the action's review permission and
proposed no preview of its chain (the first preview and its counter- and re-proposals). The same answer
is asked again, under the execution's locks, of every approval a preview's execution rests on: an
approval whose approver lost the right since (left the group, was deactivated, proposed a later preview
of the chain) lapses and never counts again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib.auth import get_user_model
from django.db.models import Q
from django.utils import timezone

from approvals.core.errors import DecisionError, ErrorCode
from approvals.core.registry import Action, registry
from approvals.core.rows import update_fields
from approvals.core.services.audit import audit_record
from approvals.models import Approval, ApprovalRole, AuditEvent, Preview, PreviewOrigin

if TYPE_CHECKING:
    from django.contrib.auth.models import User

#: The engine's permission to release or take over another reviewer's claim (a lead's).
MANAGE_CLAIMS_PERMISSION = "approvals.manage_review_claims"


def may_review_action(person: User, action: Action | None) -> bool:
    """Whether `person` is active staff with the review permission of this kind of action."""
    permission = action.review_permission if action else "approvals.review_preview"
    return bool(person.is_active and getattr(person, "is_staff", False) and person.has_perm(permission))


def may_review(person: User, preview: Preview) -> bool:
    """Whether `person` is active staff with the review permission of the preview's action."""
    return may_review_action(person, registry.action(preview.action))


def may_manage_claims(person: User) -> bool:
    return bool(person.is_active and person.has_perm(MANAGE_CLAIMS_PERMISSION))


def proposer_chain(preview: Preview) -> set[Any]:
    """Everyone who proposed a preview of this preview's chain, and its actor: none of them counts as
    a staff approver of any preview of the chain. One query, and none for a preview that starts one."""
    people = {pk for pk in (preview.actor_id, preview.proposed_by_id) if pk is not None}
    if preview.chain_root_id is None:
        return people
    chain = Preview.objects.filter(Q(pk=preview.chain_root_id) | Q(chain_root_id=preview.chain_root_id))
    return people | {pk for pk in chain.values_list("proposed_by_id", flat=True) if pk is not None}


def staff_right_error(
    preview: Preview, person: User, *, approving: bool, chain: set[Any] | None = None
) -> DecisionError | None:
    """Why this staff member may not decide the preview now (four eyes across its chain, the review
    permission), or None. Rejecting needs the permission and not to be the actor; approving also not
    to have proposed any preview of the chain."""
    if preview.actor_id == person.pk:
        return DecisionError(
            "You proposed this action yourself; another staff member must review it.", code=ErrorCode.FOUR_EYES
        )
    if not may_review(person, preview):
        return DecisionError("You may not review this kind of action.", code=ErrorCode.NOT_A_REVIEWER)
    if not approving:
        return None
    if preview.proposed_by_id == person.pk and preview.origin == PreviewOrigin.COUNTER_PROPOSAL:
        return DecisionError(
            "You wrote this counter-proposal yourself; it counts as neither of the two eyes: "
            "another staff member must review it.",
            code=ErrorCode.COUNTER_AUTHOR,
        )
    if preview.proposed_by_id == person.pk:
        again = "" if preview.origin == PreviewOrigin.STAFF_PROPOSAL else " again"
        return DecisionError(
            f"You proposed this{again} yourself; another staff member must review it.",
            code=ErrorCode.FOUR_EYES,
        )
    if person.pk in (proposer_chain(preview) if chain is None else chain):
        return DecisionError(
            "You proposed an earlier version of this preview; another staff member must review it.",
            code=ErrorCode.FOUR_EYES,
        )
    return None


def _lapse_words(name: str, error: DecisionError) -> str:
    if error.code == ErrorCode.NOT_A_REVIEWER:
        return f"{name} is no longer an active reviewer of this kind of action"
    return f"{name} proposed a preview of this chain"


def _lapse(preview: Preview, approval: Approval, error: DecisionError) -> None:
    approval.lapsed_at = timezone.now()
    approval.lapsed_reason = _lapse_words(approval.approver.get_username(), error)[:200]
    update_fields(approval, ["lapsed_at", "lapsed_reason"])
    audit_record(
        event=AuditEvent.APPROVAL_LAPSED,
        preview=preview,
        actor=None,
        result={
            "approver": approval.approver.get_username(),
            "role": approval.role,
            "why": error.code,
            "reason": approval.lapsed_reason,
            "approved_at": approval.created_at.isoformat(),
        },
    )


def staff_approvals_standing(preview: Preview, approvals: list[Approval]) -> tuple[list[Approval], list[Approval]]:
    """The preview's locked approvals as they stand now: (those that still count, those that lapsed just
    now). Every staff approval's approver is asked again whether they may approve this preview; one
    who may not any more lapses (recorded and audited) and never counts again. Call under the preview's lock."""
    standing = [a for a in approvals if a.lapsed_at is None]
    staff = [a for a in standing if a.role == ApprovalRole.STAFF]
    if not staff:
        return standing, []
    chain = proposer_chain(preview)
    people = _people(a.approver_id for a in staff)
    lapsed: list[Approval] = []
    for approval in staff:
        approval.approver = people[approval.approver_id]
        error = staff_right_error(preview, approval.approver, approving=True, chain=chain)
        if error is not None:
            _lapse(preview, approval, error)
            lapsed.append(approval)
    return [a for a in standing if a not in lapsed], lapsed


def _people(ids: Any) -> dict[Any, User]:
    return {person.pk: person for person in get_user_model().objects.filter(pk__in=set(ids))}
