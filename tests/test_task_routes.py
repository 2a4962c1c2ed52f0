"""Celery queues by kind: money never waits behind a webhook receiver or a mail server."""

from celery import current_app
from django.conf import settings

from approvals.operations.publish import DELIVER_AUDIT_CHECKPOINT, EXECUTE_PREVIEW, NOTIFY_COUNTER_PROPOSAL


def queue_of(task_name: str) -> str:
    route = current_app.amqp.router.route({}, task_name)
    return route["queue"].name


def test_every_registered_task_is_routed_by_name_to_its_kind():
    ours = sorted(name for name in current_app.tasks if not name.startswith("celery."))
    assert ours, "the tasks are registered at start-up"
    unrouted = [name for name in ours if name not in settings.CELERY_TASK_ROUTES]
    assert unrouted == [], "add each task to settings.CELERY_QUEUES_BY_KIND"


def test_money_deliveries_and_notifications_go_to_queues_of_their_own():
    assert queue_of(EXECUTE_PREVIEW) == "executions"
    assert queue_of("approvals.resolve_unknown_executions") == "executions"
    assert queue_of("approvals.dispatch_stalled_previews") == "executions"
    assert queue_of("approvals.deliver_agent_webhook") == "deliveries"
    assert queue_of("approvals.resend_due_webhooks") == "deliveries"
    assert queue_of(DELIVER_AUDIT_CHECKPOINT) == "deliveries"
    assert queue_of("approvals.notify_reviewers") == "notifications"
    assert queue_of(NOTIFY_COUNTER_PROPOSAL) == "notifications"
    assert queue_of("refunds.notify_refund_status") == "notifications"
