"""The staff console: thin views that check who is asking, parse forms and call selectors and services."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from csp.decorators import csp_replace, csp_update
from django.contrib import messages
from django.contrib.auth.views import redirect_to_login
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.clickjacking import xframe_options_sameorigin
from django.views.decorators.http import require_GET, require_POST

from ..errors import DecisionError
from ..executions import execution_retry
from ..models import ApprovalRole, Preview, PreviewStatus
from ..registry import registry
from ..services import agent_sessions_revoke, preview_approve, preview_decline, preview_refresh
from ..webhooks import webhook_deliveries_recent
from . import selectors
from .exports import audit_csv, audit_jsonl
from .forms import ApproveForm, AuditExportForm, QueueFilterForm, RejectForm

View = Callable[..., HttpResponse]


def _forbidden(request: HttpRequest) -> HttpResponse:
    return render(request, "console/forbidden.html", status=403)


def _guard(allowed: Callable[[Any], bool]) -> Callable[[View], View]:
    """Anonymous people go to the login page; anyone else without the permission gets a bare 403."""

    def decorator(view: View) -> View:
        @wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if not request.user.is_authenticated:
                return redirect_to_login(request.get_full_path())
            if not allowed(request.user):
                return _forbidden(request)
            return view(request, *args, **kwargs)

        return wrapper

    return decorator


reviewer_required = _guard(lambda user: selectors.console_access(user=user))
auditor_required = _guard(lambda user: selectors.may_export_audit(user=user))


def _preview_or_404(request: HttpRequest, preview_id: Any) -> Preview:
    try:
        return selectors.reviewable_preview(user=request.user, preview_id=preview_id)
    except Preview.DoesNotExist as missing:
        raise Http404("No such preview.") from missing


# The queue and failures ----------------------------------------------------------------------


@reviewer_required
@require_GET
def queue(request: HttpRequest) -> HttpResponse:
    data = request.GET.copy()
    data.setdefault("state", selectors.DEFAULT_QUEUE_STATE)
    form = QueueFilterForm(data, actions=selectors.reviewable_actions(user=request.user))
    review_queue = selectors.review_queue(user=request.user, filters=form.filters(), page_number=data.get("page"))
    return render(request, "console/queue.html", {"form": form, "queue": review_queue, "nav": "queue"})


@reviewer_required
@require_GET
def failures(request: HttpRequest) -> HttpResponse:
    page, rows = selectors.failed_executions(user=request.user, page_number=request.GET.get("page"))
    return render(request, "console/failures.html", {"page": page, "rows": rows, "nav": "failures"})


# One preview ---------------------------------------------------------------------------------


def _detail(request: HttpRequest, preview: Preview, *, status: int = 200, **extra: Any) -> HttpResponse:
    review = selectors.preview_review(preview=preview)
    context = {
        "review": review,
        "preview": preview,
        "can_decide": preview.status == PreviewStatus.AWAITING_STAFF,
        # Checked against the subject as it is now: meaningful while the preview may still run.
        "show_policy": preview.is_open or preview.status in (PreviewStatus.FAILED, PreviewStatus.NEEDS_ATTENTION),
        "own_proposal": preview.actor_id == request.user.pk,
        "attempts": selectors.preview_attempts(preview=preview),
        "approve_form": ApproveForm(initial={"digest": preview.digest}),
        "reject_form": RejectForm(initial={"digest": preview.digest}),
        "processing": preview.status == PreviewStatus.APPROVED,
        **extra,
    }
    return render(request, "console/detail.html", context, status=status)


@reviewer_required
@require_GET
@xframe_options_sameorigin
@csp_update({"style-src": ["'unsafe-inline'"], "img-src": ["data:"]})
@csp_replace({"frame-ancestors": ["'self'"], "sandbox": [True], "default-src": ["'none'"]})
def preview_document(request: HttpRequest, preview_id: Any, part: str) -> HttpResponse:
    """The document a reviewer approves (the email body or its attachment), for a sandboxed frame."""
    preview = _preview_or_404(request, preview_id)
    action = registry.action(preview.action)
    document = action.review_document(preview) if action else None
    if document is None or part not in ("body", "attachment"):
        raise Http404("No such document.")
    html = document.html if part == "body" else document.attachment_html
    return HttpResponse(html, content_type="text/html; charset=utf-8")


@reviewer_required
@require_GET
def preview_detail(request: HttpRequest, preview_id: Any) -> HttpResponse:
    preview = preview_refresh(preview=_preview_or_404(request, preview_id))
    return _detail(request, preview)


def _decide(
    request: HttpRequest, preview_id: Any, form: Any, decide: Callable[[dict[str, Any]], Any], done: str
) -> HttpResponse:
    preview = _preview_or_404(request, preview_id)
    if not form.is_valid():
        extra = {"reject_form": form} if isinstance(form, RejectForm) else {}
        return _detail(request, preview, status=400, error="The form was incomplete; nothing was decided.", **extra)
    try:
        decide(form.cleaned_data)
    except DecisionError as error:
        return _detail(
            request, _preview_or_404(request, preview_id), status=409, error=error.message, error_code=error.code
        )
    messages.success(request, done)
    return redirect("console:preview", preview_id=preview.pk)


@reviewer_required
@require_POST
def preview_approve_view(request: HttpRequest, preview_id: Any) -> HttpResponse:
    return _decide(
        request,
        preview_id,
        ApproveForm(request.POST),
        lambda data: preview_approve(
            preview_id=preview_id,
            approver=request.user,
            role=ApprovalRole.STAFF,
            digest=data["digest"],
            basis="staff console review",
        ),
        "You approved this preview. It is handed to the worker; the status below is the real one.",
    )


@reviewer_required
@require_POST
def preview_reject_view(request: HttpRequest, preview_id: Any) -> HttpResponse:
    return _decide(
        request,
        preview_id,
        RejectForm(request.POST),
        lambda data: preview_decline(
            preview_id=preview_id,
            person=request.user,
            role=ApprovalRole.STAFF,
            digest=data["digest"],
            note=data["note"],
        ),
        "You rejected this preview. Nothing will be done; the customer sees your note.",
    )


@reviewer_required
@require_POST
def preview_retry_view(request: HttpRequest, preview_id: Any) -> HttpResponse:
    preview = _preview_or_404(request, preview_id)
    try:
        nothing_happened = request.POST.get("verdict") == "nothing_happened"
        execution_retry(preview_id=preview.pk, staff=request.user, nothing_happened=nothing_happened)
    except DecisionError as error:
        return _detail(
            request, _preview_or_404(request, preview_id), status=409, error=error.message, error_code=error.code
        )
    messages.success(
        request, "Handed to the worker with the same preview and idempotency key; the status below is the real one."
    )
    return redirect("console:preview", preview_id=preview.pk)


# Audit trail ---------------------------------------------------------------------------------


@reviewer_required
@require_GET
def preview_audit(request: HttpRequest, preview_id: Any) -> HttpResponse:
    preview = _preview_or_404(request, preview_id)
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
def subject_audit(request: HttpRequest, subject_type: str) -> HttpResponse:
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
def audit_log(request: HttpRequest) -> HttpResponse:
    return render(
        request,
        "console/audit.html",
        {
            "form": AuditExportForm(initial=AuditExportForm.initial_range()),
            "nav": "audit",
        },
    )


@auditor_required
@require_GET
def audit_export(request: HttpRequest) -> HttpResponse:
    form = AuditExportForm(request.GET)
    if not form.is_valid():
        return render(request, "console/audit.html", {"form": form, "nav": "audit"}, status=400)
    start, end, kind = form.cleaned_data["start"], form.cleaned_data["end"], form.cleaned_data["format"]
    rows = selectors.audit_export_rows(start=start, end=end)
    if kind == "csv":
        response = StreamingHttpResponse(audit_csv(rows), content_type="text/csv; charset=utf-8")
    else:
        response = StreamingHttpResponse(audit_jsonl(rows), content_type="application/x-ndjson; charset=utf-8")
    name = f"audit-{start:%Y%m%dT%H%M}-{end:%Y%m%dT%H%M}.{kind}"
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response


# Agent sessions ------------------------------------------------------------------------------


@reviewer_required
@require_GET
def agent_sessions(request: HttpRequest) -> HttpResponse:
    sessions = selectors.live_agent_sessions()
    return render(request, "console/agent_sessions.html", {
        "sessions": sessions, "nav": "sessions", "webhook_deliveries": webhook_deliveries_recent(),
    })


@reviewer_required
@require_POST
def agent_session_revoke(request: HttpRequest, session_id: int) -> HttpResponse:
    session = selectors.live_agent_sessions().filter(pk=session_id).first()
    if session is None:
        messages.info(request, "That agent session had already expired or been revoked.")
    else:
        # By id: a 12-character prefix is not unique, and would revoke every session that shares it.
        agent_sessions_revoke(session_id=session.pk, revoked_by=request.user)
        messages.success(request, f"Revoked the agent session {session.token_prefix}… of {session.user}.")
    return redirect("console:agent_sessions")
