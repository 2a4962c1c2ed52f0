"""The audit log's write side: one plain INSERT per record, in the caller's transaction.

No lock is shared with other transactions; the sealer (approvals.audit.seal) adds a record to the
signed Merkle tree once it has committed.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from django.db import transaction

from approvals.core.digests import canonical_bytes, canonical_json
from approvals.core.errors import ApplicationError
from approvals.core.rows import insert_rows
from approvals.models import AgentSession, AuditEvent, AuditRecord, Preview
from approvals.operations import metrics

if TYPE_CHECKING:
    from django.contrib.auth.models import User


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
    event: AuditEvent | str,
    preview: Preview | None = None,
    actor: User | None = None,
    agent_session: AgentSession | None = None,
    action: str = "",
    subject_type: str = "",
    subject_id: str = "",
    raw_arguments: str = "",
    approval_basis: dict[str, Any] | None = None,
    result: dict[str, Any] | None = None,
) -> AuditRecord:
    """Append one record to the audit log: a plain INSERT in the caller's transaction, which commits or
    rolls back with it."""
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
    insert_rows([record])
    return record


def audited_transaction(*, savepoint: bool = True) -> transaction.Atomic:
    """A service's transaction (its audit records are inserted in it like any other row)."""
    return transaction.atomic(savepoint=savepoint)


def with_call_id(result: dict[str, Any], call_id: str | None) -> dict[str, Any]:
    """The caller's own id for the call (`call_id`), kept in the audit record when it sent one."""
    return result if call_id is None else {**result, "call_id": call_id}


def audit_decision_refused(
    preview: Preview, person: User, error: ApplicationError, *, role: str = "", **facts: Any
) -> AuditRecord:
    """The one record of a refused decision (an approval, a rejection, a counter-proposal, a retry), with
    the refusal's code and numbers and what was asked (`facts`: the operation, the counter-proposal's
    changes)."""
    metrics.decision(preview, role=role or "staff", decision="refused", code=error.code)
    return audit_record(
        event=AuditEvent.DECISION_REFUSED,
        preview=preview,
        actor=person,
        result={"error": error.as_dict(), **({"role": role} if role else {}), **facts},
    )
