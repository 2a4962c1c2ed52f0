"""Celery is one more interface to the services: tasks take ids and call a service.

The arrows point one way: the tasks import the services, never the reverse (the services publish a task
by its name, approvals.operations.publish). This module is imported at start-up (ApprovalsConfig.ready)
so that every task is registered before anything publishes one.
"""

import logging
import os
import random
import time
import urllib.error
import urllib.request
from typing import Any

from celery import Task, shared_task

from approvals.audit import cosigning
from approvals.audit.seal import checkpoint_webhook_send
from approvals.console import notifications
from approvals.core import outbox, services
from approvals.core.errors import TransientExecutionError
from approvals.operations import metrics
from approvals.operations.publish import (
    COSIGN_AUDIT_CHECKPOINT,
    DELIVER_AUDIT_CHECKPOINT,
    DELIVER_OUTBOX,
    EXECUTE_PREVIEW,
    NOTIFY_COUNTER_PROPOSAL,
    NOTIFY_PASSKEYS_REMOVED,
    NOTIFY_REVIEWERS,
    SWEEP_OUTBOX,
)

logger = logging.getLogger(__name__)

MAX_EXECUTION_RETRIES = 5
RETRY_BACKOFF_MAX_SECONDS = 600


@shared_task(name=EXECUTE_PREVIEW, bind=True, acks_late=True, max_retries=MAX_EXECUTION_RETRIES)
def execute_preview(self: Task, preview_id: str, fencing_token: int | None = None, **kwargs: Any) -> None:
    """One attempt. A retry carries the fencing token of the attempt that scheduled it, so only the
    chain that holds the lease goes on; a duplicate or a redelivered message finds the lease taken."""
    worker = f"{self.request.hostname or 'local'}:{os.getpid()}:{self.request.id}"
    try:
        services.preview_execute(preview_id=preview_id, fencing_token=fencing_token, worker=worker)
    except TransientExecutionError as error:
        assert self.max_retries is not None, "set by the task's decorator"
        gives_up = self.request.retries >= self.max_retries
        # Exponential backoff with full jitter; the idempotency key makes each retry safe.
        countdown = (
            0.0 if self.request.is_eager else random.uniform(0, min(RETRY_BACKOFF_MAX_SECONDS, 2**self.request.retries))
        )
        services.execution_attempt_failed(
            preview_id=preview_id, error=error, will_retry=not gives_up, retry_in=countdown
        )
        if gives_up:
            return
        if self.request.is_eager:
            # No broker to schedule a retry on (the embedded demo): retry right away, in-process.
            self.apply(
                args=(preview_id,), kwargs={"fencing_token": error.fencing_token}, retries=self.request.retries + 1
            )
            return
        raise self.retry(exc=error, countdown=countdown, kwargs={"fencing_token": error.fencing_token}) from error


@shared_task(name="approvals.expire_previews")
def expire_previews(**kwargs: Any) -> int:
    return services.previews_expire_stale()


@shared_task(name="approvals.dispatch_stalled_previews")
def dispatch_stalled_previews(**kwargs: Any) -> int:
    return services.executions_dispatch_stalled()


@shared_task(name="approvals.resolve_unknown_executions")
def resolve_unknown_executions(**kwargs: Any) -> int:
    return services.executions_resolve_unknown()


@shared_task(name=DELIVER_AUDIT_CHECKPOINT, bind=True, max_retries=5, ignore_result=True)
def deliver_audit_checkpoint(self: Task, url: str, checkpoint: dict[str, Any], **kwargs: Any) -> None:
    """POST one signed tree head to a checkpoint witness (Standard Webhooks), retried with backoff."""
    started = time.monotonic()
    try:
        checkpoint_webhook_send(url, checkpoint)
    except (urllib.error.URLError, OSError) as error:
        assert self.max_retries is not None, "set by the task's decorator"
        will_retry = not (self.request.is_eager or self.request.retries >= self.max_retries)
        if isinstance(error, urllib.error.HTTPError):
            reason = "http_4xx" if error.code < 500 else "http_5xx"
        else:
            reason = "timeout" if isinstance(getattr(error, "reason", error), TimeoutError) else "connection"
        metrics.webhook_failed(
            "audit_checkpoint", reason=reason, seconds=time.monotonic() - started, will_retry=will_retry
        )
        if not will_retry:
            logger.warning("Audit checkpoint %s not delivered to %s: %s", checkpoint.get("size"), url, error)
            return
        raise self.retry(exc=error, countdown=min(60, 2**self.request.retries)) from error
    metrics.webhook_delivered("audit_checkpoint", seconds=time.monotonic() - started)


@shared_task(name=COSIGN_AUDIT_CHECKPOINT, bind=True, max_retries=5, ignore_result=True)
def cosign_audit_checkpoint(self: Task, size: int | None = None, **kwargs: Any) -> None:
    """The latest tree head to the witnesses (after the seal of `size`; from the beat, without one).
    Witnesses that did not answer are asked again with backoff; the beat asks after that."""
    submissions = cosigning.cosignatures_collect(size)
    unanswered = any(submission.outcome == "unreachable" for submission in submissions)
    assert self.max_retries is not None, "set by the task's decorator"
    if unanswered and not self.request.is_eager and self.request.retries < self.max_retries:
        raise self.retry(countdown=cosigning.retry_countdown(self.request.retries))


@shared_task(name=NOTIFY_REVIEWERS)
def notify_reviewers(**kwargs: Any) -> dict[str, Any]:
    report = notifications.notify_reviewers()
    return {
        "emails": report.emails,
        "webhooks": report.webhooks,
        "skipped": report.skipped,
        "failures": report.failures,
    }


@shared_task(name=NOTIFY_COUNTER_PROPOSAL)
def notify_counter_proposal(preview_id: str, **kwargs: Any) -> bool:
    return notifications.counter_proposal_email(preview_id)


@shared_task(name=NOTIFY_PASSKEYS_REMOVED)
def notify_passkeys_removed(user_id: int, lead: str, names: list[str], **kwargs: Any) -> bool:
    return notifications.passkeys_removed_email(user_id, lead=lead, names=names)


@shared_task(name=DELIVER_OUTBOX, acks_late=True, ignore_result=True)
def deliver_outbox(message_pk: int, **kwargs: Any) -> bool:
    """One message of the outbox (approvals.core.outbox), on the queue of its kind."""
    return outbox.outbox_deliver(message_pk)


@shared_task(name=SWEEP_OUTBOX, ignore_result=True)
def sweep_outbox(**kwargs: Any) -> int:
    """The beat's: hand over again what the outbox still owes after its grace period."""
    return outbox.outbox_sweep()
