"""What every console view shares: the access guards, the preview lookup, the detail page."""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib.auth.views import redirect_to_login
from django.http import Http404, HttpRequest, HttpResponse
from django.http.response import HttpResponseBase
from django.shortcuts import render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme

from approvals.console import selectors
from approvals.console.forms import (
    ApproveForm,
    CounterProposalForm,
    InternalNoteForm,
    RejectForm,
)
from approvals.core.presentation import customer_note, preview_state_key
from approvals.core.stepup import step_up_words
from approvals.core.types import AuthenticatedHttpRequest
from approvals.core.words import customer_wrote
from approvals.models import ApprovalRole, Preview, PreviewOrigin, PreviewStatus

View = Callable[..., HttpResponseBase]


def forbidden(request: HttpRequest) -> HttpResponse:
    return render(request, "console/forbidden.html", status=403)


def guard(allowed: Callable[[Any], bool]) -> Callable[[View], View]:
    """Anonymous people go to the login page; anyone else without the permission gets a bare 403."""

    def decorator(view: View) -> View:
        @wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            if not request.user.is_authenticated:
                return redirect_to_login(request.get_full_path())
            if not allowed(request.user):
                return forbidden(request)
            return view(request, *args, **kwargs)

        return wrapper

    return decorator


reviewer_required = guard(lambda user: selectors.console_access(user=user))
auditor_required = guard(lambda user: selectors.may_export_audit(user=user))
sessions_viewer_required = guard(lambda user: selectors.may_see_agent_sessions(user=user))


def preview_or_404(request: AuthenticatedHttpRequest, preview_id: Any) -> Preview:
    try:
        return selectors.reviewable_preview(user=request.user, preview_id=preview_id)
    except Preview.DoesNotExist as missing:
        raise Http404("No such preview.") from missing


def passkey_links(namespace: str, back: str) -> dict[str, str]:
    """The step-up options URL and the passkeys page, each naming the page to come back to."""
    query = "?" + urllib.parse.urlencode({"next": back})
    return {
        "step_up_url": reverse(f"{namespace}:step_up") + query,
        "passkeys_url": reverse(f"{namespace}:list") + query,
    }


def detail_page(
    request: AuthenticatedHttpRequest, preview: Preview, *, status: int = 200, **extra: Any
) -> HttpResponse:
    review = selectors.preview_review(preview=preview)
    can_decide = preview.status == PreviewStatus.AWAITING_STAFF
    here = reverse("console:preview", kwargs={"preview_id": preview.pk})
    # At or above STEP_UP_THRESHOLDS the approve form has the passkey sign the digest first.
    signing = step_up_words(preview, ApprovalRole.STAFF) if can_decide else ""
    context = {
        "step_up_words": signing,
        "has_passkey": bool(signing) and request.user.passkeys.exists(),
        **passkey_links("console_passkeys", here),
        "review": review,
        "preview": preview,
        "can_decide": can_decide,
        "i_approved": can_decide and preview.approvals.filter(role=ApprovalRole.STAFF, approver=request.user).exists(),
        "my_counter": can_decide
        and preview.origin == PreviewOrigin.COUNTER_PROPOSAL
        and preview.proposed_by_id == request.user.pk,
        "my_proposal": can_decide
        and preview.origin in (PreviewOrigin.STAFF_PROPOSAL, PreviewOrigin.STAFF_REPROPOSAL)
        and preview.proposed_by_id == request.user.pk,
        "counter_form": extra.pop("counter_form", None)
        or CounterProposalForm(initial={"digest": preview.digest}, counter_fields=review.counter_fields),
        "reviewers": selectors.assignable_reviewers(preview=preview) if can_decide else [],
        # Checked against the subject as it is now: meaningful while the preview may still run.
        "show_policy": preview.is_open or preview.status in (PreviewStatus.FAILED, PreviewStatus.NEEDS_ATTENTION),
        "own_proposal": preview.actor_id == request.user.pk,
        "attempts": selectors.preview_attempts(preview=preview),
        "history": selectors.customer_history(preview=preview),
        "internal_notes": preview.internal_notes.select_related("author"),
        "note_form": extra.pop("note_form", None) or InternalNoteForm(),
        "approve_form": ApproveForm(initial={"digest": preview.digest}),
        "reject_form": RejectForm(initial={"digest": preview.digest}),
        "processing": preview.status == PreviewStatus.APPROVED,
        "state_key": preview_state_key(preview, review.execution),
        "customer_note": customer_wrote(note) if (note := customer_note(preview)) else "",
        **extra,
    }
    return render(request, "console/detail.html", context, status=status)


def back_to(request: HttpRequest) -> str:
    """Where the queue page was (its filters), never anywhere outside the console."""
    target = request.POST.get("back", "")
    queue = reverse("console:queue")
    if target.startswith(queue) and url_has_allowed_host_and_scheme(target, allowed_hosts=None):
        return target
    return queue
