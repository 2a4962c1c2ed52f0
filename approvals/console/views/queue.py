"""The queue, the failures, and working the queue quickly (bulk decisions, claims)."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from approvals.console import selectors
from approvals.console.forms import (
    BulkDecisionForm,
    ClaimForm,
    QueueFilterForm,
)
from approvals.console.review_work import preview_claim, preview_release, previews_decide_many
from approvals.console.views.common import (
    back_to,
    detail_page,
    passkey_links,
    preview_or_404,
    reviewer_required,
)
from approvals.core.errors import DecisionError
from approvals.core.stepup import step_up_needed
from approvals.core.types import AuthenticatedHttpRequest
from approvals.models import ApprovalRole

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


# Working the queue quickly -------------------------------------------------------------------------


@reviewer_required
@require_POST
def bulk_decide(request: AuthenticatedHttpRequest) -> HttpResponse:
    """Bulk approve or reject: a confirmation page first, then each preview decided on its own."""
    form = BulkDecisionForm(request.POST)
    if not form.is_valid():
        for error in form.non_field_errors() + form["note"].errors:
            messages.error(request, str(error))
        return redirect(back_to(request))
    allowed = selectors.reviewable_previews(user=request.user)
    decision, note = form.cleaned_data["decision"], form.cleaned_data["note"]
    if not form.cleaned_data["confirmed"]:
        shown = allowed.filter(pk__in=[i.preview_id for i in form.items]).select_related("actor")
        previews = {str(p.pk): p for p in shown}
        rows = [
            (item, selectors.queue_rows([previews[item.preview_id]])[0] if item.preview_id in previews else None)
            for item in form.items
        ]
        # One passkey assertion signs the whole list when any of them needs one (STEP_UP_THRESHOLDS).
        signing = decision == "approve" and any(step_up_needed(p, ApprovalRole.STAFF) for p in previews.values())
        return render(
            request,
            "console/bulk_confirm.html",
            {
                "rows": rows,
                "decision": decision,
                "note": note,
                "nav": "queue",
                "back": back_to(request),
                "step_up_digests": " ".join(item.digest for item in form.items) if signing else "",
                "step_up_count": sum(step_up_needed(p, ApprovalRole.STAFF) for p in previews.values()),
                "has_passkey": request.user.passkeys.exists(),
                **passkey_links("console_passkeys", back_to(request)),
            },
        )
    results = previews_decide_many(
        reviewer=request.user,
        items=form.items,
        decision=decision,
        note=note,
        allowed=allowed,
        passkey_assertion=form.cleaned_data["passkey_assertion"],
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
    return redirect(back_to(request))


@reviewer_required
@require_POST
def preview_claim_view(request: AuthenticatedHttpRequest, preview_id: Any) -> HttpResponse:
    preview = preview_or_404(request, preview_id)
    form = ClaimForm(request.POST)
    if not form.is_valid():
        return detail_page(request, preview, status=400, error="The form was incomplete; nothing changed.")
    operation = form.cleaned_data["operation"]
    try:
        if operation == "release":
            preview_release(preview=preview, reviewer=request.user)
            messages.success(request, "You gave the preview back to the queue.")
        elif operation == "assign":
            assignee = selectors.assignable_reviewers(preview=preview).filter(pk=form.cleaned_data["assignee"]).first()
            if assignee is None:
                return detail_page(request, preview, status=400, error="Choose a reviewer who may decide this preview.")
            preview_claim(preview=preview, reviewer=assignee, by=request.user)
            messages.success(request, f"Assigned to {assignee.get_username()}.")
        else:
            preview_claim(preview=preview, reviewer=request.user, take_over=operation == "take_over")
            messages.success(request, "You are working on this preview; others see it as yours.")
    except DecisionError as error:
        return detail_page(request, preview, status=409, error=error.message, error_code=error.code)
    target = form.cleaned_data.get("next") or ""
    if target == "queue":
        return redirect("console:queue")
    return redirect("console:preview", preview_id=preview.pk)
