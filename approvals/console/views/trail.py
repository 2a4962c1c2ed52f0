"""The audit trail: of a preview, of a subject, and the export."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import Http404, HttpResponse, JsonResponse, StreamingHttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from approvals.audit.evidence import EvidenceNotSealed, evidence_bundle
from approvals.audit.seal import audit_seal, preview_receipt
from approvals.console import selectors
from approvals.console.exports import audit_csv, audit_jsonl
from approvals.console.forms import (
    AuditExportForm,
    EventLogForm,
)
from approvals.console.views.common import (
    auditor_required,
    preview_or_404,
    reviewer_required,
)
from approvals.core.registry import registry
from approvals.core.types import AuthenticatedHttpRequest

# Audit trail ---------------------------------------------------------------------------------


@reviewer_required
@require_GET
def preview_audit(request: AuthenticatedHttpRequest, preview_id: Any) -> HttpResponse:
    preview = preview_or_404(request, preview_id)
    return render(
        request,
        "console/timeline.html",
        {
            "title": f"Audit trail of {selectors.preview_review(preview=preview).summary}",
            "preview": preview,
            "records": selectors.preview_timeline(preview=preview),
        },
    )


@reviewer_required
@require_GET
def preview_receipt_download(request: AuthenticatedHttpRequest, preview_id: Any) -> HttpResponse:
    """The preview's audit receipt as a file, to hand to the customer or a card network."""
    preview = preview_or_404(request, preview_id)
    if settings.CELERY_TASK_ALWAYS_EAGER:
        audit_seal()  # the embedded setup runs no sealer process
    response = JsonResponse(preview_receipt(preview), json_dumps_params={"indent": 2})
    response["Content-Disposition"] = f'attachment; filename="audit-receipt-{preview.pk}.json"'
    return response


@reviewer_required
@require_GET
def preview_evidence_download(request: AuthenticatedHttpRequest, preview_id: Any) -> HttpResponse:
    """The preview's evidence bundle (a zip) for a dispute: whoever may see its receipt may take it."""
    preview = preview_or_404(request, preview_id)
    if settings.CELERY_TASK_ALWAYS_EAGER:
        audit_seal()  # the embedded setup runs no sealer process
    try:
        bundle = evidence_bundle(preview)
    except EvidenceNotSealed as waiting:
        response = HttpResponse(str(waiting), status=503, content_type="text/plain; charset=utf-8")
        response["Retry-After"] = "1"
        return response
    response = HttpResponse(bundle.content, content_type="application/zip")
    response["Content-Disposition"] = f'attachment; filename="{bundle.filename}"'
    return response


@reviewer_required
@require_GET
def subject_audit(request: AuthenticatedHttpRequest, subject_type: str) -> HttpResponse:
    subject_id = request.GET.get("id", "")
    if not subject_id:
        raise Http404("Name the subject with ?id=.")
    records = list(selectors.subject_timeline(user=request.user, subject_type=subject_type, subject_id=subject_id))
    if not records:
        raise Http404("No audit records for this subject.")
    return render(
        request,
        "console/timeline.html",
        {
            "title": f"Audit trail of {subject_type} {subject_id}",
            "subject_type": subject_type,
            "subject_id": subject_id,
            "records": records,
        },
    )


@auditor_required
@require_GET
def event_log(request: AuthenticatedHttpRequest) -> HttpResponse:
    """The audit log to read in the browser: filtered, newest first, a page at a time."""
    everything = selectors.is_auditor(user=request.user)
    actions = sorted(registry.actions) if everything else selectors.reviewable_actions(user=request.user)
    form = EventLogForm(request.GET, actions=actions)
    if not form.is_valid():
        context = {"form": form, "page": None, "nav": "events", "everything": everything}
        return render(request, "console/events.html", context, status=400)
    data = form.cleaned_data
    filters = selectors.EventFilters(
        action=data["action"],
        event=data["event"],
        preview_id=data["preview"],
        actor=data["actor"],
        start=data["start"],
        end=data["end"],
    )
    page = selectors.event_log(user=request.user, filters=filters, before=data["before"])
    query = request.GET.copy()
    query.pop("before", None)
    older = None
    if page.older_than is not None:
        query["before"] = str(page.older_than)
        older = query.urlencode()
    return render(
        request,
        "console/events.html",
        {
            "form": form,
            "page": page,
            "older_query": older,
            "nav": "events",
            "everything": everything,
            "filtered": any(request.GET.get(name) for name in form.fields if name != "before"),
            "paged": data["before"] is not None,
        },
    )


@auditor_required
@require_GET
def audit_log(request: AuthenticatedHttpRequest) -> HttpResponse:
    return render(
        request,
        "console/audit.html",
        {
            "form": AuditExportForm(initial=AuditExportForm.initial_range()),
            "nav": "audit",
            "everything": selectors.is_auditor(user=request.user),
        },
    )


@auditor_required
@require_GET
def audit_export(request: AuthenticatedHttpRequest) -> HttpResponse | StreamingHttpResponse:
    form = AuditExportForm(request.GET)
    if not form.is_valid():
        everything = selectors.is_auditor(user=request.user)
        return render(
            request, "console/audit.html", {"form": form, "nav": "audit", "everything": everything}, status=400
        )
    start, end, kind = form.cleaned_data["start"], form.cleaned_data["end"], form.cleaned_data["format"]
    rows = selectors.audit_export_rows(user=request.user, start=start, end=end)
    if kind == "csv":
        response = StreamingHttpResponse(audit_csv(rows), content_type="text/csv; charset=utf-8")
    else:
        response = StreamingHttpResponse(audit_jsonl(rows), content_type="application/x-ndjson; charset=utf-8")
    name = f"audit-{start:%Y%m%dT%H%M}-{end:%Y%m%dT%H%M}.{kind}"
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response
