"""Counter-proposals: instead of rejecting, a reviewer changes what the action allows (a refund's
amount, an invoice's recipient among its known contacts). The new preview comes through the one
admission path (approvals.core.services.proposals.proposal_admit) like an agent's proposal: the same
policy, spending limits and quorum, as the same actor and agent session, with the reviewer recorded
as its proposer (`origin` counter_proposal) and the old preview as its chain. The old preview is
superseded (code `counter_proposed`) and points to the new one. The customer is asked again when the
action needs the customer; the agent hears of it through the transitions (and the old preview's
answer names the new one). No proposer of the chain may approve it (services.rights).
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from approvals.core.errors import DecisionError, ErrorCode, PolicyRefusal
from approvals.core.locks import preview_lock
from approvals.core.outbox import outbox_task
from approvals.core.registry import Proposal, registry
from approvals.core.services import audit_record, audited_transaction, decision_error, proposal_admit
from approvals.core.services.audit import audit_decision_refused
from approvals.core.services.execution.opening import preview_end
from approvals.models import ApprovalRole, AuditEvent, Preview, PreviewOrigin, PreviewStatus
from approvals.operations import metrics
from approvals.operations.publish import NOTIFY_COUNTER_PROPOSAL

if TYPE_CHECKING:
    from django.contrib.auth.models import User

logger = logging.getLogger(__name__)

COUNTER_PROPOSED = ErrorCode.COUNTER_PROPOSED


def counter_reason(old: Preview, new: Preview) -> str:
    action = registry.action(new.action)
    headline = action.headline(new) if action else new.action
    asked = (
        " The customer is asked to confirm it."
        if ApprovalRole.CUSTOMER in new.required_approvals
        else " It waits for another staff member's approval."
    )
    return f"A reviewer proposed a change instead: {headline}.{asked}"


def _counter_admit(old: Preview, reviewer: User, values: dict[str, str]) -> tuple[Preview | None, DecisionError | None]:
    """Admit the reviewer's change as a new preview: (the preview, None), or (None, why not)."""
    action = registry.action(old.action)
    if action is None:
        return None, DecisionError("This kind of action is no longer available.", code=ErrorCode.UNKNOWN_ACTION)
    try:
        arguments = action.counter_arguments(old, values)
    except PolicyRefusal as refusal:
        return None, DecisionError(refusal.message, code=refusal.code, **refusal.facts)

    def changes_something(proposal: Proposal) -> None:
        if proposal.payload == old.payload:
            raise PolicyRefusal(
                "The counter-proposal is the same as the preview; approve or reject it instead.",
                code=ErrorCode.COUNTER_UNCHANGED,
            )

    outcome = proposal_admit(
        action=action,
        arguments=arguments,
        raw_arguments=json.dumps(values, sort_keys=True),
        origin=PreviewOrigin.COUNTER_PROPOSAL,
        actor=old.actor,
        agent_session=old.agent_session,
        proposed_by=reviewer,
        replaces=old,
        accept=changes_something,
    )
    if outcome.refusal is not None:
        refused = outcome.refusal
        return None, DecisionError(refused.message, code=refused.code, **refused.facts)
    assert outcome.preview is not None, "an admitted proposal has its preview"
    if outcome.kind == "repeated":
        return None, DecisionError(
            f"The same proposal already waits as preview {outcome.preview.pk}; decide that one.",
            code=ErrorCode.COUNTER_EXISTS,
        )
    return outcome.preview, None


def _counter_recorded(old: Preview, new: Preview, *, reviewer: User, digest: str, values: dict) -> None:
    """Supersede the old preview (pointing to the new one), and ask the customer again."""
    preview_end(old, PreviewStatus.SUPERSEDED, code=COUNTER_PROPOSED, reason=counter_reason(old, new))
    if new.status == PreviewStatus.AWAITING_CUSTOMER:
        outbox_task(NOTIFY_COUNTER_PROPOSAL, str(new.pk))  # in this transaction; sent once it commits
    audit_record(
        event=AuditEvent.COUNTER_PROPOSED,
        preview=old,
        actor=reviewer,
        agent_session=old.agent_session,
        result={"new_preview": str(new.pk), "changes": values, "digest": digest, "reason": old.failure_reason},
    )
    metrics.decision(old, role=ApprovalRole.STAFF, decision=COUNTER_PROPOSED)


def preview_counter_propose(*, preview_id: Any, reviewer: User, digest: str, values: dict[str, str]) -> Preview:
    """Replace the preview the reviewer saw (its digest) by the reviewer's counter-proposal.

    Raises Preview.DoesNotExist when there is no such preview, DecisionError when the reviewer may not
    decide it now or the change is refused by the action's policy (audited as a refused decision).
    """
    new: Preview | None = None
    with audited_transaction():
        old = preview_lock(preview_id)
        if old is None:
            raise Preview.DoesNotExist(f"No preview {preview_id}")
        error = decision_error(old, approver=reviewer, role=ApprovalRole.STAFF, digest=digest, approving=False)
        if error is None:
            new, error = _counter_admit(old, reviewer, values)
        if new is not None:
            _counter_recorded(old, new, reviewer=reviewer, digest=digest, values=values)
        else:
            assert error is not None, "a counter-proposal not admitted says why"
            audit_decision_refused(old, reviewer, error, role=ApprovalRole.STAFF, counter_proposal=values)
    if error is not None:
        raise error
    assert new is not None
    return new
