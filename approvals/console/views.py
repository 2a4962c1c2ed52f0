"""The staff console: thin views that check who is asking, parse forms and call selectors and services."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from babel import Locale
from csp.decorators import csp_replace, csp_update
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.views import redirect_to_login
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import translation
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.clickjacking import xframe_options_sameorigin
from django.views.decorators.http import require_GET, require_POST

from approvals.audit.seal import audit_seal, preview_receipt
from approvals.console import selectors
from approvals.console.exports import audit_csv, audit_jsonl
from approvals.console.forms import (
    ApproveForm,
    AuditExportForm,
    BulkDecisionForm,
    ClaimForm,
    CounterProposalForm,
    QueueFilterForm,
    RejectForm,
)
from approvals.console.review_work import preview_claim, preview_release, previews_decide_many
from approvals.core.counter import preview_counter_propose
from approvals.core.digests import digest_of
from approvals.core.errors import DecisionError, ErrorCode, PolicyRefusal
from approvals.core.money import DISPLAY_LOCALE, amounts_typed_in
from approvals.core.presentation import customer_note, preview_execution, preview_state_key
from approvals.core.registry import registry
from approvals.core.services import (
    agent_sessions_revoke,
    execution_retry,
    preview_approve,
    preview_decline,
    preview_refresh,
)
from approvals.core.types import AuthenticatedHttpRequest
from approvals.core.words import customer_wrote
from approvals.models import ApprovalRole, Preview, PreviewOrigin, PreviewStatus

View = Callable[..., HttpResponseBase]


def _forbidden(request: HttpRequest) -> HttpResponse:
    return render(request, "console/forbidden.html", status=403)


def _guard(allowed: Callable[[Any], bool]) -> Callable[[View], View]:
    """Anonymous people go to the login page; anyone else without the permission gets a bare 403."""

    def decorator(view: View) -> View:
        @wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            if not request.user.is_authenticated:
                return redirect_to_login(request.get_full_path())
            if not allowed(request.user):
                return _forbidden(request)
            return view(request, *args, **kwargs)

        return wrapper

    return decorator


reviewer_required = _guard(lambda user: selectors.console_access(user=user))
auditor_required = _guard(lambda user: selectors.may_export_audit(user=user))
sessions_viewer_required = _guard(lambda user: selectors.may_see_agent_sessions(user=user))


def _preview_or_404(request: AuthenticatedHttpRequest, preview_id: Any) -> Preview:
    try:
        return selectors.reviewable_preview(user=request.user, preview_id=preview_id)
    except Preview.DoesNotExist as missing:
        raise Http404("No such preview.") from missing


# The queue and failures ----------------------------------------------------------------------


@reviewer_required
@require_GET
def queue(request: AuthenticatedHttpRequest) -> HttpResponse:
    data = request.GET.copy()
    data.setdefault("state", selectors.DEFAULT_QUEUE_STATE)
    form = QueueFilterForm(data, actions=selectors.reviewable_actions(user=request.user))
    review_queue = selectors.review_queue(user=request.user, filters=form.filters(), page_number=data.get("page"))
    return render(request, "console/queue.html", {"form": form, "queue": review_queue, "nav": "queue"})


@reviewer_required
@require_GET
def failures(request: AuthenticatedHttpRequest) -> HttpResponse:
    page, rows = selectors.failed_executions(user=request.user, page_number=request.GET.get("page"))
    return render(request, "console/failures.html", {"page": page, "rows": rows, "nav": "failures"})


# One preview ---------------------------------------------------------------------------------


def _detail(request: AuthenticatedHttpRequest, preview: Preview, *, status: int = 200, **extra: Any) -> HttpResponse:
    review = selectors.preview_review(preview=preview)
    can_decide = preview.status == PreviewStatus.AWAITING_STAFF
    context = {
        "review": review,
        "preview": preview,
        "can_decide": can_decide,
        "i_approved": can_decide and preview.approvals.filter(role=ApprovalRole.STAFF, approver=request.user).exists(),
        "my_counter": can_decide
        and preview.origin == PreviewOrigin.COUNTER_PROPOSAL
        and preview.proposed_by_id == request.user.pk,
        "counter_form": extra.pop("counter_form", None)
        or CounterProposalForm(initial={"digest": preview.digest}, counter_fields=review.counter_fields),
        "reviewers": selectors.assignable_reviewers(preview=preview) if can_decide else [],
        # Checked against the subject as it is now: meaningful while the preview may still run.
        "show_policy": preview.is_open or preview.status in (PreviewStatus.FAILED, PreviewStatus.NEEDS_ATTENTION),
        "own_proposal": preview.actor_id == request.user.pk,
        "attempts": selectors.preview_attempts(preview=preview),
        "approve_form": ApproveForm(initial={"digest": preview.digest}),
        "reject_form": RejectForm(initial={"digest": preview.digest}),
        "processing": preview.status == PreviewStatus.APPROVED,
        "state_key": preview_state_key(preview, review.execution),
        "customer_note": customer_wrote(note) if (note := customer_note(preview)) else "",
        **extra,
    }
    return render(request, "console/detail.html", context, status=status)


@reviewer_required
@require_GET
@xframe_options_sameorigin
@csp_update({"style-src": ["'unsafe-inline'"], "img-src": ["data:"]})
@csp_replace(  # type: ignore[arg-type]  # django-csp types a view as taking the request alone
    {"frame-ancestors": ["'self'"], "sandbox": [True], "default-src": ["'none'"]}
)
def preview_document(request: AuthenticatedHttpRequest, preview_id: Any, part: str) -> HttpResponse:
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
def preview_detail(request: AuthenticatedHttpRequest, preview_id: Any) -> HttpResponse:
    preview = preview_refresh(preview=_preview_or_404(request, preview_id))
    return _detail(request, preview)


def _decide(
    request: AuthenticatedHttpRequest, preview_id: Any, form: Any, decide: Callable[[dict[str, Any]], Any], done: str
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
    if request.POST.get("then") == "next":
        following = selectors.next_to_review(user=request.user, after=preview)
        if following is not None:
            return redirect("console:preview", preview_id=following.pk)
        messages.info(request, "Nothing else waits for you in the queue.")
        return redirect("console:queue")
    return redirect("console:preview", preview_id=preview.pk)


@reviewer_required
@require_GET
def preview_status(request: AuthenticatedHttpRequest, preview_id: Any) -> JsonResponse:
    """The preview's state for the page's polling script (static/js/status.js)."""
    preview = preview_refresh(preview=_preview_or_404(request, preview_id))
    execution = preview_execution(preview)
    response = JsonResponse(
        {
            "status": preview.status,
            "state": preview_state_key(preview, execution),
            "outcome": execution.outcome if execution else None,
            "waiting": preview.status == PreviewStatus.APPROVED,
        }
    )
    response["Cache-Control"] = "no-store"
    return response


@reviewer_required
@require_POST
def preview_approve_view(request: AuthenticatedHttpRequest, preview_id: Any) -> HttpResponse:
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
def preview_reject_view(request: AuthenticatedHttpRequest, preview_id: Any) -> HttpResponse:
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
def preview_retry_view(request: AuthenticatedHttpRequest, preview_id: Any) -> HttpResponse:
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
def preview_audit(request: AuthenticatedHttpRequest, preview_id: Any) -> HttpResponse:
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
def preview_receipt_download(request: AuthenticatedHttpRequest, preview_id: Any) -> HttpResponse:
    """The preview's audit receipt as a file, to hand to the customer or a card network."""
    preview = _preview_or_404(request, preview_id)
    if settings.CELERY_TASK_ALWAYS_EAGER:
        audit_seal()  # the embedded setup runs no sealer process
    response = JsonResponse(preview_receipt(preview), json_dumps_params={"indent": 2})
    response["Content-Disposition"] = f'attachment; filename="audit-receipt-{preview.pk}.json"'
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


# Agent sessions ------------------------------------------------------------------------------


@sessions_viewer_required
@require_GET
def agent_sessions(request: AuthenticatedHttpRequest) -> HttpResponse:
    """The live sessions this staff member oversees (selectors.agent_sessions_in_scope), each marked
    with whether they may revoke it (a staff member's session: the auditor only)."""
    sessions = [
        (session, selectors.may_revoke_agent_session(user=request.user, session=session))
        for session in selectors.agent_sessions_in_scope(user=request.user)
    ]
    return render(
        request,
        "console/agent_sessions.html",
        {
            "sessions": sessions,
            "nav": "sessions",
            "everything": selectors.is_auditor(user=request.user),
            "webhook_deliveries": selectors.webhook_deliveries_in_scope(user=request.user),
        },
    )


@sessions_viewer_required
@require_POST
def agent_session_revoke(request: AuthenticatedHttpRequest, session_id: int) -> HttpResponse:
    # Out of scope is answered like missing: the page does not tell which sessions exist elsewhere.
    session = selectors.agent_sessions_in_scope(user=request.user).filter(pk=session_id).first()
    if session is None:
        messages.info(request, "That agent session had already expired or been revoked.")
    elif not selectors.may_revoke_agent_session(user=request.user, session=session):
        return _forbidden(request)
    else:
        # By id: a 12-character prefix is not unique, and would revoke every session that shares it.
        agent_sessions_revoke(session_id=session.pk, revoked_by=request.user)
        messages.success(request, f"Revoked the agent session {session.token_prefix}… of {session.user}.")
    return redirect("console:agent_sessions")


# Working the queue quickly -------------------------------------------------------------------------


def _back(request: HttpRequest) -> str:
    """Where the queue page was (its filters), never anywhere outside the console."""
    target = request.POST.get("back", "")
    queue = reverse("console:queue")
    if target.startswith(queue) and url_has_allowed_host_and_scheme(target, allowed_hosts=None):
        return target
    return queue


@reviewer_required
@require_POST
def bulk_decide(request: AuthenticatedHttpRequest) -> HttpResponse:
    """Bulk approve or reject: a confirmation page first, then each preview decided on its own."""
    form = BulkDecisionForm(request.POST)
    if not form.is_valid():
        for error in form.non_field_errors() + form["note"].errors:
            messages.error(request, str(error))
        return redirect(_back(request))
    allowed = selectors.reviewable_previews(user=request.user)
    decision, note = form.cleaned_data["decision"], form.cleaned_data["note"]
    if not form.cleaned_data["confirmed"]:
        shown = allowed.filter(pk__in=[i.preview_id for i in form.items]).select_related("actor")
        previews = {str(p.pk): p for p in shown}
        rows = [
            (item, selectors.queue_rows([previews[item.preview_id]])[0] if item.preview_id in previews else None)
            for item in form.items
        ]
        return render(
            request,
            "console/bulk_confirm.html",
            {
                "rows": rows,
                "decision": decision,
                "note": note,
                "nav": "queue",
                "back": _back(request),
            },
        )
    results = previews_decide_many(
        reviewer=request.user, items=form.items, decision=decision, note=note, allowed=allowed
    )
    done = [r for r in results if r.ok]
    verb = "approved" if decision == "approve" else "rejected"
    if done:
        plural = "s" if len(done) != 1 else ""
        messages.success(request, f"You {verb} {len(done)} preview{plural}; each is recorded on its own.")
    summaries = {
        str(p.pk): selectors.queue_rows([p])[0].summary
        for p in allowed.filter(pk__in=[r.preview_id for r in results if not r.ok]).select_related("actor")
    }
    for result in results:
        if not result.ok:
            summary = summaries.get(result.preview_id, result.preview_id)
            messages.error(request, f"Not {verb}: {summary}. {result.message}")
    return redirect(_back(request))


@reviewer_required
@require_POST
def preview_claim_view(request: AuthenticatedHttpRequest, preview_id: Any) -> HttpResponse:
    preview = _preview_or_404(request, preview_id)
    form = ClaimForm(request.POST)
    if not form.is_valid():
        return _detail(request, preview, status=400, error="The form was incomplete; nothing changed.")
    operation = form.cleaned_data["operation"]
    try:
        if operation == "release":
            preview_release(preview=preview, reviewer=request.user)
            messages.success(request, "You gave the preview back to the queue.")
        elif operation == "assign":
            assignee = selectors.assignable_reviewers(preview=preview).filter(pk=form.cleaned_data["assignee"]).first()
            if assignee is None:
                return _detail(request, preview, status=400, error="Choose a reviewer who may decide this preview.")
            preview_claim(preview=preview, reviewer=assignee, by=request.user)
            messages.success(request, f"Assigned to {assignee.get_username()}.")
        else:
            preview_claim(preview=preview, reviewer=request.user, take_over=operation == "take_over")
            messages.success(request, "You are working on this preview; others see it as yours.")
    except DecisionError as error:
        return _detail(request, preview, status=409, error=error.message, error_code=error.code)
    target = form.cleaned_data.get("next") or ""
    if target == "queue":
        return redirect("console:queue")
    return redirect("console:preview", preview_id=preview.pk)


def reviewer_locale(request: HttpRequest) -> str:
    """The locale a reviewer writes numbers in: their language as Django reads it from the request."""
    return translation.to_locale(translation.get_language_from_request(request))


@reviewer_required
@require_POST
def preview_counter_view(request: AuthenticatedHttpRequest, preview_id: Any) -> HttpResponse:
    """A counter-proposal in two posts: the change as typed is read back on a confirmation page ("you are
    proposing €4.50"); only the post from that page, carrying the digest of what it showed, proposes."""
    preview = _preview_or_404(request, preview_id)
    action = registry.action(preview.action)
    fields = action.counter_fields(preview) if action else []
    form = CounterProposalForm(request.POST, counter_fields=fields)
    if not fields or action is None:
        return _detail(request, preview, status=409, error="This preview cannot be changed by a reviewer.")
    if not form.is_valid():
        return _detail(
            request, preview, status=400, error="The change was incomplete; nothing was decided.", counter_form=form
        )
    if form.cleaned_data["digest"] != preview.digest:  # read nothing back for a preview that moved on
        return _detail(
            request,
            preview,
            status=409,
            error="What you saw is not what this preview says now. Review it again before deciding.",
            error_code=ErrorCode.DIGEST_MISMATCH,
        )
    with amounts_typed_in(reviewer_locale(request)) as locale:
        try:
            arguments = action.counter_arguments(preview, form.values())
        except PolicyRefusal as refusal:
            form.add_error(None, refusal.message)
            return _detail(
                request, preview, status=400, error=refusal.message, error_code=refusal.code, counter_form=form
            )
        reading = digest_of({"preview": str(preview.pk), "digest": preview.digest, "arguments": arguments})
        if form.cleaned_data["reading"] != reading:
            context = {
                "preview": preview,
                "form": form,
                "reading": reading,
                "proposing": action.counter_words(preview, arguments),
                "locale_name": Locale.parse(locale).get_display_name(DISPLAY_LOCALE),
                # Posted again with a reading: what was confirmed no longer reads the same.
                "changed": bool(form.cleaned_data["reading"]),
            }
            return render(request, "console/counter_confirm.html", context, status=409 if context["changed"] else 200)
        try:
            new = preview_counter_propose(
                preview_id=preview.pk, reviewer=request.user, digest=form.cleaned_data["digest"], values=form.values()
            )
        except DecisionError as error:
            return _detail(
                request,
                _preview_or_404(request, preview_id),
                status=409,
                error=error.message,
                error_code=error.code,
                counter_form=form,
            )
    asked = (
        "the customer is asked to confirm it"
        if new.status == PreviewStatus.AWAITING_CUSTOMER
        else ("another reviewer must approve it")
    )
    messages.success(request, f"Your counter-proposal replaced the preview; {asked}. The agent is told.")
    return redirect("console:preview", preview_id=new.pk)
