"""Read helpers of the engine that actions may use."""

from typing import Any

from django.db.models import Q, QuerySet, Sum

from .models import Preview, PreviewStatus
from .services import RETRYABLE_FAILURE_CODES


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
    total = previews_in_flight(subject_type=subject_type, subject_id=subject_id, exclude=exclude).aggregate(
        total=Sum("amount_minor")
    )["total"]
    return total or 0
