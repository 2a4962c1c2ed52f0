"""The staff console's views, by page: the queue and working it (`queue`), one preview and the decisions
on it (`preview`), the audit trail (`trail`), agent sessions (`sessions`); what they share (`common`)."""

from approvals.console.views.common import (
    auditor_required,
    reviewer_required,
    sessions_viewer_required,
)
from approvals.console.views.preview import (
    preview_approve_view,
    preview_counter_view,
    preview_detail,
    preview_document,
    preview_note_view,
    preview_reject_view,
    preview_retry_view,
    preview_status,
    reviewer_locale,
)
from approvals.console.views.queue import (
    bulk_decide,
    failures,
    preview_claim_view,
    queue,
)
from approvals.console.views.sessions import (
    agent_session_revoke,
    agent_sessions,
)
from approvals.console.views.trail import (
    audit_export,
    audit_log,
    event_log,
    preview_audit,
    preview_evidence_download,
    preview_receipt_download,
    subject_audit,
)

__all__ = [
    "agent_session_revoke",
    "agent_sessions",
    "audit_export",
    "audit_log",
    "auditor_required",
    "bulk_decide",
    "event_log",
    "failures",
    "preview_approve_view",
    "preview_audit",
    "preview_claim_view",
    "preview_counter_view",
    "preview_document",
    "preview_note_view",
    "preview_evidence_download",
    "preview_receipt_download",
    "preview_reject_view",
    "preview_retry_view",
    "preview_status",
    "preview_detail",
    "queue",
    "reviewer_locale",
    "reviewer_required",
    "sessions_viewer_required",
    "subject_audit",
]
