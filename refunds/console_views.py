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

from approvals.plugin import ApplicationError, example_major, format_minor, parse_major

from .actions import REASON_WORDS
from .models import DEAD_REFUND_STATUSES, Drift, Order, Refund, RefundStatus
from .permissions import may_see_payments
from .reconciliation import drift_acknowledge, open_drifts, reconcile_run
from .services import refund_propose_again, refund_propose_by_staff

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


class NewRefundForm(forms.Form):
    order = forms.CharField(label="Order number", max_length=64, help_text="As the customer sees it, e.g. o-12.")
    amount = forms.CharField(
        label="Amount to refund", max_length=32, help_text="In the order's currency, e.g. 12.50 (¥: 500)."
    )
    reason = forms.ChoiceField(label="Reason", choices=list(REASON_WORDS.items()))

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        number, amount = data.get("order"), data.get("amount")
        if not number or not amount:
            return data
        order = Order.objects.filter(number=number).first()
        if order is None:
            self.add_error("order", "There is no order with this number.")
            return data
        try:
            data["amount_minor"] = parse_major(amount, order.currency)
        except ValueError as error:
            self.add_error("amount", f"{error} For {order.currency}, write e.g. {example_major(order.currency)}.")
        data["order_row"] = order
        return data


@payments_staff_required
def new_refund(request: HttpRequest) -> HttpResponse:
    """Staff propose a refund for a customer's order themselves (the customer called): through the one
    admission path, as their own proposal, so that another staff member decides it if staff must."""
    if request.method == "POST":
        form = NewRefundForm(request.POST)
        if form.is_valid():
            data = form.cleaned_data
            outcome = refund_propose_by_staff(
                order_number=data["order"], amount_minor=data["amount_minor"], reason=data["reason"], staff=request.user
            )
            if outcome.kind != "refused":
                order = data["order_row"]
                amount = format_minor(data["amount_minor"], order.currency)
                messages.success(
                    request,
                    f"Proposed a refund of {amount} on order {order.number} for {order.customer.get_username()}: "
                    "the customer must confirm it, and you cannot approve it yourself.",
                )
                return redirect("console:preview", preview_id=outcome.preview.pk)
            form.add_error(None, f"The refund was refused: {outcome.refusal.message}")
        status = 400 if not form.non_field_errors() else 422
        return render(request, "console/new_refund.html", {"nav": "payments", "form": form}, status=status)
    if request.method != "GET":
        return HttpResponse(status=405, headers={"Allow": "GET, POST"})
    return render(request, "console/new_refund.html", {"nav": "payments", "form": NewRefundForm()})
