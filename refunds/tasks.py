"""Celery tasks of the refunds app: they take ids and call a service."""

from typing import Any

from celery import shared_task


@shared_task(name="refunds.reconcile")
def reconcile(**kwargs: Any) -> int:
    """The beat's reconciliation with the provider (settings.RECONCILE_INTERVAL_SECONDS); returns the
    number of drifts nobody acknowledged yet. It reports, never repairs."""
    from .reconciliation import reconcile_run

    return len(reconcile_run().unacknowledged)


@shared_task(name="refunds.notify_refund_status")
def refund_status_notify(refund_pk: int, **kwargs: Any) -> bool:
    """Email the customer that their refund failed at the bank or was cancelled."""
    from .notifications import refund_status_email

    return refund_status_email(refund_pk=refund_pk)
