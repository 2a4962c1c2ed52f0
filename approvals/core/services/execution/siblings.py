"""Superseding the other open previews on a subject once an action on it completed."""

from __future__ import annotations

from typing import Any

from approvals.core.errors import (
    ErrorCode,
)
from approvals.core.locks import (
    executions_lock,
    sibling_previews_lock,
)
from approvals.core.registry import Action
from approvals.core.rows import update_fields
from approvals.core.services.audit import audit_record
from approvals.core.services.execution.state import (
    Outcome,
    execution_transition,
)
from approvals.core.transitions import preview_transitioned
from approvals.models import (
    AuditEvent,
    Preview,
    PreviewStatus,
)

# Siblings ------------------------------------------------------------------------------------


def supersede_siblings(preview: Preview, action: Action, subject: Any) -> None:
    """Open previews on the same subject were made against a version that no longer exists.

    Siblings locked by another transaction are skipped (locks.sibling_previews_lock says why); an
    approved sibling whose execution started is left to finish: its money may be out already.
    """
    sibling_ids = sibling_previews_lock(preview, new_version=action.subject_version(subject))
    if not sibling_ids:  # the usual case: one statement, its SQL built once per process
        return
    reason = f"Another action on {preview.subject_id} was completed first; a new preview is needed."
    executions = executions_lock(sibling_ids)
    for sibling in Preview.objects.filter(pk__in=sibling_ids).order_by("pk"):  # locked by us already
        execution = executions.get(sibling.pk)
        if execution is not None:
            execution_transition(
                execution,
                sibling,
                Outcome.REFUSED_BEFORE_EFFECT,
                token=None,
                code=ErrorCode.SUBJECT_CHANGED,
                detail=reason,
                facts={"by_preview": str(preview.pk)},
            )
            continue
        previous_status = sibling.status
        sibling.status, sibling.failure_code = PreviewStatus.SUPERSEDED, ErrorCode.SUBJECT_CHANGED
        sibling.failure_reason = reason
        update_fields(sibling, ["status", "failure_code", "failure_reason", "status_changed_at"])
        preview_transitioned(sibling, previous_status)
        audit_record(event=AuditEvent.SUPERSEDED, preview=sibling, result={"by_preview": str(preview.pk)})
