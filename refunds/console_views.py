"""The console's payments page: reconciliation drifts (acknowledge with a note), refunds the bank has
not paid yet or did not pay (propose a new one), and a button to reconcile now. Staff who decide
refunds only (`refunds.review_refund_order`); every form is a CSRF-protected POST."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from approvals.plugin import ApplicationError

from .models import DEAD_REFUND_STATUSES, Drift, Refund, RefundStatus
from .permissions import may_see_payments
from .reconciliation import drift_acknowledge, open_drifts, reconcile_run
from .services import refund_propose_again

View = Callable[..., HttpResponse]


def payments_staff_required(view: View) -> View:
    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not request.user.is_authenticated:
            return redirect_to_login(request.get_full_path())
        if not may_see_payments(request.user):
            return render(request, "console/forbidden.html", status=403)
        return view(request, *args, **kwargs)

    return wrapper


class AcknowledgeForm(forms.Form):
    note = forms.CharField(label="Note", max_length=2000, widget=forms.Textarea(attrs={"rows": 2}))


@payments_staff_required
@require_GET
def reconciliation(request: HttpRequest) -> HttpResponse:
    refunds = list(
        Refund.objects.filter(status__in=[RefundStatus.PENDING, *DEAD_REFUND_STATUSES])
        .select_related("order__customer", "preview")
        .order_by("-created_at")[:200]
    )
    return render(
        request,
        "console/reconciliation.html",
        {
            "nav": "payments",
            "drifts": open_drifts(),
            "pending_refunds": [refund for refund in refunds if refund.status == RefundStatus.PENDING],
            "dead_refunds": [refund for refund in refunds if refund.is_dead],
            "form": AcknowledgeForm(),
        },
    )


@payments_staff_required
@require_POST
def drift_acknowledge_view(request: HttpRequest, drift_id: int) -> HttpResponse:
    form = AcknowledgeForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Write a note saying what you found or did before acknowledging a drift.")
        return redirect("payments_console:reconciliation")
    try:
        drift = drift_acknowledge(drift_id=drift_id, person=request.user, note=form.cleaned_data["note"])
    except Drift.DoesNotExist:
        messages.error(request, "There is no such drift.")
    except ApplicationError as error:
        messages.error(request, error.message)
    else:
        messages.success(request, f"Acknowledged the drift on order {drift.order.number}. Nothing was changed.")
    return redirect("payments_console:reconciliation")


@payments_staff_required
@require_POST
def reconcile_now(request: HttpRequest) -> HttpResponse:
    run = reconcile_run()
    for error in run.errors:
        messages.error(request, error)
    messages.info(
        request, f"Reconciled {run.orders_checked} order(s): {len(run.unacknowledged)} drift(s) not acknowledged yet."
    )
    return redirect("payments_console:reconciliation")


@payments_staff_required
@require_POST
def refund_propose_again_view(request: HttpRequest, refund_id: int) -> HttpResponse:
    try:
        outcome = refund_propose_again(refund_pk=refund_id, staff=request.user)
    except Refund.DoesNotExist:
        messages.error(request, "There is no such refund.")
    except ValueError as error:
        messages.error(request, str(error))
    else:
        if outcome.kind == "refused":
            messages.error(request, f"The new refund was refused: {outcome.refusal.message}")
        else:
            preview = outcome.preview
            messages.success(
                request,
                f"Proposed a new refund on order {preview.subject_id}: the customer must "
                "confirm it before anything is paid.",
            )
            return redirect("console:preview", preview_id=preview.pk)
    return redirect("payments_console:reconciliation")
