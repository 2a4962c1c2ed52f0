"""Celery tasks published by their stable names (`approvals.execute_preview`, ...).

The services (and the sealer) never import approvals.tasks: the tasks import them. The tasks module is imported
at start-up (ApprovalsConfig.ready, and the worker's autodiscovery), which registers each task with the
Celery app; a task is then looked up here by name in the current app's registry. That is the task object
itself, so `delay` behaves as it always does: eager mode (CELERY_TASK_ALWAYS_EAGER) runs it in-process,
otherwise it is sent to the broker. (`send_task` would not: it always sends, never runs eagerly.)
"""

from __future__ import annotations

from typing import Any

from celery import current_app

EXECUTE_PREVIEW = "approvals.execute_preview"
NOTIFY_COUNTER_PROPOSAL = "approvals.notify_counter_proposal"
DELIVER_AUDIT_CHECKPOINT = "approvals.deliver_audit_checkpoint"
COSIGN_AUDIT_CHECKPOINT = "approvals.cosign_audit_checkpoint"
NOTIFY_REVIEWERS = "approvals.notify_reviewers"
NOTIFY_PASSKEYS_REMOVED = "approvals.notify_passkeys_removed"
DELIVER_OUTBOX = "approvals.deliver_outbox"
SWEEP_OUTBOX = "approvals.sweep_outbox"


def task_publish(name: str, *args: Any, **kwargs: Any) -> None:
    """Publish the task registered as `name` (raises what the broker raises; KeyError if unregistered)."""
    current_app.tasks[name].delay(*args, **kwargs)


def task_publish_later(name: str, *, countdown: float) -> None:
    """Publish the task registered as `name` (one taking no arguments) to run `countdown` seconds from now."""
    current_app.tasks[name].apply_async(countdown=countdown)


def task_publish_to(name: str, queue: str, *args: Any) -> None:
    """Publish the task registered as `name` on `queue` (rather than its route's)."""
    current_app.tasks[name].apply_async(args, queue=queue)
