"""One preview: its page, its documents and status, and the decisions on it (approve, reject, retry,
counter-propose)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from babel import Locale
from csp.decorators import csp_replace, csp_update
from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import translation
from django.views.decorators.clickjacking import xframe_options_sameorigin
from django.views.decorators.http import require_GET, require_POST

from approvals.console import selectors
from approvals.console.forms import (
    ApproveForm,
    CounterProposalForm,
    InternalNoteForm,
    RejectForm,
)
from approvals.console.review_work import preview_note_add
from approvals.console.views.common import (
    detail_page,
    preview_or_404,
    reviewer_required,
)
from approvals.core.counter import preview_counter_propose
from approvals.core.digests import digest_of
from approvals.core.errors import DecisionError, ErrorCode, PolicyRefusal
from approvals.core.money import DISPLAY_LOCALE, amounts_typed_in
from approvals.core.presentation import preview_execution, preview_state_key
from approvals.core.registry import registry
from approvals.core.services import (
    execution_retry,
    preview_approve,
    preview_decline,
    preview_refresh,
)
from approvals.core.types import AuthenticatedHttpRequest
from approvals.models import ApprovalRole, PreviewStatus

# One preview ---------------------------------------------------------------------------------


@reviewer_required
@require_GET
@xframe_options_sameorigin
@csp_update({"style-src": ["'unsafe-inline'"], "img-src": ["data:"]})
@csp_replace(  # type: ignore[arg-type]  # django-csp types a view as taking the request alone
    {"frame-ancestors": ["'self'"], "sandbox": [True], "default-src": ["'none'"]}
)
def preview_document(request: AuthenticatedHttpRequest, preview_id: Any, part: str) -> HttpResponse:
    """The document a reviewer approves (the email body or its attachment), for a sandboxed frame."""
    preview = preview_or_404(request, preview_id)
    action = registry.action(preview.action)
    document = action.review_document(preview) if action else None
    if document is None or part not in ("body", "attachment"):
        raise Http404("No such document.")
    html = document.html if part == "body" else document.attachment_html
    return HttpResponse(html, content_type="text/html; charset=utf-8")


@reviewer_required
@require_GET
def preview_detail(request: AuthenticatedHttpRequest, preview_id: Any) -> HttpResponse:
    preview = preview_refresh(preview=preview_or_404(request, preview_id))
    return detail_page(request, preview)


def _decide(
    request: AuthenticatedHttpRequest, preview_id: Any, form: Any, decide: Callable[[dict[str, Any]], Any], done: str
) -> HttpResponse:
    preview = preview_or_404(request, preview_id)
    if not form.is_valid():
        extra = {"reject_form": form} if isinstance(form, RejectForm) else {}
        return detail_page(request, preview, status=400, error="The form was incomplete; nothing was decided.", **extra)
    try:
        decide(form.cleaned_data)
    except DecisionError as error:
        return detail_page(
            request, preview_or_404(request, preview_id), status=409, error=error.message, error_code=error.code
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
    preview = preview_refresh(preview=preview_or_404(request, preview_id))
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
            passkey_assertion=data["passkey_assertion"],
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
    preview = preview_or_404(request, preview_id)
    try:
        nothing_happened = request.POST.get("verdict") == "nothing_happened"
        execution_retry(preview_id=preview.pk, staff=request.user, nothing_happened=nothing_happened)
    except DecisionError as error:
        return detail_page(
            request, preview_or_404(request, preview_id), status=409, error=error.message, error_code=error.code
        )
    messages.success(
        request, "Handed to the worker with the same preview and idempotency key; the status below is the real one."
    )
    return redirect("console:preview", preview_id=preview.pk)


@reviewer_required
@require_POST
def preview_note_view(request: AuthenticatedHttpRequest, preview_id: Any) -> HttpResponse:
    """An internal note for staff; the customer and the agent never see it."""
    preview = preview_or_404(request, preview_id)
    form = InternalNoteForm(request.POST)
    if not form.is_valid():
        return detail_page(request, preview, status=400, error="The note was empty; nothing was kept.", note_form=form)
    try:
        preview_note_add(preview=preview, author=request.user, body=form.cleaned_data["body"])
    except (DecisionError, ValueError) as error:
        message = error.message if isinstance(error, DecisionError) else str(error)
        return detail_page(request, preview, status=409, error=message, note_form=form)
    messages.success(request, "Your internal note is kept with this preview; only staff see it.")
    return redirect(reverse("console:preview", kwargs={"preview_id": preview.pk}) + "#internal-notes")


def reviewer_locale(request: HttpRequest) -> str:
    """The locale a reviewer writes numbers in: their language as Django reads it from the request."""
    return translation.to_locale(translation.get_language_from_request(request))


@reviewer_required
@require_POST
def preview_counter_view(request: AuthenticatedHttpRequest, preview_id: Any) -> HttpResponse:
    """A counter-proposal in two posts: the change as typed is read back on a confirmation page ("you are
    proposing €4.50"); only the post from that page, carrying the digest of what it showed, proposes."""
    preview = preview_or_404(request, preview_id)
    action = registry.action(preview.action)
    fields = action.counter_fields(preview) if action else []
    form = CounterProposalForm(request.POST, counter_fields=fields)
    if not fields or action is None:
        return detail_page(request, preview, status=409, error="This preview cannot be changed by a reviewer.")
    if not form.is_valid():
        return detail_page(
            request, preview, status=400, error="The change was incomplete; nothing was decided.", counter_form=form
        )
    if form.cleaned_data["digest"] != preview.digest:  # read nothing back for a preview that moved on
        return detail_page(
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
            return detail_page(
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
            return detail_page(
                request,
                preview_or_404(request, preview_id),
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
