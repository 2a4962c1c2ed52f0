from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import render

from approvals.plugin import OPEN_STATUSES, AuthenticatedHttpRequest, Preview

from .selectors import customer_orders


@login_required
def order_list(request: AuthenticatedHttpRequest) -> HttpResponse:
    orders = list(customer_orders(customer=request.user))
    pending = Preview.objects.filter(actor=request.user, subject_type="order", status__in=OPEN_STATUSES).order_by(
        "created_at"
    )
    return render(request, "refunds/order_list.html", {"orders": orders, "pending": pending})
