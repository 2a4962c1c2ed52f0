"""The customer's pages: one request exactly as it will be carried out, Confirm and Decline (session +
CSRF), its status as JSON for the waiting page's small polling script, and the list of their requests."""

from __future__ import annotations

import urllib.parse
from typing import Any

from django import forms
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.timesince import timeuntil
from django.views.decorators.http import require_GET, require_POST

from approvals.core.errors import DecisionError
from approvals.core.presentation import (
    customer_decision_error,
    customer_state_words,
    format_datetime,
    preview_headline,
    preview_state_key,
)
from approvals.core.registry import registry
from approvals.core.services import preview_approve, preview_decline, preview_refresh
from approvals.core.stepup import step_up_words
from approvals.core.types import AuthenticatedHttpRequest
from approvals.models import AWAITING_STATUSES, ApprovalRole, Passkey, Preview, PreviewOrigin, PreviewStatus

# While a request is being carried out (or waits for staff) its page asks for the status: every 3
# seconds at first, then less and less often (static/js/status.js); without JavaScript, every 30.
POLL_FIRST_SECONDS = 3
NO_SCRIPT_REFRESH_SECONDS = 30


class DecisionForm(forms.Form):
    digest = forms.CharField(max_length=64, min_length=64)
    # The JSON of the browser's navigator.credentials.get answer (static/js/passkeys.js), when a passkey signed.
    passkey_assertion = forms.CharField(required=False, max_length=16 * 1024, strip=True)


class DeclineForm(DecisionForm):
    reason = forms.CharField(
        label="Why? (optional: our support team and the assistant see it)",
        max_length=500,
        required=False,
        strip=True,
        widget=forms.Textarea(attrs={"rows": 2}),
    )


def deadline_words(preview: Preview) -> str:
    """`in 9 minutes`, `in less than a minute` (never "in 0 minutes"), or `passed` once it did;
    static/js/deadline.js says the same as the time goes by."""
    now = timezone.now()
    if preview.expires_at <= now:
        return "the time to confirm has passed"
    if (preview.expires_at - now).total_seconds() < 60:
        return "in less than a minute"
    return f"in {timeuntil(preview.expires_at, now, depth=2)}"


def _waiting(preview: Preview) -> bool:
    return preview.status in (PreviewStatus.APPROVED, PreviewStatus.AWAITING_STAFF, PreviewStatus.NEEDS_ATTENTION)


def _passkey_context(preview: Preview) -> dict[str, Any]:
    """At or above CUSTOMER_STEP_UP_THRESHOLDS the confirm form has the passkey sign the digest first."""
    words = step_up_words(preview, ApprovalRole.CUSTOMER) if preview.status == PreviewStatus.AWAITING_CUSTOMER else ""
    if not words:
        return {"step_up_words": ""}
    query = "?" + urllib.parse.urlencode({"next": reverse("approvals:preview", kwargs={"preview_id": preview.pk})})
    return {
        "step_up_words": words,
        "has_passkey": Passkey.objects.filter(user_id=preview.actor_id).exists(),
        "step_up_url": reverse("account_passkeys:step_up") + query,
        "passkeys_url": reverse("account_passkeys:list") + query,
    }


def _page_context(preview: Preview, **extra: Any) -> dict[str, Any]:
    action = registry.action(preview.action)
    state_title, state_text = customer_state_words(preview)
    replacement = None
    if preview.failure_code == "counter_proposed":
        replacement = Preview.objects.filter(supersedes=preview, actor_id=preview.actor_id).first()
    return {
        "preview": preview,
        "state_key": preview_state_key(preview),
        "state_title": state_title,
        "state_text": state_text,
        "headline": preview_headline(preview),
        "rows": action.display_rows(preview) if action else [],
        "customer_facts": action.customer_facts(preview) if action else [],
        "consequence": action.consequence(preview) if action else "",
        "outcome": action.outcome_text(preview) if action and preview.executed else "",
        "expires": format_datetime(preview.expires_at),
        "deadline_words": deadline_words(preview),
        "staff_follows": ApprovalRole.STAFF in preview.required_approvals,
        "processing": _waiting(preview),
        "poll_seconds": POLL_FIRST_SECONDS,
        "no_script_refresh": NO_SCRIPT_REFRESH_SECONDS,
        "can_decide": preview.status == PreviewStatus.AWAITING_CUSTOMER,
        "decline_form": extra.pop("decline_form", None) or DeclineForm(initial={"digest": preview.digest}),
        "replacement": replacement,
        "changed_by_staff": preview.origin == PreviewOrigin.COUNTER_PROPOSAL,
        **_passkey_context(preview),
        **extra,
    }


def _own_preview(request: AuthenticatedHttpRequest, preview_id: Any) -> Preview:
    return get_object_or_404(Preview, pk=preview_id, actor=request.user)


@login_required
def preview_page(request: AuthenticatedHttpRequest, preview_id: Any) -> HttpResponse:
    preview = preview_refresh(preview=_own_preview(request, preview_id))
    return render(request, "approvals/preview.html", _page_context(preview))


def _decide(
    request: AuthenticatedHttpRequest, preview_id: Any, decide: Any, form_class: type[forms.Form] = DecisionForm
) -> HttpResponse:
    form = form_class(request.POST)
    if not form.is_valid():
        preview = _own_preview(request, preview_id)
        context = _page_context(preview, error="The form was incomplete. Look at the request again and retry.")
        return render(request, "approvals/preview.html", context, status=400)
    try:
        decide(form.cleaned_data)
    except Preview.DoesNotExist as missing:
        raise Http404 from missing
    except DecisionError as error:
        preview = preview_refresh(preview=_own_preview(request, preview_id))
        words = customer_decision_error(preview, error.code, error.message)
        told_code = {"error_code": error.code}
        if preview.status != PreviewStatus.AWAITING_CUSTOMER:
            # It moved on (expired, out of date): the status box says so, once; a second banner would repeat it.
            told = {"state_text": words} if error.code == "expired" else {}
            return render(request, "approvals/preview.html", _page_context(preview, **told), status=409)
        return render(request, "approvals/preview.html", _page_context(preview, error=words, **told_code), status=409)
    return redirect("approvals:preview", preview_id=preview_id)


@login_required
@require_POST
def preview_confirm(request: AuthenticatedHttpRequest, preview_id: Any) -> HttpResponse:
    return _decide(
        request,
        preview_id,
        lambda data: preview_approve(
            preview_id=preview_id,
            approver=request.user,
            role=ApprovalRole.CUSTOMER,
            digest=data["digest"],
            passkey_assertion=data["passkey_assertion"],
        ),
    )


@login_required
@require_POST
def preview_decline_view(request: AuthenticatedHttpRequest, preview_id: Any) -> HttpResponse:
    return _decide(
        request,
        preview_id,
        lambda data: preview_decline(
            preview_id=preview_id,
            person=request.user,
            role=ApprovalRole.CUSTOMER,
            digest=data["digest"],
            note=data.get("reason", ""),
        ),
        DeclineForm,
    )


@login_required
@require_GET
def preview_status(request: AuthenticatedHttpRequest, preview_id: Any) -> JsonResponse:
    """The request's state for the waiting page's script: `waiting` false once nothing more will change
    by itself (the page then reloads once to show the outcome)."""
    preview = preview_refresh(preview=_own_preview(request, preview_id))
    title, text = customer_state_words(preview)
    response = JsonResponse(
        {
            "status": preview.status,
            "state": preview_state_key(preview),
            "title": title,
            "text": text,
            "waiting": _waiting(preview),
        }
    )
    response["Cache-Control"] = "no-store"
    return response


@login_required
@require_GET
def my_requests(request: AuthenticatedHttpRequest) -> HttpResponse:
    """Every request made for this person (refunds, invoice sends, any action), newest first."""
    previews = Preview.objects.filter(actor=request.user).order_by("-created_at", "pk")
    page = Paginator(previews, 25).get_page(request.GET.get("page"))
    rows = []
    for preview in page.object_list:
        title, text = customer_state_words(preview)
        rows.append(
            {
                "preview": preview,
                "headline": preview_headline(preview),
                "title": title,
                "text": text,
                "to_decide": preview.status == PreviewStatus.AWAITING_CUSTOMER and preview.expires_at > timezone.now(),
                "deadline_words": deadline_words(preview) if preview.status in AWAITING_STATUSES else "",
            }
        )
    return render(request, "approvals/my_requests.html", {"page": page, "rows": rows, "nav": "requests"})
