from __future__ import annotations

from typing import TYPE_CHECKING

from django.db.models import Prefetch, QuerySet

from .models import Order, Refund

if TYPE_CHECKING:
    from django.contrib.auth.models import User


def customer_orders(*, customer: User) -> QuerySet[Order]:
    return Order.objects.filter(customer=customer).prefetch_related(
        Prefetch("refunds", queryset=Refund.objects.order_by("created_at"))
    )
