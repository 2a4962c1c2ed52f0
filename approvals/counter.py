"""Counter-proposals: instead of rejecting, a reviewer changes what the action allows (a refund's
amount, an invoice's recipient among its known contacts). That makes a new preview through the same
policy, as the same actor and agent session, with the reviewer recorded as its author; the old preview
is superseded (code `counter_proposed`) and points to the new one. The customer is asked again when
the action needs the customer; the agent hears of it through the transitions (and the old preview's
answer names the new one). The author's own approval of it never counts (services._decision_error).
"""

from __future__ import annotations

import logging
from functools import partial
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from . import metrics
from .errors import DecisionError, PolicyRefusal
from .models import ApprovalRole, AuditEvent, Preview, PreviewStatus
from .registry import registry
from .rows import fetch_one
from .services import (
    _audited_transaction,
    _decision_error,
    _mark,
    _preview_insert_or_twin,
    audit_record,
    preview_build,
)
from .transitions import preview_transitioned

logger = logging.getLogger(__name__)

COUNTER_PROPOSED = "counter_proposed"


def _publish_customer_email(preview_id: str) -> None:
    from .tasks import notify_counter_proposal

    try:
        notify_counter_proposal.delay(preview_id)
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


def preview_counter_propose(
    *, preview_id: Any, reviewer: AbstractBaseUser, digest: str, values: dict[str, str]
) -> Preview:
    """Replace the preview the reviewer saw (its digest) by the reviewer's counter-proposal.

    Raises Preview.DoesNotExist when there is no such preview, DecisionError when the reviewer may not
    decide it now or the change is refused by the action's policy (audited as a refused decision).
    """
    error: DecisionError | None = None
    new: Preview | None = None
    with _audited_transaction():
        old = fetch_one(Preview, lock=True, id=preview_id)
        if old is None:
            raise Preview.DoesNotExist(f"No preview {preview_id}")
        error = _decision_error(old, approver=reviewer, role=ApprovalRole.STAFF, digest=digest, approving=False)
        action = registry.action(old.action)
        if error is None and action is None:
            error = DecisionError("This kind of action is no longer available.", code="unknown_action")
        proposal = None
        if error is None:
            try:
                arguments = action.counter_arguments(old, values)
                proposal = action.propose(actor=old.actor, arguments=arguments)
            except PolicyRefusal as refusal:
                error = DecisionError(refusal.message, code=refusal.code)
        if error is None and proposal.payload == old.payload:
            error = DecisionError(
                "The counter-proposal is the same as the preview; approve or reject it instead.",
                code="counter_unchanged",
            )
        if error is None:
            new = _counter_preview(old, proposal, reviewer=reviewer, action_name=action.name)
            twin = _preview_insert_or_twin(new)
            if twin is not None:
                new = None
                error = DecisionError(
                    f"The same proposal already waits as preview {twin.pk}; decide that one.",
                    code="counter_exists",
                )
        if error is None:
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
            _mark(old, PreviewStatus.SUPERSEDED, code=COUNTER_PROPOSED, reason=counter_reason(old, new))
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
        else:
            audit_record(
                event=AuditEvent.DECISION_REFUSED,
                preview=old,
                actor=reviewer,
                result={"error": error.as_dict(), "role": ApprovalRole.STAFF, "counter_proposal": values},
            )
            metrics.decision(old, role=ApprovalRole.STAFF, decision="refused", code=error.code)
    if error is not None:
        raise error
    return new


def _counter_preview(old: Preview, proposal: Any, *, reviewer: AbstractBaseUser, action_name: str) -> Preview:
    return preview_build(
        action_name=action_name,
        actor=old.actor,
        agent_session=old.agent_session,
        proposal=proposal,
        counter_author=reviewer,
        supersedes=old,
    )
