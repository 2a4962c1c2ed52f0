"""Opening an approved preview's execution and publishing attempts at it."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from approvals.core.errors import ErrorCode
from approvals.core.locks import (
    execution_row_lock,
)
from approvals.core.rows import insert_rows, update_fields
from approvals.core.services.execution.state import (
    Outcome,
    execution_transition,
)
from approvals.core.services.previews import preview_mark
from approvals.models import (
    Execution,
    Preview,
    PreviewStatus,
)
from approvals.operations.publish import EXECUTE_PREVIEW, task_publish

logger = logging.getLogger(__name__)

# Opening and publishing --------------------------------------------------------------------------


def execution_open(preview: Preview) -> None:
    """Every approved preview gets its execution, pending until a worker takes its lease. One that waited
    for an approval again (an approval lapsed) is pending again, with a new deadline."""
    deadline = timezone.now() + timedelta(seconds=settings.EXECUTION_DEADLINE_SECONDS)
    if insert_rows([Execution(preview=preview, deadline=deadline)], skip_conflicts=True):
        return
    execution = execution_row_lock(preview)
    assert execution is not None, "the insert skipped a conflict with this preview's execution"
    execution.deadline = deadline
    update_fields(execution, ["deadline", "updated_at"])
    preview.failure_code, preview.failure_reason = "", ""  # the lapse it waited after is mended
    update_fields(preview, ["failure_code", "failure_reason"])
    execution_transition(execution, preview, Outcome.PENDING, token=None, facts={"approved_again": True})


def preview_end(preview: Preview, status: PreviewStatus, *, code: str, reason: str) -> None:
    """End a locked preview that waits for a decision (declined, rejected, expired, superseded, withdrawn)
    with its code and reason. One that the gate sent back to staff (an approval lapsed) has an execution
    waiting for an approval again: it ends too, before any effect, so that nothing is left to start. Only
    such a preview (`approval_lapsed`) has one, so no other preview reads its execution."""
    if preview.failure_code == ErrorCode.APPROVAL_LAPSED:
        execution = execution_row_lock(preview)
        if execution is not None and execution.outcome == Outcome.AWAITING_APPROVAL:
            execution_transition(
                execution, preview, Outcome.REFUSED_BEFORE_EFFECT, token=None, code=code, detail=reason
            )
            assert preview.status == status, f"{code} ends a waiting execution as {preview.status}, not {status}"
            return
    preview_mark(preview, status, code=code, reason=reason)


def execution_dispatch(preview_id: Any) -> bool:
    """Publish an attempt at the preview's execution. A broker that is down must not undo or hide a
    recorded approval: the approved preview stays in the database and the sweeper dispatches it later."""
    try:
        task_publish(EXECUTE_PREVIEW, str(preview_id))
    except Exception:  # noqa: BLE001 - any broker failure; the sweeper is the fallback
        logger.warning("Could not publish execution of preview %s; the sweeper will retry", preview_id, exc_info=True)
        return False
    return True


def execution_enqueue(preview: Preview) -> None:
    """Publish the preview's execution once the transaction that approved it commits."""
    preview_id = str(preview.pk)
    transaction.on_commit(lambda: execution_dispatch(preview_id))
