"""`manage.py check`: warn about order currencies that have no staff review threshold."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import Warning, register
from django.db import DatabaseError


@register()
def staff_review_thresholds_cover_order_currencies(app_configs: Any = None, **kwargs: Any) -> list[Warning]:
    from .actions import CATCH_ALL
    from .models import Order

    thresholds = settings.STAFF_REVIEW_THRESHOLDS
    if CATCH_ALL in thresholds:
        return []
    try:
        currencies = sorted(set(Order.objects.values_list("currency", flat=True).distinct()))
    except DatabaseError:
        # No database yet, or not migrated (a check runs before `migrate`): nothing to compare.
        return []
    missing = [code for code in currencies if code not in thresholds]
    if not missing:
        return []
    return [
        Warning(
            f"Orders in {', '.join(missing)} have no entry in STAFF_REVIEW_THRESHOLDS: every refund in "
            f"{'that currency' if len(missing) == 1 else 'those currencies'} needs a staff approval.",
            hint="Add a threshold per currency (STAFF_REVIEW_THRESHOLDS=EUR:10000,JPY:15000) "
            "or a catch-all for the others (…,*:10000).",
            id="refunds.W001",
        )
    ]


@register()
def stripe_webhook_secret_set(app_configs: Any = None, **kwargs: Any) -> list[Warning]:
    """With Stripe, refunds that fail at the bank after Stripe accepted them are heard of through its
    webhook; without the secret only reconciliation finds them (docs/payments.md)."""
    if settings.PAYMENT_GATEWAY != "stripe" or settings.STRIPE_WEBHOOK_SECRET:
        return []
    return [
        Warning(
            "PAYMENT_GATEWAY='stripe' without STRIPE_WEBHOOK_SECRET: POST /payments/stripe/webhook is off, so a "
            "refund that fails at the bank is only found by `manage.py reconcile`.",
            hint="Add the endpoint in Stripe (refund.created, refund.updated, refund.failed) and set "
            "STRIPE_WEBHOOK_SECRET to its signing secret (whsec_…).",
            id="refunds.W002",
        )
    ]
