"""Write services of the approvals engine: agent sessions, proposals, approvals, execution, audit.

Each service owns its transaction. Rows are locked in one order everywhere: the preview, then
its subject (order or invoice), so that confirmations, decisions and workers cannot deadlock. Audit
records are plain inserts and lock nothing that another transaction waits for.
"""

from __future__ import annotations

import json
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from functools import cache
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from . import metrics, quorum
from .audit_log import canonical_bytes
from .digests import canonical_json, digest_of, sha256_hex
from .errors import ApplicationError, DecisionError, PolicyRefusal
from .limits import spend_limits_check
from .models import (
    AWAITING_STATUSES,
    OPEN_STATUSES,
    AgentSession,
    Approval,
    ApprovalRole,
    AuditEvent,
    AuditRecord,
    Execution,
    IdempotencyRecord,
    Preview,
    PreviewStatus,
)
from .registry import Action, Proposal, registry
from .rows import fetch_one, insert_rows, update_fields
from .transitions import preview_transitioned

logger = logging.getLogger(__name__)

TOKEN_PREFIX = "agt_"


# Audit ---------------------------------------------------------------------------------------


def _json_normalized(value: Any) -> Any:
    """The value as the JSON column will give it back (dates and decimals as text), checked to have one
    exact canonical encoding, so that the sealer can always hash the record as stored."""
    if value is None:
        return None
    normalized = json.loads(canonical_json(value))
    canonical_bytes(normalized)  # raises AuditEncodingError now rather than at sealing
    return normalized


def audit_record(
    *,
    event: AuditEvent,
    preview: Preview | None = None,
    actor: AbstractBaseUser | None = None,
    agent_session: AgentSession | None = None,
    action: str = "",
    subject_type: str = "",
    subject_id: str = "",
    raw_arguments: str = "",
    approval_basis: dict[str, Any] | None = None,
    result: dict[str, Any] | None = None,
) -> AuditRecord:
    """Append one record to the audit log: a plain INSERT in the caller's transaction, which commits or
    rolls back with it. No lock is shared with other transactions; the sealer (approvals.audit_seal)
    adds the record to the signed Merkle tree once it has committed."""
    if preview is not None:
        action = action or preview.action
        subject_type = subject_type or preview.subject_type
        subject_id = subject_id or preview.subject_id
    record = AuditRecord(
        event=event,
        preview=preview,
        actor=actor,
        agent_session=agent_session,
        action=action,
        subject_type=subject_type,
        subject_id=subject_id,
        raw_arguments=raw_arguments,
        approval_basis=_json_normalized(approval_basis),
        result=_json_normalized(result or {}),
    )
    record.save(force_insert=True)
    return record


def _audited_transaction(*, savepoint: bool = True) -> transaction.Atomic:
    """A service's transaction (its audit records are inserted in it like any other row)."""
    return transaction.atomic(savepoint=savepoint)


# Agent sessions ------------------------------------------------------------------------------


def agent_token_hash(token: str) -> str:
    return sha256_hex(token)


@transaction.atomic
def agent_session_create(
    *, user: AbstractBaseUser, tools: list[str], ttl_seconds: int | None = None, label: str = ""
) -> tuple[AgentSession, str]:
    """Mint a session for `user`. The token is returned once; only its hash is stored."""
    if not user.is_active:
        raise ApplicationError(f"User {user} is not active.", code="user_inactive")
    if not tools:
        raise ApplicationError("Name at least one tool.", code="no_tools")
    for name in tools:
        action = registry.action(name)
        if action is None:
            raise ApplicationError(f"Unknown tool {name!r}.", code="unknown_tool")
        if not action.may_use(user):
            raise ApplicationError(f"User {user} may not use the tool {name!r}.", code="tool_not_allowed")
    ttl = settings.AGENT_SESSION_DEFAULT_TTL_SECONDS if ttl_seconds is None else ttl_seconds
    if ttl <= 0:
        raise ApplicationError("The lifetime must be a positive number of seconds.", code="bad_ttl")
    # The person's row is locked so that concurrent mints are counted one after the other (NO KEY: their
    # proposals in flight, which hold key-share locks on it, need not be waited for).
    list(get_user_model().objects.select_for_update(no_key=True).filter(pk=user.pk).values_list("pk", flat=True))
    live = AgentSession.objects.filter(user=user, revoked_at__isnull=True, expires_at__gt=timezone.now()).count()
    limit = settings.AGENT_SESSIONS_PER_USER_MAX
    if live >= limit:
        raise ApplicationError(
            f"{user} already has {live} live agent sessions, the most allowed ({limit}); "
            "revoke one or let it expire first.",
            code="agent_session_limit",
            live_sessions=live,
            limit=limit,
        )
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    session = AgentSession.objects.create(
        token_hash=agent_token_hash(token),
        token_prefix=token[:12],
        user=user,
        tools=sorted(set(tools)),
        label=label,
        expires_at=timezone.now() + timedelta(seconds=ttl),
    )
    audit_record(
        event=AuditEvent.AGENT_SESSION_CREATED,
        actor=user,
        agent_session=session,
        result={"tools": session.tools, "expires_at": session.expires_at.isoformat()},
    )
    return session, token


def agent_sessions_revoke(
    *,
    session_id: int | None = None,
    token_prefix: str | None = None,
    username: str | None = None,
    revoked_by: AbstractBaseUser | None = None,
) -> int:
    """Revoke live agent sessions by id, by token prefix or by user; each revocation is audited.

    What a revoked session proposed and is not being executed yet ends with it: its open previews are
    superseded (failure code `agent_session_revoked`), each audited, so that no one confirms, approves
    or executes a proposal of an agent that was stopped.
    """
    # A plain FOR UPDATE (not NO KEY): it waits for proposals of these sessions still in flight (their
    # inserts hold a key-share lock on the session row), so their previews are found below.
    sessions = AgentSession.objects.select_for_update().filter(revoked_at__isnull=True)
    if session_id is not None:
        sessions = sessions.filter(pk=session_id)
    elif token_prefix:
        sessions = sessions.filter(token_prefix__startswith=token_prefix[:16])
    elif username:
        sessions = sessions.filter(user__username=username)
    else:
        return 0
    count = 0
    with _audited_transaction():
        for session in sessions.order_by("pk"):
            session.revoked_at = timezone.now()
            session.save(update_fields=["revoked_at"])
            superseded = _agent_session_previews_supersede(session)
            audit_record(
                event=AuditEvent.AGENT_SESSION_REVOKED,
                actor=revoked_by,
                agent_session=session,
                result={
                    "token_prefix": session.token_prefix,
                    "user": session.user_id,
                    "previews_superseded": [str(pk) for pk in superseded],
                },
            )
            count += 1
    return count


AGENT_SESSION_REVOKED_REASON = (
    "The agent session that proposed this was revoked, so the proposal was withdrawn before anything was done."
)


def _agent_session_previews_supersede(session: AgentSession) -> list[Any]:
    """Supersede the session's open previews whose execution has not begun (those are left to finish:
    the provider may already have been asked). Locks previews in primary-key order, like every path."""
    superseded = []
    candidates = Preview.objects.select_for_update().filter(agent_session=session, status__in=OPEN_STATUSES)
    from .executions import Outcome, execution_transition  # the executor builds on this module

    for preview in candidates.order_by("pk"):
        previous = preview.status
        if preview.status == PreviewStatus.APPROVED:
            execution = fetch_one(Execution, preview_id=preview.pk)
            if execution is None or execution.outcome != Outcome.PENDING:
                continue  # its execution began: the provider may already have been asked; it finishes
            execution_transition(
                execution,
                preview,
                Outcome.REFUSED_BEFORE_EFFECT,
                token=None,
                code="agent_session_revoked",
                detail=AGENT_SESSION_REVOKED_REASON,
            )
            superseded.append(preview.pk)
            continue
        _mark(preview, PreviewStatus.SUPERSEDED, code="agent_session_revoked", reason=AGENT_SESSION_REVOKED_REASON)
        audit_record(
            event=AuditEvent.SUPERSEDED,
            preview=preview,
            agent_session=session,
            result={
                "code": "agent_session_revoked",
                "previous_status": previous,
                "reason": AGENT_SESSION_REVOKED_REASON,
            },
        )
        superseded.append(preview.pk)
    return superseded


# Proposals -----------------------------------------------------------------------------------


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
        result=_with_call_id({"error": error}, call_id),
    )


def _with_call_id(result: dict[str, Any], call_id: str | None) -> dict[str, Any]:
    """The caller's own id for the call (`call_id`), kept in the audit record when it sent one."""
    return result if call_id is None else {**result, "call_id": call_id}


def _preview_digest(preview: Preview) -> str:
    return digest_of(
        {
            "id": str(preview.id),
            "action": preview.action,
            "actor": preview.actor_id,
            "subject_type": preview.subject_type,
            "subject_id": preview.subject_id,
            "subject_version": preview.subject_version,
            "payload": preview.payload,
            "amount_minor": preview.amount_minor,
            "currency": preview.currency,
            "required_approvals": preview.required_approvals,
            "expires_at": preview.expires_at.isoformat(),
            # Only when set, so that the digests of earlier previews stay what they were.
            **({"staff_approvals_needed": n} if (n := preview.staff_approvals_needed) != 1 else {}),
            **({"counter_author": preview.counter_author_id} if preview.counter_author_id else {}),
            **({"supersedes": str(preview.supersedes_id)} if preview.supersedes_id else {}),
        }
    )


def _proposal_key(action_name: str, actor_pk: Any, proposal: Any) -> str:
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


def _preview_insert_or_twin(preview: Preview) -> Preview | None:
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


def preview_build(
    *, action_name: str, actor: AbstractBaseUser, agent_session: AgentSession | None, proposal: Proposal, **extra: Any
) -> Preview:
    """The unsaved preview of an accepted proposal: its approvals (with the quorum), status, expiry and
    digest. `extra` carries fields of a particular origin (a counter-proposal's author)."""
    required, staff_needed = quorum.apply_quorum(
        action=action_name,
        currency=proposal.currency,
        amount_minor=proposal.amount_minor,
        required=proposal.required_approvals,
    )
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
        proposal_key=_proposal_key(action_name, actor.pk, proposal),
        required_approvals=required,
        staff_approvals_needed=staff_needed,
        status=_status_awaiting(required, approved_roles=set()),
        expires_at=timezone.now() + timedelta(seconds=_preview_ttl_seconds(required)),
        **extra,
    )
    preview.digest = _preview_digest(preview)
    return preview


@_audited_transaction(savepoint=False)  # within idempotent_call's transaction, no savepoint of its own
def proposal_submit(
    *,
    agent_session: AgentSession | None,
    action: Action,
    arguments: dict[str, Any],
    raw_arguments: str,
    actor: AbstractBaseUser | None = None,
    call_id: str | None = None,
) -> ProposalOutcome:
    """Check the proposal against trusted data and record an immutable preview, or refuse it.

    An agent proposes as its session's person. Without a session, staff propose for `actor` (a new
    refund after the bank failed one); the caller audits who they are, and `actor` still confirms."""
    actor = agent_session.user if agent_session is not None else actor
    try:
        proposal = action.propose(actor=actor, arguments=arguments)
    except PolicyRefusal as refusal:
        audit_record(
            event=AuditEvent.PROPOSAL_REFUSED,
            actor=actor,
            agent_session=agent_session,
            action=action.name,
            subject_id=str(arguments.get(action.subject_argument, ""))[:64],
            raw_arguments=raw_arguments,
            result=_with_call_id({"error": refusal.as_dict()}, call_id),
        )
        metrics.proposal_refused(action.name, refusal.code)
        return ProposalOutcome(kind="refused", refusal=refusal)

    proposal_key = _proposal_key(action.name, actor.pk, proposal)
    # Spending limits (approvals.limits), under row locks held until this transaction commits. The same
    # pending proposal again is answered with its preview below, which is counted already.
    over_limit = spend_limits_check(
        agent_session=agent_session,
        actor=actor,
        action=action,
        amount_minor=proposal.amount_minor,
        currency=proposal.currency,
    )
    if (
        over_limit is not None
        and not Preview.objects.filter(proposal_key=proposal_key, status__in=OPEN_STATUSES).exists()
    ):
        audit_record(
            event=AuditEvent.PROPOSAL_REFUSED,
            actor=actor,
            agent_session=agent_session,
            action=action.name,
            subject_type=proposal.subject_type,
            subject_id=proposal.subject_id,
            raw_arguments=raw_arguments,
            result={"error": over_limit.as_dict()},
        )
        metrics.proposal_refused(action.name, over_limit.code)
        return ProposalOutcome(kind="refused", refusal=over_limit)

    preview = preview_build(action_name=action.name, actor=actor, agent_session=agent_session, proposal=proposal)
    existing = _preview_insert_or_twin(preview)
    if existing is None:
        audit_record(
            event=AuditEvent.PROPOSED,
            preview=preview,
            actor=actor,
            agent_session=agent_session,
            raw_arguments=raw_arguments,
            result=_with_call_id({"status": preview.status, "digest": preview.digest}, call_id),
        )
        metrics.proposal_created(preview)
        preview_transitioned(preview, "")
        _apply_standing_grant(preview, action)
        return ProposalOutcome(kind="created", preview=preview)
    audit_record(
        event=AuditEvent.PROPOSAL_REPEATED,
        preview=existing,
        actor=actor,
        agent_session=agent_session,
        raw_arguments=raw_arguments,
        result=_with_call_id({"status": existing.status}, call_id),
    )
    metrics.proposal_repeated(existing)
    return ProposalOutcome(kind="repeated", preview=existing)


def _apply_standing_grant(preview: Preview, action: Action) -> None:
    """An approval given in advance for exactly this preview counts as that role's approval."""
    grant = action.claim_standing_grant(preview)
    if grant is not None:
        _approval_add(preview, approver=grant.approver, role=grant.role, basis=grant.basis, event=AuditEvent.APPROVED)


class IdempotencyConflict(ApplicationError):
    code = "idempotency_key_reused"


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
    with _audited_transaction():
        record = IdempotencyRecord(
            agent_session=agent_session, key=key, request_fingerprint=fingerprint, response_status=0, response_body={}
        )
        if insert_rows([record], skip_conflicts=True):
            status, body = run()
            record.response_status, record.response_body = status, body
            update_fields(record, ["response_status", "response_body"])
            return status, body
        # The key is taken: by a committed request, or by one this insert waited for until it committed.
        record = fetch_one(IdempotencyRecord, agent_session_id=agent_session.pk, key=key)
    if record.request_fingerprint != fingerprint:
        raise IdempotencyConflict(
            "This Idempotency-Key was already used with a different request body; use a new key for a new request.",
        )
    status = 200 if record.response_status == 201 else record.response_status
    metrics.proposal_replayed(action, status)
    return status, record.response_body


# Approvals -----------------------------------------------------------------------------------


def _status_awaiting(required: list[str], approved_roles: set[str]) -> PreviewStatus:
    for role in required:
        if role not in approved_roles:
            return PreviewStatus(f"awaiting_{role}")
    return PreviewStatus.APPROVED


def _mark(preview: Preview, status: PreviewStatus, *, code: str = "", reason: str = "") -> None:
    previous = preview.status
    preview.status = status
    preview.failure_code = code
    preview.failure_reason = reason
    update_fields(preview, ["status", "failure_code", "failure_reason", "status_changed_at"])
    preview_transitioned(preview, previous)


def preview_expire_if_due(preview: Preview, *, now: Any = None) -> bool:
    """Expire a preview still waiting for approval past its expiry. Call within a transaction."""
    now = now or timezone.now()
    if preview.status in AWAITING_STATUSES and preview.expires_at <= now:
        _mark(preview, PreviewStatus.EXPIRED, code="expired", reason="The preview expired before it was approved.")
        audit_record(event=AuditEvent.EXPIRED, preview=preview, result={"expires_at": preview.expires_at.isoformat()})
        return True
    return False


EXPIRE_BATCH_SIZE = 100


def previews_expire_stale(*, batch_size: int = EXPIRE_BATCH_SIZE) -> int:
    """Expire every preview whose approval window has passed (the periodic sweeper), a small batch per
    transaction, so that the previews are never held for the whole sweep."""
    count = 0
    while True:
        with _audited_transaction():
            now = timezone.now()
            stale = Preview.objects.select_for_update(skip_locked=True).filter(
                status__in=AWAITING_STATUSES, expires_at__lte=now
            )
            batch = list(stale.order_by("pk")[:batch_size])
            expired = sum(preview_expire_if_due(preview, now=now) for preview in batch)
        count += expired
        if len(batch) < batch_size:
            return count


def preview_refresh(*, preview: Preview) -> Preview:
    """Bring a preview read for display up to date (an expired approval window)."""
    if preview.status in AWAITING_STATUSES and preview.expires_at <= timezone.now():
        with transaction.atomic():
            locked = Preview.objects.select_for_update().get(pk=preview.pk)
            preview_expire_if_due(locked)
        preview.refresh_from_db()
    return preview


def _dispatch_execution(preview_id: str) -> bool:
    """Publish the execution task. A broker that is down must not undo or hide a recorded
    approval: the approved preview stays in the database and the sweeper dispatches it later."""
    from .tasks import execute_preview

    try:
        execute_preview.delay(preview_id)
    except Exception:  # noqa: BLE001 - any broker failure; the sweeper is the fallback
        logger.warning("Could not publish execution of preview %s; the sweeper will retry", preview_id, exc_info=True)
        return False
    return True


def _enqueue_execution(preview: Preview) -> None:
    preview_id = str(preview.pk)
    transaction.on_commit(lambda: _dispatch_execution(preview_id))


def _approval_add(preview: Preview, *, approver: AbstractBaseUser, role: str, basis: str, event: AuditEvent) -> None:
    """Record `approver`'s approval of the preview as it is now (its digest and subject version), move
    its status on, audit it, and publish its execution once no approval is missing."""
    insert_rows(
        [
            Approval(
                preview=preview,
                approver=approver,
                role=role,
                basis=basis,
                digest=preview.digest,
                subject_version=preview.subject_version,
            )
        ]
    )
    approved_roles = quorum.approved_roles(preview, role)
    previous = preview.status
    preview.status = _status_awaiting(preview.required_approvals, approved_roles)
    update_fields(preview, ["status", "status_changed_at"])
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
        },
        result={"status": preview.status, **_quorum_facts(preview, role)},
    )
    metrics.decision(preview, role=role, decision=event)
    if preview.status == PreviewStatus.APPROVED:
        _execution_open(preview)
        _enqueue_execution(preview)


def _quorum_facts(preview: Preview, role: str) -> dict[str, Any]:
    if role != ApprovalRole.STAFF or preview.staff_approvals_needed == 1:
        return {}
    have, need = quorum.progress(preview)
    return {"staff_approvals": have, "staff_approvals_needed": need}


def _execution_open(preview: Preview) -> None:
    """Every approved preview gets its execution, pending until a worker takes its lease."""
    deadline = timezone.now() + timedelta(seconds=settings.EXECUTION_DEADLINE_SECONDS)
    insert_rows([Execution(preview=preview, deadline=deadline)])


def preview_approve(
    *,
    preview_id: Any,
    approver: AbstractBaseUser,
    role: ApprovalRole,
    digest: str,
    basis: str = "",
) -> Preview:
    """Record `approver`'s yes to exactly the preview they saw (its digest).

    The customer role must be the preview's actor; the staff role must not be (four eyes).
    Raises Preview.DoesNotExist for a preview this person may not see, DecisionError otherwise.
    """
    error: DecisionError | None = None
    with _audited_transaction():
        # The customer may only confirm their own previews: someone else's is as if it did not exist.
        owner = {"actor_id": approver.pk} if role == ApprovalRole.CUSTOMER else {}
        preview = fetch_one(Preview, lock=True, id=preview_id, **owner)
        if preview is None:
            raise Preview.DoesNotExist(f"No preview {preview_id} for {approver}")
        error = _decision_error(preview, approver=approver, role=role, digest=digest)
        if error is None:
            action = registry.action(preview.action)
            subject = action.lock_subject(preview) if action else None
            if subject is None or action.subject_version(subject) != preview.subject_version:
                _mark(
                    preview,
                    PreviewStatus.SUPERSEDED,
                    code="subject_changed",
                    reason="The order or invoice changed after this preview was made.",
                )
                audit_record(event=AuditEvent.SUPERSEDED, preview=preview, actor=approver)
                error = DecisionError(
                    "This preview is out of date: what it is about changed since it was made. Ask for a new one.",
                    code="superseded",
                )
        if error is None:
            event = AuditEvent.CONFIRMED if role == ApprovalRole.CUSTOMER else AuditEvent.APPROVED
            _approval_add(preview, approver=approver, role=role, basis=basis, event=event)
        else:
            audit_record(
                event=AuditEvent.DECISION_REFUSED,
                preview=preview,
                actor=approver,
                result={"error": error.as_dict(), "role": role},
            )
            metrics.decision(preview, role=role, decision="refused", code=error.code)
    if error is not None:
        raise error
    return preview


def preview_decline(
    *, preview_id: Any, person: AbstractBaseUser, role: ApprovalRole, digest: str, note: str = ""
) -> Preview:
    """The customer declines, or staff reject, the preview they saw."""
    error: DecisionError | None = None
    with _audited_transaction():
        queryset = Preview.objects.select_for_update()
        if role == ApprovalRole.CUSTOMER:
            queryset = queryset.filter(actor=person)
        preview = queryset.get(pk=preview_id)
        error = _decision_error(preview, approver=person, role=role, digest=digest, approving=False)
        if error is None:
            if role == ApprovalRole.CUSTOMER:
                reason = f"The customer declined: {note}" if note else "The customer declined."
                _mark(preview, PreviewStatus.DECLINED, code="declined", reason=reason)
                event = AuditEvent.DECLINED
            else:
                _mark(preview, PreviewStatus.REJECTED, code="rejected", reason=note)
                event = AuditEvent.REJECTED
            audit_record(event=event, preview=preview, actor=person, result={"note": note, "digest": digest})
            metrics.decision(preview, role=role, decision=event)
        else:
            audit_record(
                event=AuditEvent.DECISION_REFUSED,
                preview=preview,
                actor=person,
                result={"error": error.as_dict(), "role": role},
            )
            metrics.decision(preview, role=role, decision="refused", code=error.code)
    if error is not None:
        raise error
    return preview


def _may_review(person: AbstractBaseUser, preview: Preview) -> bool:
    action = registry.action(preview.action)
    permission = action.review_permission if action else "approvals.review_preview"
    return bool(person.is_active and person.is_staff and person.has_perm(permission))


def _decision_error(
    preview: Preview, *, approver: AbstractBaseUser, role: ApprovalRole, digest: str, approving: bool = True
) -> DecisionError | None:
    """Why this person cannot decide this preview now, or None. May expire the preview."""
    if preview_expire_if_due(preview):
        return DecisionError("This preview expired before it was approved.", code="expired")
    if preview.status != f"awaiting_{role}":
        if preview.status in (PreviewStatus.APPROVED, PreviewStatus.EXECUTED) or (
            role == ApprovalRole.CUSTOMER and preview.status == PreviewStatus.AWAITING_STAFF
        ):
            return DecisionError("This preview was already approved.", code="already_decided")
        return DecisionError(
            f"This preview can no longer be decided: it is {preview.get_status_display().lower()}.",
            code="not_awaiting_decision",
        )
    if role == ApprovalRole.STAFF and preview.actor_id == approver.pk:
        return DecisionError(
            "You proposed this action yourself; another staff member must review it.",
            code="four_eyes",
        )
    if role == ApprovalRole.STAFF and not _may_review(approver, preview):
        return DecisionError("You may not review this kind of action.", code="not_a_reviewer")
    if approving and role == ApprovalRole.STAFF and preview.counter_author_id == approver.pk:
        return DecisionError(
            "You wrote this counter-proposal yourself; it counts as neither of the two eyes: "
            "another staff member must review it.",
            code="counter_author",
        )
    if approving and role == ApprovalRole.STAFF and preview.approvals.filter(role=role, approver=approver).exists():
        have, need = quorum.progress(preview)
        return DecisionError(
            f"You already approved this preview ({have} of {need}); it needs another staff member's approval.",
            code="already_approved_by_you",
        )
    if digest != preview.digest:
        return DecisionError(
            "What you saw is not what this preview says now. Review it again before deciding.",
            code="digest_mismatch",
        )
    return None


# Execution (approvals.executions runs it) ----------------------------------------------


@cache
def _approvals_sql() -> str:
    quote = connection.ops.quote_name
    column = Approval._meta.get_field("preview").column
    return f"SELECT * FROM {quote(Approval._meta.db_table)} WHERE {quote(column)} = %s"


def _approvals_of(preview: Preview) -> list[Approval]:
    """`list(preview.approvals.all())`, with its SQL built once: every execution reads them."""
    key = Preview._meta.pk.get_db_prep_value(preview.pk, connection)
    return list(Approval.objects.raw(_approvals_sql(), [key]))
