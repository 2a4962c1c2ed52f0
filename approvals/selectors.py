"""Read helpers of the engine that actions may use."""

from typing import Any

from django.db.models import Q, QuerySet

from .models import RETRYABLE_FAILURE_CODES, Preview, PreviewStatus


def previews_in_flight(*, subject_type: str, subject_id: str, exclude: Any = None) -> QuerySet[Preview]:
    """Previews whose outside effect may already exist but is not recorded yet (started, not finished,
    or failed in a way a retry completes). Their amounts are spoken for."""
    return (
        Preview.objects.filter(subject_type=subject_type, subject_id=subject_id, execution_started_at__isnull=False)
        .filter(
            Q(status=PreviewStatus.APPROVED)
            | Q(status=PreviewStatus.FAILED, failure_code__in=RETRYABLE_FAILURE_CODES)
        )
        .exclude(pk=exclude)
    )


def amount_in_flight(*, subject_type: str, subject_id: str, exclude: Any = None) -> int:
    """The sum of previews_in_flight's amounts. Asked on every proposal: one plain indexed query over the
    subject's started previews, the rest of the condition in Python (cheaper to build than the OR)."""
    started = Preview.objects.filter(
        subject_type=subject_type,
        subject_id=subject_id,
        execution_started_at__isnull=False,
        status__in=(PreviewStatus.APPROVED, PreviewStatus.FAILED),
    ).values_list("pk", "status", "failure_code", "amount_minor")
    return sum(
        amount
        for pk, status, failure_code, amount in started
        if pk != exclude and (status == PreviewStatus.APPROVED or failure_code in RETRYABLE_FAILURE_CODES)
    )
