"""Counter-proposals: instead of rejecting, a reviewer changes what the action allows (a refund's
amount, an invoice's recipient among its known contacts). That makes a new preview through the same
policy, as the same actor and agent session, with the reviewer recorded as its author; the old preview
is superseded (code `counter_proposed`) and points to the new one. The customer is asked again when
the action needs the customer; the agent hears of it through the transitions (and the old preview's
answer names the new one). The author's own approval of it never counts (services.decision_error).
"""

from __future__ import annotations

import logging
from functools import partial
from typing import TYPE_CHECKING, Any

from django.db import transaction

from . import metrics
from .errors import DecisionError, ErrorCode, PolicyRefusal
from .models import ApprovalRole, AuditEvent, Preview, PreviewStatus
from .publish import NOTIFY_COUNTER_PROPOSAL, task_publish
from .registry import Action, Proposal, registry
from .services import (
    audit_record,
    audited_transaction,
    decision_error,
    preview_build,
    preview_insert_or_twin,
    preview_mark,
)
from .services.locks import preview_lock
from .transitions import preview_transitioned

if TYPE_CHECKING:
    from django.contrib.auth.models import User

logger = logging.getLogger(__name__)

COUNTER_PROPOSED = ErrorCode.COUNTER_PROPOSED


def _publish_customer_email(preview_id: str) -> None:
    try:
        task_publish(NOTIFY_COUNTER_PROPOSAL, preview_id)
    except Exception:  # noqa: BLE001 - a broker outage must not undo or hide the counter-proposal
        logger.warning("Could not publish the counter-proposal email for %s", preview_id, exc_info=True)


def counter_reason(old: Preview, new: Preview) -> str:
    action = registry.action(new.action)
    headline = action.headline(new) if action else new.action
    asked = (
        " The customer is asked to confirm it."
        if ApprovalRole.CUSTOMER in new.required_approvals
        else " It waits for another staff member's approval."
    )
    return f"A reviewer proposed a change instead: {headline}.{asked}"


def _counter_proposal(old: Preview, action: Action | None, values: dict[str, str]) -> Proposal:
    """The action's policy on the changed arguments; raises DecisionError when it refuses them."""
    if action is None:
        raise DecisionError("This kind of action is no longer available.", code=ErrorCode.UNKNOWN_ACTION)
    try:
        arguments = action.counter_arguments(old, values)
        proposal = action.propose(actor=old.actor, arguments=arguments)
    except PolicyRefusal as refusal:
        raise DecisionError(refusal.message, code=refusal.code) from refusal
    if proposal.payload == old.payload:
        raise DecisionError(
            "The counter-proposal is the same as the preview; approve or reject it instead.",
            code=ErrorCode.COUNTER_UNCHANGED,
        )
    return proposal


def _counter_insert(old: Preview, proposal: Proposal, *, reviewer: User, action_name: str) -> Preview:
    """Insert the counter-proposal's preview; raises DecisionError when the same one already waits."""
    new = preview_build(
        action_name=action_name,
        actor=old.actor,
        agent_session=old.agent_session,
        proposal=proposal,
        counter_author=reviewer,
        supersedes=old,
    )
    twin = preview_insert_or_twin(new)
    if twin is not None:
        raise DecisionError(
            f"The same proposal already waits as preview {twin.pk}; decide that one.", code=ErrorCode.COUNTER_EXISTS
        )
    return new


def _counter_recorded(old: Preview, new: Preview, *, reviewer: User, digest: str, values: dict) -> None:
    """Audit the new preview, supersede the old one (pointing to it), and ask the customer again."""
    audit_record(
        event=AuditEvent.PROPOSED,
        preview=new,
        actor=reviewer,
        agent_session=new.agent_session,
        raw_arguments="",
        result={
            "status": new.status,
            "digest": new.digest,
            "counter_proposal_of": str(old.pk),
            "author": reviewer.get_username(),
            "changes": values,
        },
    )
    metrics.proposal_created(new)
    preview_transitioned(new, "")
    preview_mark(old, PreviewStatus.SUPERSEDED, code=COUNTER_PROPOSED, reason=counter_reason(old, new))
    if new.status == PreviewStatus.AWAITING_CUSTOMER:
        transaction.on_commit(partial(_publish_customer_email, str(new.pk)))
    audit_record(
        event=AuditEvent.COUNTER_PROPOSED,
        preview=old,
        actor=reviewer,
        agent_session=old.agent_session,
        result={"new_preview": str(new.pk), "changes": values, "digest": digest, "reason": old.failure_reason},
    )
    metrics.decision(old, role=ApprovalRole.STAFF, decision=COUNTER_PROPOSED)


def _counter_refused(old: Preview, reviewer: User, error: DecisionError, values: dict) -> None:
    audit_record(
        event=AuditEvent.DECISION_REFUSED,
        preview=old,
        actor=reviewer,
        result={"error": error.as_dict(), "role": ApprovalRole.STAFF, "counter_proposal": values},
    )
    metrics.decision(old, role=ApprovalRole.STAFF, decision="refused", code=error.code)


def preview_counter_propose(*, preview_id: Any, reviewer: User, digest: str, values: dict[str, str]) -> Preview:
    """Replace the preview the reviewer saw (its digest) by the reviewer's counter-proposal.

    Raises Preview.DoesNotExist when there is no such preview, DecisionError when the reviewer may not
    decide it now or the change is refused by the action's policy (audited as a refused decision).
    """
    error: DecisionError | None = None
    with audited_transaction():
        old = preview_lock(preview_id)
        if old is None:
            raise Preview.DoesNotExist(f"No preview {preview_id}")
        error = decision_error(old, approver=reviewer, role=ApprovalRole.STAFF, digest=digest, approving=False)
        if error is None:
            action = registry.action(old.action)
            try:
                proposal = _counter_proposal(old, action, values)
                assert action is not None, "_counter_proposal refuses a missing action"
                new = _counter_insert(old, proposal, reviewer=reviewer, action_name=action.name)
            except DecisionError as refused:
                error = refused
        if error is None:
            _counter_recorded(old, new, reviewer=reviewer, digest=digest, values=values)
        else:
            _counter_refused(old, reviewer, error, values)
    if error is not None:
        raise error
    return new
