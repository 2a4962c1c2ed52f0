"""What the customer is told when the bank does not pay a refund."""

from __future__ import annotations

import logging

from django.conf import settings
from django.core.mail import send_mail
from django.template.loader import render_to_string

from approvals.plugin import format_minor

from .models import Refund

logger = logging.getLogger(__name__)


def refund_status_email(*, refund_pk: int) -> bool:
    """Tell the customer that the refund was not paid: nothing moved, nothing is retried by itself, and
    our staff may offer a new refund. Returns whether a message was handed to the mail server."""
    refund = Refund.objects.select_related("order__customer").filter(pk=refund_pk).first()
    if refund is None or not refund.is_dead:
        return False
    customer = refund.order.customer
    if not customer.email:
        logger.info(
            "Refund %s %s: customer %s has no email address", refund.gateway_refund_id, refund.status, customer.pk
        )
        return False
    context = {
        "refund": refund,
        "order": refund.order,
        "customer": customer,
        "amount": format_minor(refund.amount_minor, refund.currency),
        "shop_name": settings.SHOP_NAME,
    }
    subject = " ".join(render_to_string("refunds/email/refund_not_paid_subject.txt", context).split())
    body = render_to_string("refunds/email/refund_not_paid.txt", context)
    send_mail(subject, body, settings.DEFAULT_FROM_EMAIL, [customer.email])
    return True
