"""Celery is one more interface to the services: tasks take ids and call a service."""

import os
import random

from celery import shared_task

from . import executions, notifications, services
from .errors import TransientExecutionError

MAX_EXECUTION_RETRIES = 5
RETRY_BACKOFF_MAX_SECONDS = 600


@shared_task(name="approvals.execute_preview", bind=True, acks_late=True, max_retries=MAX_EXECUTION_RETRIES)
def execute_preview(self, preview_id: str, fencing_token: int | None = None, **kwargs) -> None:  # type: ignore[no-untyped-def]
    """One attempt. A retry carries the fencing token of the attempt that scheduled it, so only the
    chain that holds the lease goes on; a duplicate or a redelivered message finds the lease taken."""
    worker = f"{self.request.hostname or 'local'}:{os.getpid()}:{self.request.id}"
    try:
        executions.preview_execute(preview_id=preview_id, fencing_token=fencing_token, worker=worker)
    except TransientExecutionError as error:
        gives_up = self.request.retries >= self.max_retries
        # Exponential backoff with full jitter; the idempotency key makes each retry safe.
        countdown = 0.0 if self.request.is_eager else random.uniform(
            0, min(RETRY_BACKOFF_MAX_SECONDS, 2**self.request.retries)
        )
        executions.execution_attempt_failed(
            preview_id=preview_id, error=error, will_retry=not gives_up, retry_in=countdown
        )
        if gives_up:
            return
        if self.request.is_eager:
            # No broker to schedule a retry on (the embedded demo): retry right away, in-process.
            self.apply(
                args=[preview_id], kwargs={"fencing_token": error.fencing_token}, retries=self.request.retries + 1
            )
            return
        raise self.retry(
            exc=error, countdown=countdown, kwargs={"fencing_token": error.fencing_token}
        ) from error


@shared_task(name="approvals.expire_previews")
def expire_previews(**kwargs) -> int:  # type: ignore[no-untyped-def]
    return services.previews_expire_stale()


@shared_task(name="approvals.dispatch_stalled_previews")
def dispatch_stalled_previews(**kwargs) -> int:  # type: ignore[no-untyped-def]
    return executions.executions_dispatch_stalled()


@shared_task(name="approvals.resolve_unknown_executions")
def resolve_unknown_executions(**kwargs) -> int:  # type: ignore[no-untyped-def]
    return executions.executions_resolve_unknown()


@shared_task(name="approvals.notify_reviewers")
def notify_reviewers(**kwargs) -> dict:  # type: ignore[no-untyped-def]
    report = notifications.notify_reviewers()
    return {"emails": report.emails, "webhooks": report.webhooks, "skipped": report.skipped,
            "failures": report.failures}


@shared_task(name="approvals.notify_counter_proposal")
def notify_counter_proposal(preview_id: str, **kwargs) -> bool:  # type: ignore[no-untyped-def]
    return notifications.counter_proposal_email(preview_id)
