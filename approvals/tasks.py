"""Celery is one more interface to the services: tasks take ids and call a service."""

import random

from celery import shared_task

from . import services
from .errors import TransientExecutionError

MAX_EXECUTION_RETRIES = 5
RETRY_BACKOFF_MAX_SECONDS = 600


@shared_task(name="approvals.execute_preview", bind=True, acks_late=True, max_retries=MAX_EXECUTION_RETRIES)
def execute_preview(self, preview_id: str, **kwargs) -> None:  # type: ignore[no-untyped-def]
    try:
        services.preview_execute(preview_id=preview_id)
    except TransientExecutionError as error:
        gives_up = self.request.retries >= self.max_retries
        services.preview_execution_attempt_failed(
            preview_id=preview_id, attempt=self.request.retries + 1, error=str(error), will_retry=not gives_up
        )
        if gives_up:
            services.preview_fail(
                preview_id=preview_id,
                code="retries_exhausted",
                reason=f"Gave up after {self.request.retries + 1} attempts: {error}",
            )
            return
        if self.request.is_eager:
            # No broker to schedule a retry on (the embedded demo): retry right away, in-process.
            self.apply(args=[preview_id], retries=self.request.retries + 1)
            return
        # Exponential backoff with full jitter; the idempotency key makes each retry safe.
        countdown = random.uniform(0, min(RETRY_BACKOFF_MAX_SECONDS, 2**self.request.retries))
        raise self.retry(exc=error, countdown=countdown) from error


@shared_task(name="approvals.expire_previews")
def expire_previews(**kwargs) -> int:  # type: ignore[no-untyped-def]
    return services.previews_expire_stale()


@shared_task(name="approvals.dispatch_stalled_previews")
def dispatch_stalled_previews(**kwargs) -> int:  # type: ignore[no-untyped-def]
    return services.previews_dispatch_stalled()
