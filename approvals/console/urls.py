from django.urls import path

from approvals.console import slack_views, views

app_name = "console"

urlpatterns = [
    path("", views.queue, name="queue"),
    path("failures/", views.failures, name="failures"),
    path("bulk", views.bulk_decide, name="bulk"),
    path("previews/<uuid:preview_id>/", views.preview_detail, name="preview"),
    path("previews/<uuid:preview_id>/document/<slug:part>", views.preview_document, name="document"),
    path("previews/<uuid:preview_id>/approve", views.preview_approve_view, name="approve"),
    path("previews/<uuid:preview_id>/reject", views.preview_reject_view, name="reject"),
    path("previews/<uuid:preview_id>/retry", views.preview_retry_view, name="retry"),
    path("previews/<uuid:preview_id>/claim", views.preview_claim_view, name="claim"),
    path("previews/<uuid:preview_id>/status", views.preview_status, name="preview_status"),
    path("previews/<uuid:preview_id>/counter", views.preview_counter_view, name="counter"),
    path("previews/<uuid:preview_id>/notes", views.preview_note_view, name="note"),
    path("previews/<uuid:preview_id>/audit/", views.preview_audit, name="preview_audit"),
    path("previews/<uuid:preview_id>/receipt", views.preview_receipt_download, name="preview_receipt"),
    path("previews/<uuid:preview_id>/evidence", views.preview_evidence_download, name="preview_evidence"),
    # The subject's id is a query parameter (`?id=`): an order number may hold `/`, `%` or `?`, which no
    # path segment carries through every proxy and browser unchanged.
    path("subjects/<slug:subject_type>/audit/", views.subject_audit, name="subject_audit"),
    path("agent-sessions/", views.agent_sessions, name="agent_sessions"),
    path("agent-sessions/<int:session_id>/revoke", views.agent_session_revoke, name="agent_session_revoke"),
    path("events/", views.event_log, name="events"),
    path("audit/", views.audit_log, name="audit"),
    path("audit/export", views.audit_export, name="audit_export"),
    path("slack/", slack_views.slack_link, name="slack_link"),
]
