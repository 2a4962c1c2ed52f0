"""Proposals: the one admission path. Every way a preview comes to exist (an agent's tool call over REST
or MCP, a reviewer's counter-proposal, a staff re-proposal, any later channel) goes through
`proposal_admit`, which runs in one order: the proposer's identity and right, the action's policy
against trusted data, the spending limits, the quorum plan, and the preview recorded with who proposed
it (`proposed_by`, `origin`, its chain); a standing grant then counts only if its approver may approve.
The same pending proposal again is answered with its preview; an Idempotency-Key is answered once and
replayed after. Calls refused before the policy (malformed, unknown or forbidden) are audited here too.
An agent may take its own proposal back while it waits for a decision (`preview_withdraw`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from approvals.core import quorum
from approvals.core.digests import digest_of
from approvals.core.errors import ApplicationError, DecisionError, ErrorCode, PolicyRefusal
from approvals.core.limits import spend_limits_check
from approvals.core.locks import preview_lock
from approvals.core.registry import Action, Proposal
from approvals.core.rows import fetch_one, insert_rows, update_fields
from approvals.core.services.audit import audit_record, audited_transaction, with_call_id
from approvals.core.services.decisions import approval_add, preview_expire_if_due
from approvals.core.services.execution.opening import preview_end
from approvals.core.services.previews import preview_digest, status_awaiting
from approvals.core.services.rights import may_review_action, staff_right_error
from approvals.core.stepup import step_up_needed
from approvals.core.transitions import preview_transitioned
from approvals.models import (
    AWAITING_STATUSES,
    OPEN_STATUSES,
    AgentSession,
    ApprovalRole,
    AuditEvent,
    IdempotencyRecord,
    Preview,
    PreviewOrigin,
    PreviewStatus,
)
from approvals.operations import metrics

if TYPE_CHECKING:
    from django.contrib.auth.models import User


@dataclass(frozen=True)
class ProposalOutcome:
    """`created` (201), `repeated` (200, the same pending proposal) or `refused` (422)."""

    kind: str
    preview: Preview | None = None
    refusal: PolicyRefusal | None = None


def proposal_audit_rejected(
    *,
    agent_session: AgentSession,
    event: AuditEvent,
    tool_name: str,
    raw_arguments: str,
    error: dict[str, Any],
    call_id: str | None = None,
) -> None:
    """Audit a tool call that never reached the policy (malformed, unknown or forbidden tool)."""
    metrics.proposal_rejected(tool_name, event=event, code=error.get("code", ""))
    audit_record(
        event=event,
        actor=agent_session.user,
        agent_session=agent_session,
        action=tool_name[:64],
        raw_arguments=raw_arguments,
        result=with_call_id({"error": error}, call_id),
    )


# Previews ------------------------------------------------------------------------------------


def proposal_key(action_name: str, actor_pk: Any, proposal: Proposal) -> str:
    """Equal proposals (same action, actor, subject version and payload) share it."""
    return digest_of(
        {
            "action": action_name,
            "actor": actor_pk,
            "subject_type": proposal.subject_type,
            "subject_id": proposal.subject_id,
            "subject_version": proposal.subject_version,
            "payload": proposal.payload,
        }
    )


def _preview_ttl_seconds(required_approvals: list[str]) -> int:
    """A staff queue is worked in hours, not minutes: previews that need staff wait longer."""
    if ApprovalRole.STAFF in required_approvals:
        return max(settings.PREVIEW_TTL_SECONDS, settings.STAFF_REVIEW_TTL_SECONDS)
    return settings.PREVIEW_TTL_SECONDS


def preview_insert_or_twin(preview: Preview) -> Preview | None:
    """Insert the preview, or return the open preview of the same proposal that is already there.

    The partial unique index on open previews decides, also under a race: nearly every proposal is
    new, so no lookup is made first, and the insert skips a conflicting row (ON CONFLICT DO NOTHING)
    rather than failing, so that no savepoint is needed. A twin that expired is closed and the
    insert tried again.
    """
    for _attempt in range(3):
        if insert_rows([preview], skip_conflicts=True):
            return None
        twin = Preview.objects.filter(proposal_key=preview.proposal_key, status__in=OPEN_STATUSES).first()
        if twin is not None and not preview_expire_if_due(twin):
            return twin
    raise IntegrityError(f"Preview {preview.pk} conflicts with a row that is not an open twin")


def _approvals_needed(action: Action, proposal: Proposal) -> tuple[list[str], int]:
    """The required roles and staff count: the quorum (REVIEW_QUORUM, bands of amounts) applies only to
    an action that proposes amounts; one without money proposes no amount at all."""
    if not action.proposes_amount:
        if proposal.amount_minor is not None or proposal.currency:
            raise ValueError(f"Action {action.name!r} proposed an amount but does not declare proposes_amount = True.")
        return proposal.required_approvals, 1
    return quorum.apply_quorum(
        action=action.name,
        currency=proposal.currency,
        amount_minor=proposal.amount_minor,
        required=proposal.required_approvals,
    )


def preview_build(
    *, action: Action, actor: User, agent_session: AgentSession | None, proposal: Proposal, **extra: Any
) -> Preview:
    """The unsaved preview of an accepted proposal: its approvals (with the quorum), status, expiry and
    digest. `extra` carries who proposed it and its chain (`proposed_by`, `origin`, `chain_root`,
    `supersedes`)."""
    action_name = action.name
    required, staff_needed = _approvals_needed(action, proposal)
    preview = Preview(
        action=action_name,
        actor=actor,
        agent_session=agent_session,
        subject_type=proposal.subject_type,
        subject_id=proposal.subject_id,
        subject_version=proposal.subject_version,
        payload=proposal.payload,
        amount_minor=proposal.amount_minor,
        currency=proposal.currency,
        proposal_key=proposal_key(action_name, actor.pk, proposal),
        required_approvals=required,
        staff_approvals_needed=staff_needed,
        status=status_awaiting(required, approved_roles=set()),
        expires_at=timezone.now() + timedelta(seconds=_preview_ttl_seconds(required)),
        **extra,
    )
    preview.digest = preview_digest(preview)
    return preview


# Submitting ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Call:
    """Who proposes what, as the audit records it."""

    agent_session: AgentSession | None
    actor: User
    action: Action
    raw_arguments: str
    call_id: str | None
    origin: PreviewOrigin
    proposed_by: User
    replaces: Preview | None

    def facts(self, result: dict[str, Any]) -> dict[str, Any]:
        """The audit's result with the call's origin (and, for staff, the proposer) and call id."""
        if self.origin != PreviewOrigin.AGENT:
            result = {**result, "origin": self.origin, "proposed_by": self.proposed_by.get_username()}
            if self.replaces is not None:
                result["replaces_preview"] = str(self.replaces.pk)
        return with_call_id(result, self.call_id)


def _refused(call: _Call, refusal: PolicyRefusal, *, subject_type: str, subject_id: str) -> ProposalOutcome:
    audit_record(
        event=AuditEvent.PROPOSAL_REFUSED,
        actor=call.proposed_by,
        agent_session=call.agent_session,
        action=call.action.name,
        subject_type=subject_type,
        subject_id=subject_id,
        raw_arguments=call.raw_arguments,
        result=call.facts({"error": refusal.as_dict()}),
    )
    metrics.proposal_refused(call.action.name, refusal.code)
    return ProposalOutcome(kind="refused", refusal=refusal)


def _identity_refusal(call: _Call) -> PolicyRefusal | None:
    """Whether the one proposing may propose this for this person now: an agent's session still valid
    (a staff proposal keeps the session it continues, only to tell its agent), a staff proposer active
    with the action's review permission, an active person to act for."""
    session = call.agent_session if call.origin == PreviewOrigin.AGENT else None
    if session is not None and (session.revoked_at is not None or session.expires_at <= timezone.now()):
        return PolicyRefusal(
            "This agent session has ended; nothing was proposed.", code=ErrorCode.AGENT_SESSION_REVOKED
        )
    if not call.actor.is_active:
        return PolicyRefusal("This person's account is not active; nothing was proposed.", code=ErrorCode.USER_INACTIVE)
    if call.origin != PreviewOrigin.AGENT and not may_review_action(call.proposed_by, call.action):
        return PolicyRefusal(
            "You may not propose this kind of action: it needs its reviewers' permission.",
            code=ErrorCode.NOT_A_REVIEWER,
        )
    return None


def _over_limit(call: _Call, proposal: Proposal) -> PolicyRefusal | None:
    """A spending limit this proposal would pass (approvals.core.limits, under row locks held until this
    transaction commits); the preview it replaces no longer counts. The same pending proposal again is
    answered with its preview, counted already."""
    over_limit = spend_limits_check(
        agent_session=call.agent_session,
        actor=call.actor,
        action=call.action,
        amount_minor=proposal.amount_minor,
        currency=proposal.currency,
        excluding=call.replaces.pk if call.replaces is not None else None,
        counts_as_agent_call=call.origin == PreviewOrigin.AGENT,
    )
    if over_limit is None:
        return None
    key = proposal_key(call.action.name, call.actor.pk, proposal)
    if Preview.objects.filter(proposal_key=key, status__in=OPEN_STATUSES).exists():
        return None
    return over_limit


def _created(call: _Call, preview: Preview) -> ProposalOutcome:
    audit_record(
        event=AuditEvent.PROPOSED,
        preview=preview,
        actor=call.proposed_by,
        agent_session=call.agent_session,
        raw_arguments=call.raw_arguments,
        result=call.facts({"status": preview.status, "digest": preview.digest}),
    )
    metrics.proposal_created(preview)
    preview_transitioned(preview, "")
    _apply_standing_grant(preview, call.action)
    return ProposalOutcome(kind="created", preview=preview)


def _repeated(call: _Call, existing: Preview) -> ProposalOutcome:
    audit_record(
        event=AuditEvent.PROPOSAL_REPEATED,
        preview=existing,
        actor=call.proposed_by,
        agent_session=call.agent_session,
        raw_arguments=call.raw_arguments,
        result=call.facts({"status": existing.status}),
    )
    metrics.proposal_repeated(existing)
    return ProposalOutcome(kind="repeated", preview=existing)


def _chain_fields(call: _Call) -> dict[str, Any]:
    fields: dict[str, Any] = {"origin": call.origin, "proposed_by": call.proposed_by}
    if call.replaces is not None:
        fields["chain_root_id"] = call.replaces.chain_id
        if call.origin == PreviewOrigin.COUNTER_PROPOSAL:
            fields["supersedes"] = call.replaces
    return fields


@audited_transaction(savepoint=False)  # within the caller's transaction (idempotent_call's, a counter-proposal's)
def proposal_admit(
    *,
    action: Action,
    arguments: dict[str, Any],
    raw_arguments: str,
    origin: PreviewOrigin,
    actor: User,
    agent_session: AgentSession | None = None,
    proposed_by: User | None = None,
    replaces: Preview | None = None,
    call_id: str | None = None,
    accept: Callable[[Proposal], None] | None = None,
) -> ProposalOutcome:
    """The one admission path: check who proposes, the action's policy against trusted data, the
    spending limits and the quorum, and record an immutable preview, or refuse (audited either way).

    `actor` is the person the action is for (the customer who confirms); `proposed_by` who proposes it
    (the agent session's person, or the staff member of a counter- or re-proposal); `replaces` the
    preview this one continues (the one a counter-proposal supersedes, or the failed one re-proposed).
    `accept` may refuse an accepted proposal with PolicyRefusal before anything is recorded (a
    counter-proposal that changes nothing).
    """
    call = _Call(agent_session, actor, action, raw_arguments, call_id, origin, proposed_by or actor, replaces)
    subject_id = str(arguments.get(action.subject_argument, ""))[:64]
    not_allowed = _identity_refusal(call)
    if not_allowed is not None:
        return _refused(call, not_allowed, subject_type="", subject_id=subject_id)
    try:
        proposal = action.propose(actor=actor, arguments=arguments)
        if accept is not None:
            accept(proposal)
    except PolicyRefusal as refusal:
        return _refused(call, refusal, subject_type="", subject_id=subject_id)
    over_limit = _over_limit(call, proposal)
    if over_limit is not None:
        return _refused(call, over_limit, subject_type=proposal.subject_type, subject_id=proposal.subject_id)
    preview = preview_build(
        action=action, actor=actor, agent_session=agent_session, proposal=proposal, **_chain_fields(call)
    )
    existing = preview_insert_or_twin(preview)
    return _created(call, preview) if existing is None else _repeated(call, existing)


def proposal_submit(
    *,
    agent_session: AgentSession,
    action: Action,
    arguments: dict[str, Any],
    raw_arguments: str,
    call_id: str | None = None,
) -> ProposalOutcome:
    """An agent's tool call (REST or MCP), admitted as its session's person."""
    return proposal_admit(
        action=action,
        arguments=arguments,
        raw_arguments=raw_arguments,
        origin=PreviewOrigin.AGENT,
        actor=agent_session.user,
        agent_session=agent_session,
        call_id=call_id,
    )


def _apply_standing_grant(preview: Preview, action: Action) -> None:
    """An approval given in advance for exactly this preview counts as that role's approval, when its
    approver may approve this preview now (not its proposer, still a reviewer); else it stays unused."""
    if type(action).claim_standing_grant is Action.claim_standing_grant:
        return  # the action keeps no grants
    with transaction.atomic():  # a savepoint: a grant that may not count is given back
        grant = action.claim_standing_grant(preview)
        if grant is None:
            return
        if grant.role == ApprovalRole.STAFF and staff_right_error(preview, grant.approver, approving=True):
            transaction.set_rollback(True)
            return
        needs_passkey = step_up_needed(preview, grant.role)
        if needs_passkey:
            transaction.set_rollback(True)
        else:
            approval_add(
                preview, approver=grant.approver, role=grant.role, basis=grant.basis, event=AuditEvent.APPROVED
            )
    if needs_passkey:  # given in advance, it signed no digest: the preview waits for a passkey approval
        audit_record(
            event=AuditEvent.STANDING_APPROVAL_REFUSED,
            preview=preview,
            actor=grant.approver,
            result={
                "basis": grant.basis,
                "reason": "an approval at this amount needs a passkey (STEP_UP_THRESHOLDS); approve it in the console",
            },
        )


# Withdrawing ---------------------------------------------------------------------------------

WITHDRAWN_REASON = "The agent withdrew this proposal before it was decided."
AGENT_ROLE = "agent"  # who acts, in the metrics and the audit of a refused withdrawal


def _withdraw_refusal(preview: Preview) -> DecisionError:
    return DecisionError(
        f"This preview can no longer be withdrawn: its status is {preview.status} "
        f"({preview.get_status_display().lower()}). Only a preview waiting for the customer or staff can be.",
        code=ErrorCode.NOT_AWAITING_DECISION,
        status=str(preview.status),
    )


def preview_withdraw(*, agent_session: AgentSession, preview_id: Any, call_id: str | None = None) -> Preview:
    """The agent session takes back its own proposal that still waits for a decision (the customer's or
    staff's, also one the execution gate sent back to staff): it ends as `withdrawn`, nothing done, and
    the listeners hear of it (the agent's webhook, Slack, the reviewers' queue).

    Raises Preview.DoesNotExist for a preview this session did not propose (another session's, another
    person's, none: the same answer), DecisionError (`not_awaiting_decision` with its `status`, audited)
    for one that no longer waits, e.g. approved or declined. One withdrawn already is answered as it is.
    """
    error: DecisionError | None = None
    with audited_transaction():
        preview = preview_lock(preview_id, agent_session_id=agent_session.pk)
        if preview is None:
            raise Preview.DoesNotExist(f"No preview {preview_id} of agent session {agent_session.pk}")
        if preview.status == PreviewStatus.WITHDRAWN:
            return preview
        preview_expire_if_due(preview)
        previous = preview.status
        if previous in AWAITING_STATUSES:
            preview_end(preview, PreviewStatus.WITHDRAWN, code=ErrorCode.WITHDRAWN, reason=WITHDRAWN_REASON)
            audit_record(
                event=AuditEvent.WITHDRAWN,
                preview=preview,
                actor=agent_session.user,
                agent_session=agent_session,
                result=with_call_id({"previous_status": previous, "reason": WITHDRAWN_REASON}, call_id),
            )
            metrics.decision(preview, role=AGENT_ROLE, decision=AuditEvent.WITHDRAWN)
        else:
            error = _withdraw_refusal(preview)
            audit_record(
                event=AuditEvent.DECISION_REFUSED,
                preview=preview,
                actor=agent_session.user,
                agent_session=agent_session,
                result=with_call_id({"error": error.as_dict(), "role": AGENT_ROLE, "operation": "withdraw"}, call_id),
            )
            metrics.decision(preview, role=AGENT_ROLE, decision="refused", code=error.code)
    if error is not None:
        raise error
    return preview


# Idempotency ---------------------------------------------------------------------------------


class IdempotencyConflict(ApplicationError):
    code = ErrorCode.IDEMPOTENCY_KEY_REUSED


def idempotent_call(
    *,
    agent_session: AgentSession,
    key: str,
    fingerprint: str,
    run: Callable[[], tuple[int, dict[str, Any]]],
    action: str = "",
) -> tuple[int, dict[str, Any]]:
    """Run `run` once per (session, key); replay its stored answer for the same request.

    The key row is inserted first in the same transaction as the work, so a concurrent
    request with the same key waits on the unique index and then replays the answer.
    (Should that request roll back instead, this one's insert goes in and it does the work.)
    """
    with audited_transaction():
        record = IdempotencyRecord(
            agent_session=agent_session, key=key, request_fingerprint=fingerprint, response_status=0, response_body={}
        )
        if insert_rows([record], skip_conflicts=True):
            status, body = run()
            record.response_status, record.response_body = status, body
            update_fields(record, ["response_status", "response_body"])
            return status, body
        # The key is taken: by a committed request, or by one this insert waited for until it committed.
        taken = fetch_one(IdempotencyRecord, agent_session_id=agent_session.pk, key=key)
        assert taken is not None, "the insert skipped a conflict with this committed row"
        record = taken
    if record.request_fingerprint != fingerprint:
        raise IdempotencyConflict(
            "This Idempotency-Key was already used with a different request body; use a new key for a new request.",
        )
    status = 200 if record.response_status == 201 else record.response_status
    metrics.proposal_replayed(action, status)
    return status, record.response_body
