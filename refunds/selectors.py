from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Prefetch, QuerySet

from .models import Order, Refund


def customer_orders(*, customer: AbstractBaseUser) -> QuerySet[Order]:
    return Order.objects.filter(customer=customer).prefetch_related(
        Prefetch("refunds", queryset=Refund.objects.order_by("created_at"))
    )
