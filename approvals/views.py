"""The customer's confirmation page: the exact preview, Confirm and Decline (session + CSRF)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from .errors import DecisionError
from .models import ApprovalRole, Preview, PreviewStatus
from .presentation import format_datetime, preview_headline, preview_state_key, preview_state_words
from .registry import registry
from .services import preview_approve, preview_decline, preview_refresh


class DecisionForm(forms.Form):
    digest = forms.CharField(max_length=64, min_length=64)


def _page_context(preview: Preview, **extra: Any) -> dict[str, Any]:
    action = registry.action(preview.action)
    state_title, state_text = preview_state_words(preview, "customer")
    return {
        "preview": preview,
        "state_key": preview_state_key(preview),
        "state_title": state_title,
        "state_text": state_text,
        "headline": preview_headline(preview),
        "rows": action.display_rows(preview) if action else [],
        "consequence": action.consequence(preview) if action else "",
        "outcome": action.outcome_text(preview) if action and preview.executed else "",
        "expires": format_datetime(preview.expires_at),
        "staff_follows": ApprovalRole.STAFF in preview.required_approvals,
        "processing": preview.status in (PreviewStatus.APPROVED, PreviewStatus.AWAITING_STAFF),
        "can_decide": preview.status == PreviewStatus.AWAITING_CUSTOMER,
        **extra,
    }


def _own_preview(request: HttpRequest, preview_id: Any) -> Preview:
    return get_object_or_404(Preview, pk=preview_id, actor=request.user)


@login_required
def preview_page(request: HttpRequest, preview_id: Any) -> HttpResponse:
    preview = preview_refresh(preview=_own_preview(request, preview_id))
    return render(request, "approvals/preview.html", _page_context(preview))


def _decide(request: HttpRequest, preview_id: Any, decide: Any) -> HttpResponse:
    form = DecisionForm(request.POST)
    if not form.is_valid():
        preview = _own_preview(request, preview_id)
        context = _page_context(preview, error="The form was incomplete. Review the preview and try again.")
        return render(request, "approvals/preview.html", context, status=400)
    try:
        decide(form.cleaned_data["digest"])
    except Preview.DoesNotExist as missing:
        raise Http404 from missing
    except DecisionError as error:
        preview = _own_preview(request, preview_id)
        return render(request, "approvals/preview.html", _page_context(preview, error=error.message), status=409)
    return redirect("approvals:preview", preview_id=preview_id)


@login_required
@require_POST
def preview_confirm(request: HttpRequest, preview_id: Any) -> HttpResponse:
    return _decide(
        request,
        preview_id,
        lambda digest: preview_approve(
            preview_id=preview_id, approver=request.user, role=ApprovalRole.CUSTOMER, digest=digest
        ),
    )


@login_required
@require_POST
def preview_decline_view(request: HttpRequest, preview_id: Any) -> HttpResponse:
    return _decide(
        request,
        preview_id,
        lambda digest: preview_decline(
            preview_id=preview_id, person=request.user, role=ApprovalRole.CUSTOMER, digest=digest
        ),
    )
