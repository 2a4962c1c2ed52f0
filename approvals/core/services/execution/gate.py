"""The execution gate: every check before a first effect, under the preview's and the subject's locks, of
everything the decisions relied on (digest, approvals and each approver's right now, session, subject
version, deadline, the action's policy, the spending limits), written once for every attempt."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.utils import timezone

from approvals.core.errors import (
    ErrorCode,
    PolicyRefusal,
)
from approvals.core.limits import spend_limits_recheck
from approvals.core.locks import (
    subject_lock,
)
from approvals.core.quorum import quorum_refusal
from approvals.core.registry import Action
from approvals.core.services.execution.state import (
    AGENT_SESSION_REVOKED_REASON,
    Outcome,
    execution_transition,
)
from approvals.core.services.previews import approvals_of, preview_digest
from approvals.core.services.rights import staff_approvals_standing
from approvals.models import (
    Approval,
    Execution,
    Preview,
)


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
        "a staff approval again."
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
        # Gone, or no longer the actor's: the action's one refusal for both, as at proposal.
        unavailable = action.subject_unavailable(preview.subject_id)
        return _Refusal(unavailable.code, unavailable.message, {"error": unavailable.as_dict()})
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


def check_before_first_effect(
    preview: Preview, execution: Execution, action: Action, *, token: int | None
) -> tuple[Any, list[Approval]] | None:
    """The one check block, under the preview's lock, before any first effect (a first attempt, or one
    whose lookup found no earlier effect): lock the subject and run every check. On a refusal the
    execution ends before any effect, or waits for an approval again, and None is returned. On a pass
    the effect counts as in flight from here (`effect_possible`, saved by the caller's next write):
    the subject as checked and the approvals that stand are returned."""
    subject = subject_lock(action, preview)
    approvals = approvals_of(preview)
    refusal = _checks_refusal(preview, execution, action, subject, approvals)
    if refusal is not None:
        execution_transition(
            execution, preview, refusal.to, token=token, code=refusal.code, detail=refusal.reason, facts=refusal.facts
        )
        return None
    execution.effect_possible = True
    return subject, approvals
